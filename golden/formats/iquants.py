"""ggml's non-linear and grid ("i-quant") formats: IQ4_NL, IQ4_XS, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
IQ3_S, IQ1_S, IQ1_M (ggml-common.h; their tables are :mod:`golden.formats.grids`').

Layouts (f16 and uint16 fields little-endian; "group" = 8 consecutive elements, the unit one grid
index and one sign byte cover; ``sub`` = 32-element sub-block ``ib`` of the 256-element super-block):

* IQ4_NL, 18 bytes / 32: ``d, qs[16]``; element j < 16 is ``d·kvalues_iq4nl[qs[j] & 15]``, j + 16 the
  high nibble's.
* IQ4_XS, 136 bytes / 256: ``d, scales_h (u16), scales_l[4], qs[128]``; sub ``ib``'s 6-bit scale is
  nibble ``ib % 2`` of ``scales_l[ib / 2]`` | bits 2ib..2ib+1 of ``scales_h`` << 4;
  ``dl = d·(ls − 32)``; its 16 qs bytes decode as IQ4_NL's with ``dl``.
* IQ2_XXS, 66 bytes: ``d, qs[64]``; per sub 8 bytes: 4 grid indices (``iq2xxs_grid``), then a u32
  whose bits 7l..7l+6 pick group l's ``ksigns_iq2xs`` entry and whose top 4 bits ``s`` give
  ``db = d·(0.5 + s)·0.25``.
* IQ2_XS, 74 bytes: ``d, qs[32] (u16), scales[8]``; a u16 is a 9-bit ``iq2xs_grid`` index and a
  7-bit sign index; ``db = d·(0.5 + nibble)·0.25``, the low nibble of ``scales[ib]`` for groups 0, 1.
* IQ2_S, 82 bytes: ``d, qs[32], signs[32], qh[8], scales[8]``; index = ``qs`` | bits 2l..2l+1 of
  ``qh[ib]`` << 8 (``iq2s_grid``, 1024), the sign byte is stored whole; scales as IQ2_XS.
* IQ3_XXS, 98 bytes: ``d, qs[64], scales_and_signs[32]``; two ``iq3xxs_grid`` indices (4 values
  each) per group; the u32 of sub ``ib`` as IQ2_XXS's, with ``db = d·(0.5 + s)·0.5``.
* IQ3_S, 110 bytes: ``d, qs[64], qh[8], signs[32], scales[4]``; index = ``qs[8ib + k]`` | bit k of
  ``qh[ib]`` << 8 (``iq3s_grid``, 512); ``db = d·(1 + 2·nibble)``, nibble ``ib % 2`` of
  ``scales[ib / 2]``.
* IQ1_S, 50 bytes: ``d, qs[32], qh[8] (u16)``; index = ``qs[4ib + l]`` | bits 3l..3l+2 of ``qh[ib]``
  << 8 (``iq1s_grid``, 2048 entries of −1/0/1); ``dl = d·(2·((qh >> 12) & 7) + 1)``, value
  ``dl·(grid + delta)`` with ``delta = ∓IQ1S_DELTA`` by bit 15.
* IQ1_M, 56 bytes: ``qs[32], qh[16], scales[8]`` (4 u16); ``d`` is the f16 made of the top nibbles of
  the four u16; each sub has two 3-bit scales (bits 6(ib%2)..+2 and +3..+5 of u16 ``ib / 2``), one
  per 16 elements; per group, 3 index bits and a delta sign bit from a nibble of ``qh``.

Every product is one f32 rounding in the C order (libggml-base has no FMA): the scale first, then the
grid value; a stored sign flips the sign bit (as the compiled C does, a NaN's included). So
dequantization is bit for bit ``to_float`` on any bytes.
"""

from __future__ import annotations

import functools

import numpy as np

from golden.formats import grids
from golden.formats.format import Format, Rounding, block_rows, check_rounding, f16_column, float_blocks, nibbles
from golden.formats.kquants import _nearest_int
from golden.quant import _f16_bits

QK_K = 256
_CHUNK_BLOCKS = 1024  # 1 MiB of f32 output a chunk

KVALUES_IQ4NL = grids.table("kvalues_iq4nl").astype(np.float32)


def dequantize_iq4_nl(raw: np.ndarray, n: int) -> np.ndarray:
    blocks = block_rows(raw, "iq4_nl", 32, 18, n)
    d = np.ascontiguousarray(blocks[:, :2]).view("<f2").astype(np.float32)  # [nblocks, 1]
    values = KVALUES_IQ4NL[nibbles(blocks[:, 2:])]
    with np.errstate(invalid="ignore", over="ignore"):  # inf/NaN scales propagate as in C
        return (values * d).reshape(-1)


def _u16(blocks: np.ndarray, start: int, stop: int) -> np.ndarray:
    return np.ascontiguousarray(blocks[:, start:stop]).view("<u2")


def _u32(blocks: np.ndarray, start: int, stop: int) -> np.ndarray:
    return np.ascontiguousarray(blocks[:, start:stop]).view("<u4")


def _iq4_xs_body(blocks: np.ndarray, out: np.ndarray) -> None:
    m = blocks.shape[0]
    scales_h = _u16(blocks, 2, 4)  # (m, 1)
    low = nibbles(blocks[:, 4:8]).reshape(m, 2, 4).transpose(0, 2, 1).reshape(m, 8)  # nibble ib % 2 of byte ib / 2
    high = (scales_h >> np.arange(0, 16, 2, dtype=np.uint16)[None, :]) & np.uint16(3)
    ls = low.astype(np.int16) | (high.astype(np.int16) << np.int16(4))
    dl = f16_column(blocks, 0)[:, None] * (ls - np.int16(32)).astype(np.float32)  # (m, 8)
    q = nibbles(blocks[:, 8:136].reshape(m * 8, 16)).reshape(m, 8, 32)
    np.multiply(dl[:, :, None], KVALUES_IQ4NL[q], out=out.reshape(m, 8, 32))



_SEVEN_BIT_SHIFTS = np.array([0, 7, 14, 21], np.uint32)


def _signed_groups(db: np.ndarray, values: np.ndarray, sign_masks: np.ndarray, out: np.ndarray) -> None:
    """out = db·values (one f32 rounding), then the sign bits of ``sign_masks`` flipped in place."""
    np.multiply(db, values, out=out)
    bits = out.view(np.uint32)
    np.bitwise_xor(bits, sign_masks, out=bits)


def _half_quarter_scales(d: np.ndarray, codes: np.ndarray, factor: float) -> np.ndarray:
    """``d·(0.5 + code)·factor`` (IQ2_XXS, IQ2_XS, IQ2_S: 0.25; IQ3_XXS: 0.5), in the C's order."""
    scaled = d.reshape((-1,) + (1,) * (codes.ndim - 1)) * (np.float32(0.5) + codes.astype(np.float32))
    return scaled * np.float32(factor)


def _iq2_xxs_body(blocks: np.ndarray, out: np.ndarray) -> None:
    m = blocks.shape[0]
    sub = blocks[:, 2:66].reshape(m, 8, 8)
    aux = np.ascontiguousarray(sub[:, :, 4:8]).view("<u4")  # (m, 8, 1)
    db = _half_quarter_scales(f16_column(blocks, 0), aux[:, :, 0] >> np.uint32(28), 0.25)
    sign_index = (aux >> _SEVEN_BIT_SHIFTS) & np.uint32(127)  # (m, 8, 4)
    values = grids.float_grid("iq2xxs_grid")[sub[:, :, 0:4]]  # (m, 8, 4, 8)
    _signed_groups(db[:, :, None, None], values, grids.sign_masks()[sign_index], out.reshape(m, 8, 4, 8))


def _nibble_scales(scales: np.ndarray) -> np.ndarray:
    """(m, 8) scale bytes -> (m, 8, 2): the low nibble (groups 0, 1 of the sub-block), then the high."""
    return np.stack([scales & np.uint8(0x0F), scales >> np.uint8(4)], axis=2)


def _iq2_xs_body(blocks: np.ndarray, out: np.ndarray) -> None:
    m = blocks.shape[0]
    qs = _u16(blocks, 2, 66).reshape(m, 8, 2, 2)  # (sub, pair, group)
    db = _half_quarter_scales(f16_column(blocks, 0), _nibble_scales(blocks[:, 66:74]), 0.25)
    values = grids.float_grid("iq2xs_grid")[qs & np.uint16(511)]
    signs = grids.sign_masks()[qs >> np.uint16(9)]
    _signed_groups(db[:, :, :, None, None], values, signs, out.reshape(m, 8, 2, 2, 8))


def _iq2_s_body(blocks: np.ndarray, out: np.ndarray) -> None:
    m = blocks.shape[0]
    high = (blocks[:, 66:74, None] >> np.array([0, 2, 4, 6], np.uint8)) & np.uint8(3)  # (m, 8, 4)
    index = blocks[:, 2:34].reshape(m, 8, 4).astype(np.uint16) | (high.astype(np.uint16) << np.uint16(8))
    db = _half_quarter_scales(f16_column(blocks, 0), _nibble_scales(blocks[:, 74:82]), 0.25)
    values = grids.float_grid("iq2s_grid")[index.reshape(m, 8, 2, 2)]
    signs = grids.byte_sign_masks()[blocks[:, 34:66].reshape(m, 8, 2, 2)]
    _signed_groups(db[:, :, :, None, None], values, signs, out.reshape(m, 8, 2, 2, 8))


def _iq3_xxs_body(blocks: np.ndarray, out: np.ndarray) -> None:
    m = blocks.shape[0]
    aux = _u32(blocks, 66, 98)  # (m, 8)
    db = _half_quarter_scales(f16_column(blocks, 0), aux >> np.uint32(28), 0.5)
    sign_index = (aux[:, :, None] >> _SEVEN_BIT_SHIFTS) & np.uint32(127)  # (m, 8, 4)
    values = grids.float_grid("iq3xxs_grid")[blocks[:, 2:66]].reshape(m, 8, 4, 8)  # two indices a group
    _signed_groups(db[:, :, None, None], values, grids.sign_masks()[sign_index], out.reshape(m, 8, 4, 8))


def _iq3_s_body(blocks: np.ndarray, out: np.ndarray) -> None:
    m = blocks.shape[0]
    high = (blocks[:, 66:74, None] >> np.arange(8, dtype=np.uint8)) & np.uint8(1)  # (m, sub, k)
    index = blocks[:, 2:66].reshape(m, 8, 8).astype(np.uint16) | (high.astype(np.uint16) << np.uint16(8))
    codes = nibbles(blocks[:, 106:110]).reshape(m, 2, 4).transpose(0, 2, 1).reshape(m, 8)  # nibble ib % 2
    db = f16_column(blocks, 0)[:, None] * (np.int16(1) + np.int16(2) * codes.astype(np.int16)).astype(np.float32)
    values = grids.float_grid("iq3s_grid")[index].reshape(m, 8, 4, 8)
    signs = grids.byte_sign_masks()[blocks[:, 74:106].reshape(m, 8, 4)]
    _signed_groups(db[:, :, None, None], values, signs, out.reshape(m, 8, 4, 8))


@functools.cache
def _shifted_grid_table() -> np.ndarray:
    """(4096, 8) float32: row ``index | negative << 11`` is ``iq1s_grid[index] ± IQ1S_DELTA``, each
    entry the one f32 sum ``to_float`` forms, so a single gather replaces a gather and an add."""
    delta = grids.iq1s_delta()
    grid = grids.float_grid("iq1s_grid")
    out = np.concatenate([grid + delta, grid - delta]).astype(np.float32)
    out.setflags(write=False)
    return out


def _shifted_grid(index: np.ndarray, delta_negative: np.ndarray) -> np.ndarray:
    """``grid[j] + delta`` of ``iq1s_grid`` (exact in f32): (..., 8) for (...) indices and delta signs."""
    rows = index.astype(np.uint16) | (delta_negative.astype(np.uint16) << np.uint16(11))
    return _shifted_grid_table()[rows]


def _odd_scales(d: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """``d·(2·code + 1)``: the integer first, then one f32 product (IQ1_S, IQ1_M)."""
    odd = (np.int16(2) * codes.astype(np.int16) + np.int16(1)).astype(np.float32)
    return d.reshape((-1,) + (1,) * (codes.ndim - 1)) * odd


def _iq1_s_body(blocks: np.ndarray, out: np.ndarray) -> None:
    m = blocks.shape[0]
    qh = _u16(blocks, 34, 50)  # (m, 8)
    high = (qh[:, :, None] >> np.array([0, 3, 6, 9], np.uint16)) & np.uint16(7)
    index = blocks[:, 2:34].reshape(m, 8, 4).astype(np.uint16) | (high << np.uint16(8))
    dl = _odd_scales(f16_column(blocks, 0), (qh >> np.uint16(12)) & np.uint16(7))  # (m, 8)
    shifted = _shifted_grid(index, np.broadcast_to(((qh & np.uint16(0x8000)) != 0)[:, :, None], index.shape))
    np.multiply(dl[:, :, None, None], shifted, out=out.reshape(m, 8, 4, 8))


def _iq1_m_body(blocks: np.ndarray, out: np.ndarray) -> None:
    m = blocks.shape[0]
    sc = _u16(blocks, 48, 56)  # (m, 4)
    d_bits = ((sc[:, 0] >> np.uint16(12)) | ((sc[:, 1] >> np.uint16(8)) & np.uint16(0x00F0))
              | ((sc[:, 2] >> np.uint16(4)) & np.uint16(0x0F00)) | (sc[:, 3] & np.uint16(0xF000)))
    d = d_bits.view("<f2").astype(np.float32)
    fields = (sc[:, :, None] >> np.array([0, 3, 6, 9], np.uint16)) & np.uint16(7)  # (m, 4, 4): ib % 2, half
    dl = _odd_scales(d, fields.reshape(m, 8, 2))  # (m, sub, half)
    nib = (blocks[:, 32:48].reshape(m, 8, 2, 1) >> np.array([0, 4], np.uint8)) & np.uint8(0x0F)  # (m, 8, 2, 2)
    index = blocks[:, 0:32].reshape(m, 8, 2, 2).astype(np.uint16) | ((nib & np.uint8(7)).astype(np.uint16) << 8)
    shifted = _shifted_grid(index, (nib & np.uint8(8)) != 0)  # (m, 8, half, 2, 8)
    np.multiply(dl[:, :, :, None, None], shifted, out=out.reshape(m, 8, 2, 2, 8))


# --------------------------------------------------------------------------------------------
# IQ4_NL / IQ4_XS quantizer (quantize_row_iq4_nl_impl without an importance matrix). ggml_quantize_chunk
# searches 15 scales (ntry = 7); IQ4_NL's from_float (quantize_row_iq4_nl_ref: CPY/SET_ROWS into it) takes
# the first pass only (ntry = −1, found by experiment); IQ4_XS's from_float is the chunk code

_GROUP_MAX_EPS = np.float32(1e-15)
_QUANT_CHUNK = 4096  # 32-element groups a pass


def _best_index(x: np.ndarray) -> np.ndarray:
    """``best_index_int8(16, kvalues_iq4nl, x)``: the nearest table entry, the upper one on a tie (f32
    differences). The C's early returns need no case of their own: below the table the lower pair entry
    wins, above it (and for NaN, where every comparison is false) the upper one."""
    upper = np.searchsorted(KVALUES_IQ4NL, x, side="right")
    np.clip(upper, 1, 15, out=upper)
    lower = upper - 1
    closer_below = x - KVALUES_IQ4NL[lower] < KVALUES_IQ4NL[upper] - x
    return (upper - closer_below).astype(np.uint8)


def _sums(w: np.ndarray, q: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """C's ``sumqx += w*q*x; sumq2 += w*q*q`` from 0 in element order, f32 (groups on axis 1)."""
    wq = w * q
    qx, q2 = wq * x, wq * q
    sumqx = np.zeros(x.shape[1], np.float32)
    sumq2 = np.zeros(x.shape[1], np.float32)
    for j in range(x.shape[0]):
        sumqx += qx[j]
        sumq2 += q2[j]
    return sumqx, sumq2


def _group_scales(xt: np.ndarray, ntry: int) -> tuple[np.ndarray, np.ndarray]:
    """Each 32-element group's scale search over ``2·ntry + 1`` tries; ``xt`` is (32, groups). Returns the
    scales (0 for a group of amax < GROUP_MAX_EPS) and the quants of the first pass."""
    w = xt * xt
    magnitude = np.abs(xt)
    magnitude[np.isnan(magnitude)] = 0  # NaN never wins the strict > scan
    first = magnitude.argmax(axis=0)[None, :]
    amax = np.take_along_axis(magnitude, first, axis=0)[0]
    signed_max = np.take_along_axis(xt, first, axis=0)[0]
    d = (-signed_max if ntry > 0 else signed_max) / KVALUES_IQ4NL[0]
    levels = _best_index(xt * (np.float32(1) / d))
    sumqx, sumq2 = _sums(w, KVALUES_IQ4NL[levels], xt)
    # a first pass whose sum of squares is not > 0 (NaN from a NaN element) gives d = 0, not sumqx/sumq2:
    # found by experiment (a NaN anywhere in a group stores d = 0 on 0.17.0, 0.20.2 and 0.25.1)
    d = np.where(sumq2 > 0, sumqx / sumq2, np.float32(0)).astype(np.float32)
    best = d * sumqx
    for itry in range(-ntry, ntry + 1):
        inv = np.float32(itry + int(KVALUES_IQ4NL[0])) / signed_max
        tqx, tq2 = _sums(w, KVALUES_IQ4NL[_best_index(xt * inv)], xt)
        better = (tq2 > 0) & (tqx * tqx > best * tq2)
        d = np.where(better, tqx / tq2, d)
        best = np.where(better, d * tqx, best)
    tiny = amax < _GROUP_MAX_EPS
    levels[:, tiny] = 0  # ggml writes none there (see _quantize_iq4_nl_chunk)
    return np.where(tiny, np.float32(0), d).astype(np.float32), levels


def _pack_iq4(levels: np.ndarray) -> np.ndarray:
    """(32, groups) levels -> (groups, 16) qs bytes: element j in the low nibble, j + 16 in the high."""
    return (levels[:16] | (levels[16:] << np.uint8(4))).T


def _quantize_iq4_nl_chunk(blocks: np.ndarray, ntry: int) -> np.ndarray:
    xt = np.ascontiguousarray(blocks.T)
    scale, levels = _group_scales(xt, ntry)
    if ntry > 0:
        inv = np.where(scale != 0, np.float32(1) / scale, np.float32(0)).astype(np.float32)
        levels = _best_index(xt * inv[None, :])
    # else the first pass's levels. A group below GROUP_MAX_EPS has none: quantize_row_iq4_nl_ref packs
    # what its level buffer held (the previous block's levels, or stack garbage for a call's first block),
    # undefined, so the golden writes 0 there and compares only the scale (docs/quantization.md)
    out = np.empty((blocks.shape[0], 18), np.uint8)
    out[:, 0:2] = _f16_bits(scale).view(np.uint8).reshape(-1, 2)
    out[:, 2:18] = _pack_iq4(levels)
    return out


def _quantize_iq4_xs_chunk(blocks: np.ndarray, ntry: int) -> np.ndarray:
    m = blocks.shape[0]
    xt = np.ascontiguousarray(blocks.reshape(m * 8, 32).T)
    scale = _group_scales(xt, ntry)[0].reshape(m, 8)
    magnitude = np.abs(scale)
    magnitude[np.isnan(magnitude)] = 0
    max_scale = np.take_along_axis(scale, magnitude.argmax(axis=1)[:, None], axis=1)[:, 0]
    max_scale = np.where(magnitude.max(axis=1) > 0, max_scale, np.float32(0))  # amax_scale starts at 0
    d = (-max_scale / np.float32(32)).astype(np.float32)  # all-zero scales: d = −0
    inv_d = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    ls = np.clip(_nearest_int(inv_d[:, None] * scale), -32, 31)
    dl = d[:, None] * ls.astype(np.float32)
    idl = np.where(dl != 0, np.float32(1) / dl, np.float32(0)).astype(np.float32).reshape(-1)
    levels = _best_index(xt * idl[None, :])
    biased = (ls + 32).astype(np.uint16)
    out = np.empty((m, 136), np.uint8)
    out[:, 0:2] = _f16_bits(d).view(np.uint8).reshape(-1, 2)
    scales_h = ((biased >> np.uint16(4)) << (2 * np.arange(8, dtype=np.uint16))).sum(axis=1, dtype=np.uint16)
    out[:, 2:4] = scales_h.astype("<u2").view(np.uint8).reshape(-1, 2)
    low = (biased & np.uint16(0x0F)).astype(np.uint8)
    out[:, 4:8] = low[:, 0::2] | (low[:, 1::2] << np.uint8(4))
    out[:, 8:136] = _pack_iq4(levels).reshape(m, 128)
    return out


def _quantize_iq4(x: np.ndarray, rounding: Rounding, name: str, block: int, body: object, ntry: int) -> np.ndarray:
    check_rounding(rounding)
    blocks = float_blocks(x, name, block)
    step = _QUANT_CHUNK * 32 // block
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        parts = [body(blocks[i : i + step], ntry) for i in range(0, blocks.shape[0], step)]  # type: ignore[operator]
    return np.concatenate(parts).reshape(-1) if parts else np.zeros(0, np.uint8)


def quantize_iq4_nl(x: np.ndarray, rounding: Rounding = "reference") -> np.ndarray:
    """IQ4_NL: ``"reference"`` is ``ggml_quantize_chunk`` (15 scales tried), ``"x86"`` the CPU backend's
    from_float, ``quantize_row_iq4_nl_ref`` (the first scale only)."""
    return _quantize_iq4(x, rounding, "iq4_nl", 32, _quantize_iq4_nl_chunk, 7 if rounding == "reference" else -1)


def quantize_iq4_xs(x: np.ndarray, rounding: Rounding = "reference") -> np.ndarray:
    """``quantize_iq4_xs`` without an importance matrix: eight group scales, 6-bit under one F16 ``d``."""
    return _quantize_iq4(x, rounding, "iq4_xs", QK_K, _quantize_iq4_xs_chunk, 7)


FORMATS: tuple[Format, ...] = (
    Format("iq4_nl", "iq4_nl", 20, 32, 18, dequantize_iq4_nl, quantize_iq4_nl, scale_fields=(0,)),
    Format.of_blocks("iq4_xs", "iq4_xs", 23, QK_K, 136, _iq4_xs_body, _CHUNK_BLOCKS, quantize_iq4_xs,
                     scale_fields=(0,)),
    Format.of_blocks("iq2_xxs", "iq2_xxs", 16, QK_K, 66, _iq2_xxs_body, _CHUNK_BLOCKS, scale_fields=(0,)),
    Format.of_blocks("iq2_xs", "iq2_xs", 17, QK_K, 74, _iq2_xs_body, _CHUNK_BLOCKS, scale_fields=(0,)),
    Format.of_blocks("iq2_s", "iq2_s", 22, QK_K, 82, _iq2_s_body, _CHUNK_BLOCKS, scale_fields=(0,)),
    Format.of_blocks("iq3_xxs", "iq3_xxs", 18, QK_K, 98, _iq3_xxs_body, _CHUNK_BLOCKS, scale_fields=(0,)),
    Format.of_blocks("iq3_s", "iq3_s", 21, QK_K, 110, _iq3_s_body, _CHUNK_BLOCKS, scale_fields=(0,)),
    Format.of_blocks("iq1_s", "iq1_s", 19, QK_K, 50, _iq1_s_body, _CHUNK_BLOCKS, scale_fields=(0,)),
    Format.of_blocks("iq1_m", "iq1_m", 29, QK_K, 56, _iq1_m_body, _CHUNK_BLOCKS, scale_fields=(48,),
                     scale_encoding="f16_nibbles"),  # d in the top nibbles of the four scale words
)

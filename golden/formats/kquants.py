"""K-quants: 256-element super-blocks of 16 or 32-element sub-blocks (ggml-common.h, QK_K = 256).

Layouts (f16 fields little-endian). "Element e" counts 0..255 within the super-block.

* Q2_K, 84 bytes: ``scales[16]`` (low nibble: scale, high nibble: min of sub-block e // 16),
  ``qs[64]``, ``d``, ``dmin``. Quant of e = 128·h + 32·j + l (l < 32) is bits 2j..2j+1 of
  ``qs[32·h + l]``. Value = ``(d·sc)·q − dmin·m``.
* Q3_K, 110 bytes: ``hmask[32]``, ``qs[64]`` (low two bits, as Q2_K), ``scales[12]`` (sixteen 6-bit
  scales: low nibbles in bytes 0..7, bits 4..5 from bytes 8..11), ``d``. High bit of e = 128·h + 32·j
  + l is bit 4h + j of ``hmask[l]``; q = low + 4·high − 4. Value = ``(d·(sc − 32))·q``.
* Q4_K, 144 bytes: ``d``, ``dmin``, ``scales[12]`` (eight 6-bit scales and mins, ``get_scale_min_k4``),
  ``qs[128]``. e = 64·c + 32·hi + l is nibble ``hi`` of ``qs[32·c + l]``, sub-block e // 32.
  Value = ``(d·sc)·q − dmin·m``.
* Q5_K, 176 bytes: Q4_K's fields with ``qh[32]`` before ``qs``: bit (e // 32) of ``qh[e % 32]`` adds 16.
* Q6_K, 210 bytes: ``ql[128]``, ``qh[64]``, ``scales[16]`` int8, ``d``. In half h (128 elements):
  e = 128·h + 32·k + l takes nibble k // 2 of ``ql[64·h + 32·(k % 2) + l]`` and bits 2k..2k+1 of
  ``qh[32·h + l]`` as bits 4..5; q − 32; sub-block e // 16. Value = ``(d·sc)·q``.
* Q8_K, 292 bytes: f32 ``d``, ``qs[256]`` int8, ``bsums[16]`` int16 (sums of 16 quants). The vec_dot
  type of every K-quant; ggml has no ``to_float`` for it, its dequantize is ``d·q``.

Every product and difference is one f32 rounding, in the C order (libggml-base has no FMA), so
dequantization is bit for bit ``to_float`` for any bytes, inf and NaN scales included.
"""

from __future__ import annotations

import numpy as np

from golden.formats.format import (
    Format,
    Rounding,
    check_rounding,
    chunked,
    f16_column,
    float_blocks,
)

QK_K = 256
_CHUNK_BLOCKS = 1024  # 1 MiB of f32 output a chunk


def _shifted_copies(source: np.ndarray, shifts: range, out: np.ndarray) -> np.ndarray:
    """out[:, i·w : (i+1)·w] = source >> shifts[i] for (blocks, w) ``source``: one scalar shift per
    field (NumPy's broadcast uint8 loops are several times slower than its scalar ones)."""
    width = source.shape[1]
    for index, shift in enumerate(shifts):
        np.right_shift(source, np.uint8(shift), out=out[:, index * width : (index + 1) * width])
    return out


def _two_bit_quants(qs: np.ndarray) -> np.ndarray:
    """(blocks, 64) qs -> (blocks, 256) uint8: Q2_K/Q3_K's 2-bit fields in element order
    (element 128·h + 32·j + l is bits 2j..2j+1 of qs[32·h + l])."""
    q = np.empty((qs.shape[0], QK_K), np.uint8)
    for half in range(2):
        _shifted_copies(qs[:, 32 * half : 32 * half + 32], range(0, 8, 2), q[:, 128 * half : 128 * half + 128])
    np.bitwise_and(q, np.uint8(3), out=q)
    return q


def _bit_planes(bytes32: np.ndarray, value: int) -> np.ndarray:
    """(blocks, 32) bytes -> (blocks, 256) uint8: element 32·b + l is ``value`` where bit b of byte l is set."""
    planes = _shifted_copies(bytes32, range(8), np.empty((bytes32.shape[0], QK_K), np.uint8))
    np.bitwise_and(planes, np.uint8(1), out=planes)
    return np.multiply(planes, np.uint8(value), out=planes)


def _apply(out: np.ndarray, q: np.ndarray, scale: np.ndarray, minimum: np.ndarray | None, group: int) -> None:
    """out = scale·q (− minimum), per sub-block of ``group`` elements; scale/minimum are (blocks, groups) f32."""
    m = q.shape[0]
    view = out.reshape(m, -1, group)
    np.copyto(view, q.reshape(m, -1, group), casting="unsafe")
    np.multiply(view, scale[:, :, None], out=view)
    if minimum is not None:
        np.subtract(view, minimum[:, :, None], out=view)


def _q2_k_body(blocks: np.ndarray, out: np.ndarray) -> None:
    scales = blocks[:, 0:16]
    d, dmin = f16_column(blocks, 80), f16_column(blocks, 82)
    scale = d[:, None] * (scales & np.uint8(0x0F)).astype(np.float32)
    minimum = dmin[:, None] * (scales >> np.uint8(4)).astype(np.float32)
    _apply(out, _two_bit_quants(blocks[:, 16:80]), scale, minimum, 16)


def q3_k_scales(packed: np.ndarray) -> np.ndarray:
    """(blocks, 12) packed bytes -> (blocks, 16) uint8 six-bit scales (before the − 32)."""
    m = packed.shape[0]
    low, high = packed[:, 0:8], packed[:, 8:12]
    out = np.empty((m, 16), np.uint8)
    out[:, 0:8] = low & np.uint8(0x0F)
    out[:, 8:16] = low >> np.uint8(4)
    # bits 4..5 of scale 4k + i come from bits 2k..2k+1 of high byte i
    top = (high[:, None, :] >> np.arange(0, 8, 2, dtype=np.uint8)[None, :, None]) & np.uint8(3)
    out |= top.reshape(m, 16) << np.uint8(4)
    return out


def _q3_k_body(blocks: np.ndarray, out: np.ndarray) -> None:
    q = _two_bit_quants(blocks[:, 32:96]).view(np.int8)
    q += _bit_planes(blocks[:, 0:32], 4).view(np.int8)  # bit 4h + j of hmask[l]: element 128h + 32j + l
    q -= np.int8(4)
    scale = f16_column(blocks, 108)[:, None] * (q3_k_scales(blocks[:, 96:108]).astype(np.float32) - np.float32(32))
    _apply(out, q, scale, None, 16)


def k4_scales_mins(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``get_scale_min_k4`` for j = 0..7: (blocks, 12) bytes -> two (blocks, 8) uint8 arrays."""
    m = packed.shape[0]
    first, second, third = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    scales, mins = np.empty((m, 8), np.uint8), np.empty((m, 8), np.uint8)
    scales[:, 0:4] = first & np.uint8(63)
    mins[:, 0:4] = second & np.uint8(63)
    scales[:, 4:8] = (third & np.uint8(0x0F)) | ((first >> np.uint8(6)) << np.uint8(4))
    mins[:, 4:8] = (third >> np.uint8(4)) | ((second >> np.uint8(6)) << np.uint8(4))
    return scales, mins


def _nibble_pairs(qs: np.ndarray) -> np.ndarray:
    """(blocks, 128) -> (blocks, 256) uint8: per 32 bytes, their low nibbles then their high ones."""
    m = qs.shape[0]
    grouped = qs.reshape(m, 4, 1, 32)
    q = np.empty((m, 4, 2, 32), np.uint8)
    np.bitwise_and(grouped[:, :, 0], np.uint8(0x0F), out=q[:, :, 0])
    np.right_shift(grouped[:, :, 0], np.uint8(4), out=q[:, :, 1])
    return q.reshape(m, QK_K)


def _k4_scale_min(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scales, mins = k4_scales_mins(blocks[:, 4:16])
    scale = f16_column(blocks, 0)[:, None] * scales.astype(np.float32)
    minimum = f16_column(blocks, 2)[:, None] * mins.astype(np.float32)
    return scale, minimum


def _q4_k_body(blocks: np.ndarray, out: np.ndarray) -> None:
    scale, minimum = _k4_scale_min(blocks)
    _apply(out, _nibble_pairs(blocks[:, 16:144]), scale, minimum, 32)


def _q5_k_body(blocks: np.ndarray, out: np.ndarray) -> None:
    scale, minimum = _k4_scale_min(blocks)
    q = _nibble_pairs(blocks[:, 48:176])
    q |= _bit_planes(blocks[:, 16:48], 16)  # bit (sub-block) of qh[l]
    _apply(out, q, scale, minimum, 32)


def _q6_k_body(blocks: np.ndarray, out: np.ndarray) -> None:
    m = blocks.shape[0]
    ql = blocks[:, 0:128].reshape(m, 2, 64)
    q = np.empty((m, 2, 128), np.uint8)
    np.bitwise_and(ql, np.uint8(0x0F), out=q[:, :, :64])
    np.right_shift(ql, np.uint8(4), out=q[:, :, 64:])
    top = _two_bit_quants(blocks[:, 128:192])  # bits 2k..2k+1 of qh[32h + l] for element 128h + 32k + l
    np.left_shift(top, np.uint8(4), out=top)
    q |= top.reshape(m, 2, 128)
    signed = q.reshape(m, QK_K).view(np.int8)
    signed -= np.int8(32)
    scale = f16_column(blocks, 208)[:, None] * blocks[:, 192:208].view(np.int8).astype(np.float32)
    _apply(out, signed, scale, None, 16)


def _q8_k_body(blocks: np.ndarray, out: np.ndarray) -> None:
    d = blocks[:, 0:4].view("<f4")
    _apply(out, blocks[:, 4:260].view(np.int8), d, None, QK_K)




# --------------------------------------------------------------------------------------------
# Q8_K quantizer (``quantize_row_q8_K_ref``; the x86 CPU backend's from_float is the same code)

_ROUNDING_MAGIC = np.float32(12582912.0)  # 1.5·2**23: nearest_int's add-and-read-the-bits rounding


def _nearest_int(v: np.ndarray) -> np.ndarray:
    """ggml's ``nearest_int``: the low 23 bits of ``v + 1.5·2**23`` less 2**22, read as an int32.

    Ties to even for |v| < 2**22; for NaN and inf it reads whatever bits the sum has, as the C does.
    """
    bits = (v + _ROUNDING_MAGIC).view(np.int32)
    return (bits & np.int32(0x007FFFFF)) - np.int32(0x00400000)


def quantize_q8_k(x: np.ndarray, rounding: Rounding = "reference") -> np.ndarray:
    """``quantize_row_q8_K_ref``: ``max`` = the first element of largest ``|x|`` (NaN never wins),
    ``iscale = −127/max``, ``q = min(127, nearest_int(iscale·x))``, ``d = 1/iscale`` (f32), bsums.

    An all-zero (or all-NaN) block stores ``d = 0`` and zero quants; ggml leaves its bsums
    unwritten there, this writes zeros.
    """
    check_rounding(rounding)
    blocks = float_blocks(x, "q8_k", QK_K)
    m = blocks.shape[0]
    out = np.zeros((m, 292), np.uint8)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        for start in chunked(m, _CHUNK_BLOCKS):
            chunk = blocks[start : start + _CHUNK_BLOCKS]
            dest = out[start : start + _CHUNK_BLOCKS]
            magnitude = np.abs(chunk)
            magnitude[np.isnan(magnitude)] = 0
            first = magnitude.argmax(axis=1)[:, None]
            amax = np.take_along_axis(magnitude, first, axis=1)[:, 0]
            signed_max = np.take_along_axis(chunk, first, axis=1)[:, 0]
            live = amax != 0
            iscale = np.where(live, np.float32(-127) / signed_max, np.float32(0)).astype(np.float32)
            q = np.minimum(_nearest_int(chunk * iscale[:, None]), np.int32(127)).astype(np.int8)
            q[~live] = 0
            d = np.where(live, np.float32(1) / iscale, np.float32(0)).astype("<f4")
            dest[:, 0:4] = d.view(np.uint8).reshape(-1, 4)
            dest[:, 4:260] = q.view(np.uint8)
            bsums = q.reshape(-1, 16, 16).sum(axis=2, dtype=np.int32).astype("<i2")
            bsums[~live] = 0
            dest[:, 260:292] = bsums.view(np.uint8).reshape(-1, 32)
    return out.reshape(-1)


FORMATS: tuple[Format, ...] = (
    Format.of_blocks("q2_k", "q2_K", 10, QK_K, 84, _q2_k_body, _CHUNK_BLOCKS, scale_fields=(80, 82)),
    Format.of_blocks("q3_k", "q3_K", 11, QK_K, 110, _q3_k_body, _CHUNK_BLOCKS, scale_fields=(108,)),
    Format.of_blocks("q4_k", "q4_K", 12, QK_K, 144, _q4_k_body, _CHUNK_BLOCKS, scale_fields=(0, 2)),
    Format.of_blocks("q5_k", "q5_K", 13, QK_K, 176, _q5_k_body, _CHUNK_BLOCKS, scale_fields=(0, 2)),
    Format.of_blocks("q6_k", "q6_K", 14, QK_K, 210, _q6_k_body, _CHUNK_BLOCKS, scale_fields=(208,)),
    Format.of_blocks("q8_k", "q8_K", 15, QK_K, 292, _q8_k_body, _CHUNK_BLOCKS, quantize_q8_k, has_to_float=False,
                     scale_fields=(0,), scale_encoding="f32"),
)

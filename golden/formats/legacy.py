"""The 32-element block formats besides Q4_0/Q8_0: Q4_1, Q5_0, Q5_1, Q8_1 (ggml-common.h).

Q4_0 and Q8_0 are :mod:`golden.quant`'s; their entries here delegate to it. Layouts (little-endian
f16 ``d`` and ``m``; element ``j < 16`` in the low nibble of ``qs[j]``, ``j + 16`` in its high one;
``qh`` a little-endian uint32 whose bit ``j`` is element ``j``'s fifth bit):

* Q4_1, 20 bytes: ``d, m, qs[16]``; value = ``q·d + m`` (two f32 roundings, no FMA in libggml-base).
* Q5_0, 22 bytes: ``d, qh[4], qs[16]``; value = ``(q − 16)·d``, q = nibble | qh bit << 4.
* Q5_1, 24 bytes: ``d, m, qh[4], qs[16]``; value = ``q·d + m``.
* Q8_1, 36 bytes: ``d, s, qs[32] int8``; ``s`` = f16(d·Σq), the block sum vec_dot uses. ggml has no
  ``to_float`` for Q8_1 (it only ever holds converted activations); its dequantize is ``q·d``.

The quantizers are ggml's ``quantize_row_*_ref``; for Q4_1/Q5_0/Q5_1 the CPU backend's ``from_float``
is that same code, for Q8_1 it is the AVX2 path whose quants and ``d`` are Q8_0's x86 ones (see
:mod:`golden.quant`) and whose ``s`` sums the unsaturated int32 quants. Non-finite input follows x86:
a float→int conversion of NaN, ±inf or anything out of int32 range gives INT32_MIN, whose low byte
(0) the reference code keeps.
"""

from __future__ import annotations

import numpy as np

from golden import quant
from golden.formats.format import (
    Format,
    Rounding,
    check_rounding,
    chunked,
    f16_column,
    float_blocks,
    nibbles,
)

# The C conversions, shared with golden.quant (one definition of each).
from golden.quant import _cvt_to_int32, _f16_bits, _low_byte_int8, _q8_0_reference_amax, _q8_0_x86_amax

QK = 32
_CHUNK_BLOCKS = 8192
_FLT_MAX = np.float32(np.finfo(np.float32).max)


# --------------------------------------------------------------------------------------------
# dequantization


def _with_fifth_bits(q: np.ndarray, qh: np.ndarray) -> np.ndarray:
    """OR bit ``j`` of each block's little-endian uint32 ``qh`` into quant ``j`` as its bit 4."""
    high = np.unpackbits(qh, axis=1, bitorder="little")
    np.left_shift(high, np.uint8(4), out=high)
    np.bitwise_or(q, high, out=q)
    return q


def _q4_1_body(blocks: np.ndarray, out: np.ndarray) -> None:
    np.copyto(out, nibbles(blocks[:, 4:20]), casting="unsafe")
    np.multiply(out, f16_column(blocks, 0)[:, None], out=out)
    np.add(out, f16_column(blocks, 2)[:, None], out=out)


def _q5_0_body(blocks: np.ndarray, out: np.ndarray) -> None:
    np.copyto(out, _with_fifth_bits(nibbles(blocks[:, 6:22]), blocks[:, 2:6]), casting="unsafe")
    np.subtract(out, np.float32(16), out=out)
    np.multiply(out, f16_column(blocks, 0)[:, None], out=out)


def _q5_1_body(blocks: np.ndarray, out: np.ndarray) -> None:
    np.copyto(out, _with_fifth_bits(nibbles(blocks[:, 8:24]), blocks[:, 4:8]), casting="unsafe")
    np.multiply(out, f16_column(blocks, 0)[:, None], out=out)
    np.add(out, f16_column(blocks, 2)[:, None], out=out)


def _q8_1_body(blocks: np.ndarray, out: np.ndarray) -> None:
    np.copyto(out, blocks[:, 4:36].view(np.int8), casting="unsafe")
    np.multiply(out, f16_column(blocks, 0)[:, None], out=out)




# --------------------------------------------------------------------------------------------
# quantization


def _row_extremes(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each block's min and max (NaN propagating, as ``min``/``max(axis=1)``) from one transposed copy:
    NumPy reduces a short last axis row by row, but the 32 columns of the copy as whole vectors
    (together about 2.5x faster). Only which of +0/−0 survives may differ from a scan, and every
    caller recomputes the rows where a zero or a non-finite value is the extreme."""
    columns = np.ascontiguousarray(blocks.T)
    return np.minimum.reduce(columns, axis=0), np.maximum.reduce(columns, axis=0)


def _block_min_max(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ggml's ``min``/``max`` scan: start at ±FLT_MAX, strict ``<``/``>``, so NaN never wins, of
    equal values (+0 and −0) the first does, and a block all +inf keeps ``min = FLT_MAX`` (all −inf:
    ``max = −FLT_MAX``). ``argmin``/``argmax`` also keep the first of equals; the
    plain reductions are used where no zero, NaN or inf makes the pick ambiguous."""
    smallest, largest = _row_extremes(blocks)
    redo = ~(np.isfinite(smallest) & np.isfinite(largest)) | (smallest == 0) | (largest == 0)
    if redo.any():
        rows = np.flatnonzero(redo)
        sub = blocks[rows]
        nan = np.isnan(sub)
        low = np.where(nan, _FLT_MAX, sub)  # a NaN left alone reads as FLT_MAX, where the scan starts
        high = np.where(nan, -_FLT_MAX, sub)
        # the scan keeps its FLT_MAX start when every value is +inf (min) or -inf (max): never an infinity
        smallest[rows] = np.minimum(np.take_along_axis(low, low.argmin(axis=1)[:, None], axis=1)[:, 0], _FLT_MAX)
        largest[rows] = np.maximum(np.take_along_axis(high, high.argmax(axis=1)[:, None], axis=1)[:, 0], -_FLT_MAX)
    return smallest, largest


def _block_signed_max(blocks: np.ndarray) -> np.ndarray:
    """Q4_0/Q5_0's ``max``: the first element of largest ``|x|`` (strict ``<``, from 0; NaN never wins)."""
    smallest, largest = _row_extremes(blocks)
    with np.errstate(invalid="ignore"):
        signed = np.where(largest > -smallest, largest, smallest)
        redo = ~(np.isfinite(largest) & np.isfinite(smallest)) | (largest == -smallest)
    if redo.any():
        rows = np.flatnonzero(redo)
        sub = blocks[rows]
        magnitude = np.abs(sub)
        magnitude[np.isnan(magnitude)] = 0
        first = magnitude.argmax(axis=1)[:, None]
        wins = np.take_along_axis(magnitude, first, axis=1)[:, 0] > 0
        signed[rows] = np.where(wins, np.take_along_axis(sub, first, axis=1)[:, 0], np.float32(0))
    return signed


def _packnibbles(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    return np.bitwise_or(np.bitwise_and(low, np.uint8(0x0F)), np.left_shift(high, np.uint8(4)))


def _pack_fifth_bits(q: np.ndarray) -> np.ndarray:
    """Bit 4 of each of the 32 quants -> the 4 bytes of the little-endian uint32 ``qh``."""
    return np.packbits((q >> np.uint8(4)) & np.uint8(1), axis=1, bitorder="little")


def _reciprocal(d: np.ndarray) -> np.ndarray:
    return np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)


def _quantize(x: np.ndarray, name: str, type_size: int, rounding: str, body: object) -> np.ndarray:
    check_rounding(rounding)
    blocks = float_blocks(x, name, QK)
    out = np.empty((blocks.shape[0], type_size), np.uint8)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        for start in chunked(blocks.shape[0], _CHUNK_BLOCKS):
            stop = start + _CHUNK_BLOCKS
            body(blocks[start:stop], out[start:stop])  # type: ignore[operator]
    return out.reshape(-1)


def _put_f16(out: np.ndarray, offset: int, values: np.ndarray) -> None:
    out[:, offset : offset + 2] = _f16_bits(values.astype(np.float32)).view(np.uint8).reshape(-1, 2)


def _q4_1_quantize_body(blocks: np.ndarray, out: np.ndarray) -> None:
    smallest, largest = _block_min_max(blocks)
    d = (largest - smallest) / np.float32(15)
    scaled = (blocks - smallest[:, None]) * _reciprocal(d)[:, None]
    q = np.minimum(_low_byte_int8(_cvt_to_int32(scaled + np.float32(0.5))), np.int8(15)).view(np.uint8)
    _put_f16(out, 0, d)
    _put_f16(out, 2, smallest)
    # qs[j] = q[j] | q[j+16] << 4 with q[j] unmasked, as the C stores it (q is never above 15)
    out[:, 4:20] = q[:, : QK // 2] | (q[:, QK // 2 :] << np.uint8(4))


def _q5_0_quantize_body(blocks: np.ndarray, out: np.ndarray) -> None:
    d = _block_signed_max(blocks) / np.float32(-16)  # an all-zero block gives -0.0
    scaled = blocks * _reciprocal(d)[:, None]
    q = np.minimum(_low_byte_int8(_cvt_to_int32(scaled + np.float32(16.5))), np.int8(31)).view(np.uint8)
    _put_f16(out, 0, d)
    out[:, 2:6] = _pack_fifth_bits(q)
    out[:, 6:22] = _packnibbles(q[:, : QK // 2], q[:, QK // 2 :])


def _q5_1_quantize_body(blocks: np.ndarray, out: np.ndarray) -> None:
    smallest, largest = _block_min_max(blocks)
    d = (largest - smallest) / np.float32(31)
    scaled = (blocks - smallest[:, None]) * _reciprocal(d)[:, None]
    q = _cvt_to_int32(scaled + np.float32(0.5)).astype(np.uint8)  # (uint8_t): the low byte, no clamp
    _put_f16(out, 0, d)
    _put_f16(out, 2, smallest)
    out[:, 4:8] = _pack_fifth_bits(q)
    out[:, 8:24] = _packnibbles(q[:, : QK // 2], q[:, QK // 2 :])


def quantize_q4_1(x: np.ndarray, rounding: Rounding = "reference") -> np.ndarray:
    """``quantize_row_q4_1_ref`` (the CPU backend's from_float is the same code)."""
    return _quantize(x, "q4_1", 20, rounding, _q4_1_quantize_body)


def quantize_q5_0(x: np.ndarray, rounding: Rounding = "reference") -> np.ndarray:
    """``quantize_row_q5_0_ref`` (the CPU backend's from_float is the same code)."""
    return _quantize(x, "q5_0", 22, rounding, _q5_0_quantize_body)


def quantize_q5_1(x: np.ndarray, rounding: Rounding = "reference") -> np.ndarray:
    """``quantize_row_q5_1_ref`` (the CPU backend's from_float is the same code)."""
    return _quantize(x, "q5_1", 24, rounding, _q5_1_quantize_body)


def quantize_q8_1(x: np.ndarray, rounding: Rounding = "reference") -> np.ndarray:
    """Q8_1: Q8_0's quants and scale on the same path, plus ``s = f16(d·Σq)`` with the f32 ``d``.

    The reference sums the stored int8 quants; the x86 path sums the int32 conversions before they
    are saturated to int8 (INT32_MIN for a NaN, wrapping as int32 arithmetic does).
    """
    check_rounding(rounding)
    blocks = float_blocks(x, "q8_1", QK)
    q8_0 = quant.quantize(blocks, "q8_0", rounding).reshape(-1, 34)
    out = np.empty((blocks.shape[0], 36), np.uint8)
    out[:, 0:2] = q8_0[:, 0:2]
    out[:, 4:36] = q8_0[:, 2:34]
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        if rounding == "reference":
            amax = _q8_0_reference_amax(blocks)
            total = q8_0[:, 2:34].view(np.int8).sum(axis=1, dtype=np.int32)
        else:
            amax = _q8_0_x86_amax(blocks)
            inv_d = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
            total = _cvt_to_int32(np.rint(blocks * inv_d[:, None])).sum(axis=1, dtype=np.int32)
        d = (amax / np.float32(127)).astype(np.float32)
        _put_f16(out, 2, total.astype(np.float32) * d)
    return out.reshape(-1)


def _delegate(qtype: str) -> Format:
    def dequantize(raw: np.ndarray, n: int) -> np.ndarray:
        return quant.dequantize(raw, qtype, n)

    def quantize(x: np.ndarray, rounding: Rounding = "reference") -> np.ndarray:
        return quant.quantize(x, qtype, rounding)

    ggml_type = {"q4_0": 2, "q8_0": 8}[qtype]
    return Format(qtype, qtype, ggml_type, QK, quant.BLOCK_BYTES[qtype], dequantize, quantize, scale_fields=(0,))


FORMATS: tuple[Format, ...] = (
    _delegate("q4_0"),
    Format.of_blocks("q4_1", "q4_1", 3, QK, 20, _q4_1_body, _CHUNK_BLOCKS, quantize_q4_1, scale_fields=(0, 2)),
    Format.of_blocks("q5_0", "q5_0", 6, QK, 22, _q5_0_body, _CHUNK_BLOCKS, quantize_q5_0, scale_fields=(0,)),
    Format.of_blocks("q5_1", "q5_1", 7, QK, 24, _q5_1_body, _CHUNK_BLOCKS, quantize_q5_1, scale_fields=(0, 2)),
    _delegate("q8_0"),
    Format.of_blocks("q8_1", "q8_1", 9, QK, 36, _q8_1_body, _CHUNK_BLOCKS, quantize_q8_1, has_to_float=False,
                     scale_fields=(0,)),  # s at 2 is d·Σq, not a scale of the values
)

"""Q4_0 / Q8_0 blocks: ggml's quantizers, dequantizer, and the CANN device layout.

Pure NumPy, vectorised over blocks. Everything here is bit-exact with ggml 0.20.2 (the
``libggml-python`` wheel) and with the CANN seed (``ggml-cann.cpp``); ``tests/test_quant_vs_ggml.py``
checks the first claim against the library, ``tests/test_quant_golden.py`` the second.

Host block formats (ggml-common.h), 32 elements per block:

* ``q4_0``: 18 bytes = f16 scale ``d`` (little-endian) + 16 bytes ``qs``; element ``j < 16`` is the low
  nibble of ``qs[j]``, element ``j + 16`` its high nibble; value = ``(nibble - 8) * d``.
* ``q8_0``: 34 bytes = f16 ``d`` + 32 ``int8`` quants; value = ``q * d``.

Quantizer paths (found by experiment against the wheel, see ``docs/quantization.md``):

* ``rounding="reference"``: ``ggml_quantize_chunk`` (``quantize_row_q*_0_ref``), the quantizer used
  when ggml writes model files.

  - Q4_0: ``max`` = first signed value of largest ``|x|`` (NaN never wins), ``d = max / -8``,
    ``id = 1/d`` (0 if ``d == 0``), ``q = min(15, int8(x*id + 8.5))``. An all-zero block stores
    ``d = -0.0`` (0x8000).
  - Q8_0: ``amax`` is the sequential fold ``amax = amax > |x| ? amax : |x|``, so it is the max of
    ``|x|`` *after the last NaN* (NaN itself when the last element is NaN). ``d = amax / 127``,
    ``id = 1/d``, ``q = roundf(x*id)``: ties round **half away from zero** (0.5 -> 1, 2.5 -> 3).

* ``rounding="x86"``: the CPU backend's ``from_float`` for Q8_0 on AVX/AVX2 (CPY/CONT into Q8_0 and
  the conversion of mul_mat's src1). ``amax`` by an 8-lane ``maxps`` tree, ``id = 127/amax`` (not
  ``1/d``), ``q = round_half_even(x*id)`` packed with signed saturation: ties round **half to even**
  (0.5 -> 0, 2.5 -> 2). For Q4_0 the CPU uses the reference quantizer, so both settings agree.

Non-finite conversions follow x86: a float->int conversion of NaN, +-inf or anything out of int32
range yields INT32_MIN. The reference paths keep its low byte (0); the x86 path saturates it to
-128. So NaN elements quantize to 0 (reference) or -128 (x86), and a block whose ``1/d`` overflows
(``amax`` below about 3.7e-37) quantizes entirely to those values.

CANN device layout (seed ``ggml_backend_cann_transform_*``), per tensor of ``n`` elements: all quants
first, then all ``n/32`` f16 scales in block order. Q8_0 quants are the int8 values in element
order. Q4_0 quants are ``n/2`` bytes, byte ``k`` of a block holding element ``2k`` in its low nibble
and ``2k + 1`` in its high nibble (natural order), every byte XOR 0x88 (so each nibble reads as the
signed int4 ``q - 8``).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

QK = 32  # elements per block, QK4_0 == QK8_0
BLOCK_BYTES: dict[str, int] = {"q4_0": 2 + QK // 2, "q8_0": 2 + QK}
QTYPES: tuple[str, ...] = tuple(BLOCK_BYTES)
MATRIX_ROW_PADDING = 512  # ggml-cann/common.h

# Bytes per element of the plain types, for cann_alloc_size on non-quantized tensors.
_PLAIN_TYPE_BYTES: dict[str, int] = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4}

Rounding = Literal["reference", "x86"]

_INT32_MIN = np.int64(-(2**31))


def _check_qtype(qtype: str) -> int:
    try:
        return BLOCK_BYTES[qtype]
    except KeyError:
        raise ValueError(f"unknown quantized type {qtype!r}; expected one of {QTYPES}") from None


def row_size(qtype: str, ne0: int) -> int:
    """``ggml_row_size``: bytes of ``ne0`` elements (ne0 a multiple of 32 for quantized types)."""
    if qtype in _PLAIN_TYPE_BYTES:
        return _PLAIN_TYPE_BYTES[qtype] * ne0
    block_bytes = _check_qtype(qtype)
    if ne0 % QK:
        raise ValueError(f"{qtype} rows need ne0 % {QK} == 0, got {ne0}")
    return block_bytes * (ne0 // QK)


def cann_alloc_size(qtype: str, ne: tuple[int, ...] | list[int]) -> int:
    """The seed's ``get_alloc_size`` for a contiguous tensor of ``ne`` (ggml order, up to 4 dims).

    ``ggml_nbytes`` plus, for quantized types whose ``ne0`` is not a multiple of 512, the bytes of
    ``512 - ne0 % 512`` more elements, added **once per tensor** (not per row), in host-block size.
    Plain types get no padding.
    """
    dims = [int(v) for v in ne] + [1] * (4 - len(ne))
    if len(dims) != 4 or min(dims) < 0:
        raise ValueError(f"ne must be up to 4 non-negative sizes, got {ne!r}")
    ne0, ne1, ne2, ne3 = dims
    size = row_size(qtype, ne0) * ne1 * ne2 * ne3
    if qtype in BLOCK_BYTES and ne0 % MATRIX_ROW_PADDING:
        size += row_size(qtype, MATRIX_ROW_PADDING - ne0 % MATRIX_ROW_PADDING)
    return size


# --------------------------------------------------------------------------------------------
# float helpers that mimic the C conversions bit for bit


def _f16_bits(d: np.ndarray) -> np.ndarray:
    """f32 -> f16 bits, round-to-nearest-even like ggml; NaN becomes 0x7E00 | sign as ggml does."""
    with np.errstate(over="ignore", invalid="ignore"):
        bits = d.astype(np.float16).view(np.uint16)
    # numpy keeps the top NaN payload bits, ggml's conversion emits the canonical quiet NaN.
    sign = (d.view(np.uint32) >> 16).astype(np.uint16) & np.uint16(0x8000)
    return np.where(np.isnan(d), np.uint16(0x7E00) | sign, bits)


def _cvt_to_int32(v: np.ndarray) -> np.ndarray:
    """x86 cvt(t)ps2dq on integral-or-non-finite f32 values: INT32_MIN when out of range or NaN."""
    valid = np.isfinite(v) & (np.abs(v) < np.float32(2**31))
    truncated = np.trunc(np.where(valid, v, np.float32(0))).astype(np.int64)
    return np.where(valid, truncated, _INT32_MIN)


def _low_byte_int8(i: np.ndarray) -> np.ndarray:
    """C ``(int8_t)`` of an int32 as compiled here: keep the low byte."""
    return (i & 0xFF).astype(np.uint8).view(np.int8)


def _round_half_away(v: np.ndarray) -> np.ndarray:
    """C ``roundf`` in exact f32 arithmetic (adding 0.5 first would round 0.49999997 up)."""
    whole = np.trunc(v)
    with np.errstate(invalid="ignore"):
        frac = v - whole  # exact in f32; NaN for +-inf, which then keeps ``whole``
        bump = np.where(np.abs(frac) >= np.float32(0.5), np.sign(v), np.float32(0))
    return whole + bump


def _as_blocks(x: np.ndarray) -> np.ndarray:
    values = np.ascontiguousarray(x, dtype=np.float32)
    if values.ndim == 0 or values.shape[-1] % QK:
        raise ValueError(f"quantize needs a last dimension that is a multiple of {QK}, got {values.shape}")
    return values.reshape(-1, QK)  # rows are whole blocks, so blocks never straddle rows


def _x86_maxps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``maxps a, b``: a if a > b else b, so a NaN in either operand yields b."""
    return np.where(a > b, a, b)


# --------------------------------------------------------------------------------------------
# quantizers


def _quantize_q4_0(blocks: np.ndarray) -> np.ndarray:
    nblocks = blocks.shape[0]
    magnitude = np.abs(blocks)
    magnitude[np.isnan(magnitude)] = 0  # ``amax < |x|`` is false for NaN: NaN never wins
    first_largest = np.argmax(magnitude, axis=1)  # argmax returns the first of equal maxima
    rows = np.arange(nblocks)
    signed_max = np.where(magnitude[rows, first_largest] > 0, blocks[rows, first_largest], np.float32(0))
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        d = signed_max / np.float32(-8)  # an all-zero block gives -0.0
        inv_d = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
        shifted = blocks * inv_d[:, None] + np.float32(8.5)  # two f32 roundings, as in C (no FMA)
    q = np.minimum(_low_byte_int8(_cvt_to_int32(shifted)), np.int8(15)).view(np.uint8)

    out = np.empty((nblocks, BLOCK_BYTES["q4_0"]), np.uint8)
    out[:, :2] = _f16_bits(d).view(np.uint8).reshape(nblocks, 2)
    out[:, 2:] = q[:, : QK // 2] | (q[:, QK // 2 :] << 4)
    return out.reshape(-1)


def _q8_0_reference_amax(blocks: np.ndarray) -> np.ndarray:
    magnitude = np.abs(blocks)
    is_nan = np.isnan(blocks)
    if not is_nan.any():
        return magnitude.max(axis=1, initial=np.float32(0))
    # The fold restarts after every NaN, so only elements after the last NaN count.
    at_or_before_last_nan = np.flip(np.logical_or.accumulate(np.flip(is_nan, 1), axis=1), 1)
    amax = np.where(at_or_before_last_nan, np.float32(0), magnitude).max(axis=1)
    return np.where(is_nan[:, -1], np.float32(np.nan), amax)


def _q8_0_x86_amax(blocks: np.ndarray) -> np.ndarray:
    magnitude = np.abs(blocks).reshape(-1, 4, 8)  # four 8-lane vectors per block
    lanes = magnitude[:, 0]
    for vec in range(1, 4):
        lanes = _x86_maxps(lanes, magnitude[:, vec])
    quad = _x86_maxps(lanes[:, 4:], lanes[:, :4])  # high 128 bits against low
    pair = _x86_maxps(quad[:, :2], quad[:, 2:])  # movehl
    return _x86_maxps(pair[:, 0], pair[:, 1])  # movehdup + maxss


def _quantize_q8_0(blocks: np.ndarray, rounding: Rounding) -> np.ndarray:
    nblocks = blocks.shape[0]
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        if rounding == "reference":
            amax = _q8_0_reference_amax(blocks)
            d = amax / np.float32(127)
            inv_d = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
            q = _low_byte_int8(_cvt_to_int32(_round_half_away(blocks * inv_d[:, None])))
        else:
            amax = _q8_0_x86_amax(blocks)
            d = amax / np.float32(127)
            inv_d = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
            as_int = _cvt_to_int32(np.rint(blocks * inv_d[:, None]))
            q = np.clip(as_int, -128, 127).astype(np.int8)  # packs_epi32 + packs_epi16 saturate

    out = np.empty((nblocks, BLOCK_BYTES["q8_0"]), np.uint8)
    out[:, :2] = _f16_bits(d.astype(np.float32)).view(np.uint8).reshape(nblocks, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.reshape(-1)


def quantize(x: np.ndarray, qtype: str, rounding: Rounding = "reference") -> np.ndarray:
    """Quantize float rows (last dim a multiple of 32) to flat raw ggml blocks.

    ``x`` is converted to float32 first. ``rounding="reference"`` is ``ggml_quantize_chunk``;
    ``"x86"`` is the CPU backend's AVX2 ``from_float`` (differs for Q8_0 at exact .5 ties and for
    non-finite input, see the module docstring).
    """
    _check_qtype(qtype)
    if rounding not in ("reference", "x86"):
        raise ValueError(f"rounding must be 'reference' or 'x86', got {rounding!r}")
    blocks = _as_blocks(x)
    if qtype == "q4_0":
        return _quantize_q4_0(blocks)
    return _quantize_q8_0(blocks, rounding)


def dequantize(raw: np.ndarray, qtype: str, n: int) -> np.ndarray:
    """ggml ``to_float`` of the first ``n`` elements (``n % 32 == 0``) of raw blocks: flat float32.

    Each value is the f32 product of the widened f16 scale and the integer quant.
    """
    block_bytes = _check_qtype(qtype)
    if n % QK:
        raise ValueError(f"n must be a multiple of {QK}, got {n}")
    nblocks = n // QK
    data = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    if data.size < nblocks * block_bytes:
        raise ValueError(f"{n} {qtype} elements need {nblocks * block_bytes} bytes, got {data.size}")
    blocks = data[: nblocks * block_bytes].reshape(nblocks, block_bytes)
    scale = np.ascontiguousarray(blocks[:, :2]).view(np.float16).astype(np.float32)  # (nblocks, 1)
    if qtype == "q8_0":
        quants = blocks[:, 2:].view(np.int8).astype(np.float32)
    else:
        packed = blocks[:, 2:]
        nibbles = np.concatenate([packed & 0x0F, packed >> 4], axis=1)
        quants = nibbles.astype(np.float32) - np.float32(8)
    with np.errstate(invalid="ignore", over="ignore"):  # inf/NaN scales behave as in C
        return (quants * scale).reshape(-1)


# --------------------------------------------------------------------------------------------
# CANN device layout


def _split_blocks(raw: np.ndarray, qtype: str) -> np.ndarray:
    block_bytes = _check_qtype(qtype)
    data = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    if data.size % block_bytes:
        raise ValueError(f"{data.size} bytes is not a whole number of {block_bytes}-byte {qtype} blocks")
    return data.reshape(-1, block_bytes)


def to_cann(raw: np.ndarray, qtype: str) -> np.ndarray:
    """Host blocks -> the seed's device buffer (``ggml_backend_cann_transform``), same byte count."""
    blocks = _split_blocks(raw, qtype)
    nblocks = blocks.shape[0]
    out = np.empty(blocks.size, np.uint8)
    quant_bytes = nblocks * (blocks.shape[1] - 2)
    out[quant_bytes:].reshape(nblocks, 2)[:] = blocks[:, :2]
    if qtype == "q8_0":
        out[:quant_bytes].reshape(nblocks, QK)[:] = blocks[:, 2:]
        return out
    # Byte pair (qs[2k], qs[2k+1]) as one little-endian uint16 holds elements 2k, 2k+1 (low
    # nibbles) and 2k+16, 2k+17 (high nibbles); re-pair the nibbles by element.
    pairs = np.ascontiguousarray(blocks[:, 2:]).view("<u2")  # (nblocks, 8)
    dev = out[:quant_bytes].reshape(nblocks, 2, 8)
    dev[:, 0] = ((pairs & 0x000F) | ((pairs >> 4) & 0x00F0)) ^ 0x88  # elements 0..15
    dev[:, 1] = (((pairs >> 4) & 0x000F) | ((pairs >> 8) & 0x00F0)) ^ 0x88  # elements 16..31
    return out


def from_cann(buf: np.ndarray, qtype: str) -> np.ndarray:
    """The seed's device buffer -> host blocks (``ggml_backend_cann_transform_back``)."""
    data = _split_blocks(buf, qtype).reshape(-1)  # same total size as the host blocks
    block_bytes = BLOCK_BYTES[qtype]
    nblocks = data.size // block_bytes
    quant_bytes = nblocks * (block_bytes - 2)
    out = np.empty((nblocks, block_bytes), np.uint8)
    out[:, :2] = data[quant_bytes:].reshape(nblocks, 2)
    if qtype == "q8_0":
        out[:, 2:] = data[:quant_bytes].reshape(nblocks, QK)
        return out.reshape(-1)
    dev = (data[:quant_bytes].reshape(nblocks, 2, 8) ^ 0x88).astype(np.uint16)
    first, second = dev[:, 0], dev[:, 1]  # elements 0..15 and 16..31, two per byte
    pairs = (first & 0x0F) | ((second & 0x0F) << 4) | ((first & 0xF0) << 4) | ((second & 0xF0) << 8)
    out[:, 2:] = pairs.astype("<u2").view(np.uint8).reshape(nblocks, 16)
    return out.reshape(-1)


__all__ = [
    "BLOCK_BYTES",
    "MATRIX_ROW_PADDING",
    "QK",
    "QTYPES",
    "Rounding",
    "cann_alloc_size",
    "dequantize",
    "from_cann",
    "quantize",
    "row_size",
]

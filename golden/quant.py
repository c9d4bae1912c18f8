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
  The two Q8_0 paths also differ off ties now and then, because ``127/amax`` and ``1/(amax/127)``
  can differ by an ulp (65 of 2**20 standard-normal blocks, one quant by +-1 each).

Non-finite conversions follow x86: a float->int conversion of NaN, +-inf or anything out of int32
range yields INT32_MIN. The reference paths keep its low byte (0); the x86 path saturates it to
-128. So NaN elements quantize to 0 (reference) or -128 (x86), and a block whose ``1/d`` overflows
(``amax`` below about 3.7e-37) quantizes entirely to those values.

CANN device layout (seed ``ggml_backend_cann_transform_*``), per tensor of ``n`` elements: all quants
first, then all ``n/32`` f16 scales in block order. Q8_0 quants are the int8 values in element
order. Q4_0 quants are ``n/2`` bytes, byte ``k`` of a block holding element ``2k`` in its low nibble
and ``2k + 1`` in its high nibble (natural order), every byte XOR 0x88 (so each nibble reads as the
signed int4 ``q - 8``).

Byte-level views assume a little-endian host (x86-64 and aarch64, where ggml and CANN run).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from golden import dtypes

QTYPES: tuple[str, ...] = dtypes.QUANT_TYPES
BLOCK_BYTES: dict[str, int] = {q: dtypes.type_size(q) for q in QTYPES}
QK = dtypes.block_size("q4_0")  # elements per block, QK4_0 == QK8_0
MATRIX_ROW_PADDING = 512  # ggml-cann/common.h

# Bytes per element of the plain types, for cann_alloc_size on non-quantized tensors.
_PLAIN_TYPE_BYTES: dict[str, int] = {n: dtypes.type_size(n) for n in dtypes.ALL_TYPES if n not in QTYPES}

Rounding = Literal["reference", "x86"]


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
    """x86 cvt(t)ps2dq of f32 values: truncate, or INT32_MIN when NaN, +-inf or out of range."""
    valid = np.abs(v) < np.float32(2**31)  # False for NaN and +-inf too
    if valid.all():
        return v.astype(np.int32)  # numpy's float -> int cast truncates like C
    return np.where(valid, np.where(valid, v, np.float32(0)).astype(np.int32), np.int32(-(2**31)))


def _low_byte_int8(i: np.ndarray) -> np.ndarray:
    """C ``(int8_t)`` of an int32 as compiled here: keep the low byte (numpy's cast wraps the same way)."""
    return i.astype(np.int8)


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
    return out


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
    return out


_QUANTIZE_CHUNK_BLOCKS = 4096


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
    out = np.empty((blocks.shape[0], BLOCK_BYTES[qtype]), np.uint8)
    # Chunks keep the many per-element temporaries in cache instead of allocating whole tensors.
    for start in range(0, blocks.shape[0], _QUANTIZE_CHUNK_BLOCKS):
        chunk = blocks[start : start + _QUANTIZE_CHUNK_BLOCKS]
        if qtype == "q4_0":
            out[start : start + chunk.shape[0]] = _quantize_q4_0(chunk)
        else:
            out[start : start + chunk.shape[0]] = _quantize_q8_0(chunk, rounding)
    return out.reshape(-1)


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
    host = _host_records(data[: nblocks * block_bytes], qtype)
    scales = host["d"].view(np.float16).astype(np.float32)
    out = np.empty((nblocks, QK), np.float32)
    with np.errstate(invalid="ignore", over="ignore"):  # inf/NaN scales behave as in C
        for start in range(0, nblocks, _CHUNK_BLOCKS):
            stop = min(nblocks, start + _CHUNK_BLOCKS)
            chunk = host["qs"][start:stop]
            quants = _q8_0_quants(chunk) if qtype == "q8_0" else _q4_0_quants(chunk)
            np.multiply(quants, scales[start:stop, None], out=out[start:stop])
    return out.reshape(-1)


def _q8_0_quants(host_qs: np.ndarray) -> np.ndarray:
    as_int8 = np.empty((host_qs.size, QK), np.int8)
    as_int8.view(host_qs.dtype)[:, 0] = host_qs
    return as_int8.astype(np.float32)


def _q4_0_quants(host_qs: np.ndarray) -> np.ndarray:
    """(blocks, 32) float32 of nibble - 8, in element order (all low nibbles, then all high)."""
    packed = np.empty((host_qs.size, 2), np.uint64)
    packed.view(host_qs.dtype)[:, 0] = host_qs
    # Split low and high nibbles on whole contiguous arrays, then interleave per block with
    # one-dimensional 16-byte copies (2-D slices with 16-byte rows are slow in numpy).
    halves = np.empty((2, host_qs.size, 2), np.uint64)
    np.bitwise_and(packed, np.uint64(0x0F0F0F0F0F0F0F0F), out=halves[0])
    np.right_shift(packed, np.uint64(4), out=halves[1])
    np.bitwise_and(halves[1], np.uint64(0x0F0F0F0F0F0F0F0F), out=halves[1])
    nibbles = np.empty((host_qs.size, 2, 2), np.uint64)
    nibbles.view(host_qs.dtype)[:, 0, 0] = halves[0].view(host_qs.dtype)[:, 0]
    nibbles.view(host_qs.dtype)[:, 1, 0] = halves[1].view(host_qs.dtype)[:, 0]
    quants = nibbles.view(np.uint8).reshape(host_qs.size, QK).astype(np.float32)
    return np.subtract(quants, np.float32(8), out=quants)


# --------------------------------------------------------------------------------------------
# CANN device layout
#
# Speed matters here (the transforms run on every upload and download of weight tensors, tens of
# millions of elements): the host blocks are viewed as records of a 2-byte scale and a 16/32-byte
# void field so field copies are memcpy-like, and the Q4_0 nibble work runs on cache-sized chunks
# of contiguous uint16 arrays, because numpy is slow on 2-D slices with short inner rows.

_HOST_RECORD = {
    qtype: np.dtype([("d", "<u2"), ("qs", f"V{BLOCK_BYTES[qtype] - 2}")]) for qtype in BLOCK_BYTES
}
_CHUNK_BLOCKS = 8192  # 8192 blocks x 2 x 16 bytes of uint16 work arrays: a few hundred KiB, in L2
_U16 = np.uint16


def _host_records(raw: np.ndarray, qtype: str) -> np.ndarray:
    block_bytes = _check_qtype(qtype)
    data = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    if data.size % block_bytes:
        raise ValueError(f"{data.size} bytes is not a whole number of {block_bytes}-byte {qtype} blocks")
    return data.view(_HOST_RECORD[qtype])


def to_cann(raw: np.ndarray, qtype: str) -> np.ndarray:
    """Host blocks -> the seed's device buffer (``ggml_backend_cann_transform``), same byte count."""
    host = _host_records(raw, qtype)
    nblocks = host.size
    out = np.empty(nblocks * BLOCK_BYTES[qtype], np.uint8)
    quant_bytes = out.size - 2 * nblocks
    out[quant_bytes:].view(_U16)[:] = host["d"]
    if qtype == "q8_0":
        out[:quant_bytes].view(host.dtype["qs"])[:] = host["qs"]
        return out
    _q4_0_nibbles_to_cann(host["qs"], out[:quant_bytes].view(np.uint64).reshape(nblocks, 2))
    return out


def _q4_0_nibbles_to_cann(host_qs: np.ndarray, dev: np.ndarray) -> None:
    """16 host ``qs`` bytes per block -> 8 bytes of elements 0..15 and 8 of elements 16..31.

    Host byte pair (qs[2k], qs[2k+1]) read as a little-endian uint16 ``w`` holds, nibble by nibble,
    elements 2k, 2k+16, 2k+1, 2k+17. The device byte for elements (2k, 2k+1) is
    ``(w & 0x0F) | ((w >> 4) & 0xF0)``, and the one for (2k+16, 2k+17) is the same function of
    ``w >> 4``. XOR 0x88 on the device byte equals XOR 0x8888 on ``w`` first.
    """
    nblocks = host_qs.size
    work = np.empty((2, _CHUNK_BLOCKS, 8), _U16)  # [elements 0..15 | 16..31][block][byte pair]
    high = np.empty_like(work)
    as_bytes = np.empty((2, _CHUNK_BLOCKS, 8), np.uint8)
    for start in range(0, nblocks, _CHUNK_BLOCKS):
        stop = min(nblocks, start + _CHUNK_BLOCKS)
        w, t, b = work[:, : stop - start], high[:, : stop - start], as_bytes[:, : stop - start]
        w[0].view(host_qs.dtype)[:, 0] = host_qs[start:stop]
        np.bitwise_xor(w[0], _U16(0x8888), out=w[0])
        np.right_shift(w[0], _U16(4), out=w[1])
        np.right_shift(w, _U16(4), out=t)
        np.bitwise_and(t, _U16(0xF0), out=t)
        np.bitwise_and(w, _U16(0x0F), out=w)
        np.bitwise_or(w, t, out=w)
        np.copyto(b, w, casting="unsafe")  # keep the low byte of each uint16
        dev[start:stop, 0] = b[0].view(np.uint64)[:, 0]
        dev[start:stop, 1] = b[1].view(np.uint64)[:, 0]


def from_cann(buf: np.ndarray, qtype: str) -> np.ndarray:
    """The seed's device buffer -> host blocks (``ggml_backend_cann_transform_back``)."""
    block_bytes = _check_qtype(qtype)
    data = np.ascontiguousarray(buf, dtype=np.uint8).reshape(-1)
    if data.size % block_bytes:
        raise ValueError(f"{data.size} bytes is not a whole number of {block_bytes}-byte {qtype} blocks")
    nblocks = data.size // block_bytes
    quant_bytes = data.size - 2 * nblocks
    out = np.empty(data.size, np.uint8)
    host = out.view(_HOST_RECORD[qtype])
    host["d"] = data[quant_bytes:].view(_U16)
    if qtype == "q8_0":
        host["qs"] = data[:quant_bytes].view(host.dtype["qs"])
        return out
    _q4_0_nibbles_from_cann(data[:quant_bytes].view(np.uint64).reshape(nblocks, 2), host["qs"])
    return out


def _q4_0_nibbles_from_cann(dev: np.ndarray, host_qs: np.ndarray) -> None:
    """Inverse of :func:`_q4_0_nibbles_to_cann`.

    A device byte ``a`` (elements 2k, 2k+1) spreads to the uint16 ``(a | a << 4) & 0x0F0F``: element
    2k in the low nibble of the low byte, 2k+1 in the low nibble of the high byte. The host pair is
    that spread for elements 0..15 OR the spread for 16..31 shifted into the high nibbles.
    """
    nblocks = host_qs.size
    as_bytes = np.empty((2, _CHUNK_BLOCKS, 8), np.uint8)
    work = np.empty((2, _CHUNK_BLOCKS, 8), _U16)
    shifted = np.empty_like(work)
    pairs = np.empty((_CHUNK_BLOCKS, 8), _U16)
    for start in range(0, nblocks, _CHUNK_BLOCKS):
        stop = min(nblocks, start + _CHUNK_BLOCKS)
        b, w, t, p = (a[:, : stop - start] for a in (as_bytes, work, shifted, pairs[None]))
        b[0].view(np.uint64)[:, 0] = dev[start:stop, 0]
        b[1].view(np.uint64)[:, 0] = dev[start:stop, 1]
        np.copyto(w, b)
        np.left_shift(w, _U16(4), out=t)
        np.bitwise_or(w, t, out=w)
        np.bitwise_and(w, _U16(0x0F0F), out=w)
        np.left_shift(w[1], _U16(4), out=p[0])
        np.bitwise_or(p[0], w[0], out=p[0])
        np.bitwise_xor(p[0], _U16(0x8888), out=p[0])
        host_qs[start:stop] = p[0].view(host_qs.dtype)[:, 0]


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
    "to_cann",
]

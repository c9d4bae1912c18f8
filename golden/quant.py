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

Speed (figures in ``docs/quantization.md``): ``quantize`` runs ordinary blocks through whole-chunk
array arithmetic and hands blocks with NaN, inf, an overflowing reciprocal scale or a Q4_0 +max/-max
tie to the general code, which spells out the C arithmetic; the transforms and quantizers work on
chunks, with per-thread work buffers.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Literal

import numpy as np

from golden import dtypes

QTYPES: tuple[str, ...] = dtypes.DRAWN_QUANT_TYPES
BLOCK_BYTES: dict[str, int] = {q: dtypes.type_size(q) for q in QTYPES}
QK = dtypes.block_size("q4_0")  # elements per block, QK4_0 == QK8_0
MATRIX_ROW_PADDING = 512  # ggml-cann/common.h

# A host block as a record: the f16 scale's bits and the quants as one opaque field.
_HOST_RECORD = {
    qtype: np.dtype([("d", "<u2"), ("qs", f"V{BLOCK_BYTES[qtype] - 2}")]) for qtype in BLOCK_BYTES
}

# Bytes per element of the plain types, for cann_alloc_size on non-quantized tensors.
_PLAIN_TYPE_BYTES: dict[str, int] = {n: dtypes.type_size(n) for n in dtypes.ALL_TYPES if not dtypes.is_quantized(n)}

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
    if dtypes.is_quantized(qtype) and qtype not in BLOCK_BYTES:
        return dtypes.row_size(qtype, ne0)  # a block format golden/formats/ reads
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
# per-thread work buffers
#
# The quantizers and transforms work on cache-sized chunks with a handful of temporaries each. Fresh
# temporaries on every call are fresh pages from the kernel, and their page faults cost as much as
# the work itself on mid-sized tensors, so each thread keeps its buffers between calls.


_SMALL_ARRAY_BYTES = 65536


class _Scratch(threading.local):
    def __init__(self) -> None:
        self.buffers: dict[str, np.ndarray] = {}

    def array(self, name: str, shape: tuple[int, ...], dtype: type[np.generic] | np.dtype) -> np.ndarray:
        """A ``shape`` array of ``dtype`` over the buffer ``name``; contents are whatever was left there.

        One name must not be used for two arrays that are alive at the same time. Small arrays are
        plain ``np.empty`` (the allocator reuses their memory, and it is cheaper than a view).
        """
        dt = np.dtype(dtype)
        nbytes = dt.itemsize * math.prod(shape)
        if nbytes <= _SMALL_ARRAY_BYTES:
            return np.empty(shape, dt)
        buffer = self.buffers.get(name)
        if buffer is None or buffer.size < nbytes:
            buffer = np.empty(max(nbytes, 64), np.uint8)
            self.buffers[name] = buffer
        return buffer[:nbytes].view(dt).reshape(shape)


_scratch = _Scratch()


# --------------------------------------------------------------------------------------------
# quantizers
#
# Two paths per type. The general one (``_quantize_*_general``) spells out ggml's arithmetic for any
# input: NaN, infinities, scales whose reciprocal overflows, Q4_0 blocks where +max and -max tie. The
# usual one does the same arithmetic with whole-chunk array operations, valid for blocks without any
# of those; it flags the blocks it cannot vouch for and the general path redoes them.


def _quantize_q4_0_general(blocks: np.ndarray) -> np.ndarray:
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


def _quantize_q8_0_general(blocks: np.ndarray, rounding: Rounding) -> np.ndarray:
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


_SMALL_FOLD_ELEMENTS = 64 * QK  # below this, reduce(axis=1) costs less than the five passes


def _fold_blocks(values: np.ndarray, op: np.ufunc, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """``op`` (np.maximum or np.minimum) over each 32-element block of the flat ``values``.

    Five whole-array passes with shifts 16, 8, 4, 2, 1: after them element ``k`` holds ``op`` over
    ``values[k : k + 32]``, so element ``32 i`` is block ``i``'s result. Each pass is one contiguous
    SIMD loop, three times faster than ``reshape(-1, 32).max(axis=1)``. NaN propagates. ``first``
    and ``second`` are ping-pong buffers (``second`` may be ``values`` itself).
    """
    if values.size <= _SMALL_FOLD_ELEMENTS:
        return op.reduce(values.reshape(-1, QK), axis=1)
    length = values.size
    source = values
    for level, shift in enumerate((16, 8, 4, 2, 1)):
        length -= shift
        target = (first, second)[level % 2][:length]
        op(source[:length], source[shift : shift + length], out=target)
        source = target
    return source[::QK].copy()


@dataclass(frozen=True)
class _QuantizeWork:
    """Work arrays for chunks of up to ``nblocks`` blocks (views of per-thread scratch buffers)."""

    first: np.ndarray  # float32 [nblocks * 32]
    second: np.ndarray  # float32 [nblocks * 32]
    quants: np.ndarray  # uint8 [nblocks * 32]
    packed: np.ndarray  # uint64 [nblocks * 4]
    qs: np.ndarray  # V16 [nblocks]

    @classmethod
    def for_blocks(cls, nblocks: int) -> _QuantizeWork:
        n = nblocks * QK
        return cls(
            first=_scratch.array("quantize.first", (n,), np.float32),
            second=_scratch.array("quantize.second", (n,), np.float32),
            quants=_scratch.array("quantize.quants", (n,), np.uint8),
            packed=_scratch.array("quantize.packed", (n // 8,), np.uint64),
            qs=_scratch.array("quantize.qs", (nblocks,), _HOST_RECORD["q4_0"]["qs"]),
        )


def _quantize_q4_0_usual(blocks: np.ndarray, records: np.ndarray, work: _QuantizeWork) -> np.ndarray:
    """Quantize into ``records`` the blocks the general path would give the same result for with
    plain array arithmetic; return the mask of those blocks (the others hold garbage)."""
    nblocks = blocks.shape[0]
    values = blocks.reshape(-1)
    first, second = work.first[: values.size], work.second[: values.size]
    largest = _fold_blocks(values, np.maximum, first, second)
    smallest = _fold_blocks(values, np.minimum, first, second)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        all_zero = (largest == 0) & (smallest == 0)
        # ggml keeps the first element of largest |x|; with +m and -m both present that needs the
        # element order, so such blocks go to the general path (so do NaN and inf blocks).
        usual = np.isfinite(largest) & np.isfinite(smallest) & ((largest != -smallest) | all_zero)
        signed_max = np.where(largest > -smallest, largest, smallest)
        signed_max[all_zero] = 0  # ggml's max starts at +0 and no element beats it: d = -0.0
        d = signed_max / np.float32(-8)
        inv_d = np.where(d != 0, np.float32(1) / d, np.float32(0))
        usual &= np.isfinite(inv_d)  # not left to numpy's float->int cast of inf, which is platform-defined
        shifted = first.reshape(nblocks, QK)
        np.multiply(blocks, inv_d[:, None], out=shifted)
        np.add(shifted, np.float32(8.5), out=shifted)  # two f32 roundings, as in C (no FMA)
        # For usual blocks |x·id| <= 8 (plus an ulp or two), so the truncation lands in 0..16.
        quants = work.quants[: values.size]
        np.copyto(quants, shifted.reshape(-1), casting="unsafe")
    np.minimum(quants, np.uint8(15), out=quants)
    # qs[j] = q[j] | q[j + 16] << 4, on uint64 lanes (four per block; values < 16 never carry).
    lanes = quants.view(np.uint64)
    packed = work.packed[: lanes.size]
    np.left_shift(lanes[2:], np.uint64(4), out=packed[:-2])
    np.bitwise_or(packed[:-2], lanes[:-2], out=packed[:-2])
    # Lanes 4i and 4i + 1 are block i's qs; gather them contiguously, then into the records
    # (16-byte copies with one side contiguous are fast, strided to strided is not).
    qs = work.qs[:nblocks]
    np.copyto(qs, packed.view(records.dtype["qs"])[::2])
    records["qs"] = qs
    with np.errstate(over="ignore"):
        records["d"] = d.astype(np.float16).view(np.uint16)  # _f16_bits without its NaN case
    return usual


def _quantize_q8_0_usual(
    blocks: np.ndarray, records: np.ndarray, rounding: Rounding, work: _QuantizeWork
) -> np.ndarray:
    """Like :func:`_quantize_q4_0_usual`, for Q8_0: usual blocks have a finite ``amax`` (no NaN, no
    inf) and a finite reciprocal scale, so ``|x·id| <= 127`` (plus an ulp or two)."""
    nblocks = blocks.shape[0]
    values = blocks.reshape(-1)
    first, second = work.first[: values.size], work.second[: values.size]
    np.abs(values, out=second)
    # Without NaN the fold order does not matter, so this is also the x86 maxps tree's result.
    amax = _fold_blocks(second, np.maximum, first, second)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        d = amax / np.float32(127)
        if rounding == "reference":
            inv_d = np.where(d != 0, np.float32(1) / d, np.float32(0))
        else:
            inv_d = np.where(amax != 0, np.float32(127) / amax, np.float32(0))
        usual = np.isfinite(amax * inv_d)  # false for a NaN or inf amax and for an overflowing id
        scaled = first.reshape(nblocks, QK)
        np.multiply(blocks, inv_d[:, None], out=scaled)
        if rounding == "reference":
            # roundf(v) == trunc(v + copysign(0.5 - 2**-25, v)) for every f32 |v| < 2**31 (checked
            # exhaustively); the constant is 0x3EFFFFFF, and its sign is x's because id >= 0.
            half = second.view(np.uint32)
            np.bitwise_and(values.view(np.uint32), np.uint32(0x80000000), out=half)
            np.bitwise_or(half, np.uint32(0x3EFFFFFF), out=half)
            np.add(scaled.reshape(-1), half.view(np.float32), out=scaled.reshape(-1))
        else:
            np.rint(scaled, out=scaled)  # ties to even, like _MM_ROUND_NEAREST
        quants = work.quants[: values.size].view(np.int8)
        np.copyto(quants, scaled.reshape(-1), casting="unsafe")  # truncation; in -127..127 when usual
        records["d"] = d.astype(np.float16).view(np.uint16)  # _f16_bits without its NaN case
    records["qs"] = quants.view(records.dtype["qs"])
    return usual


_QUANTIZE_CHUNK_BLOCKS = 8192  # 1 MiB of f32 per work array: fewer numpy calls per block than smaller chunks


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
    nblocks = blocks.shape[0]
    out = np.empty((nblocks, BLOCK_BYTES[qtype]), np.uint8)
    records = out.reshape(-1).view(_HOST_RECORD[qtype])
    work = _QuantizeWork.for_blocks(min(nblocks, _QUANTIZE_CHUNK_BLOCKS))
    for start in range(0, nblocks, _QUANTIZE_CHUNK_BLOCKS):
        stop = min(nblocks, start + _QUANTIZE_CHUNK_BLOCKS)
        chunk = blocks[start:stop]
        if qtype == "q4_0":
            usual = _quantize_q4_0_usual(chunk, records[start:stop], work)
        else:
            usual = _quantize_q8_0_usual(chunk, records[start:stop], rounding, work)
        if not usual.all():
            unusual = np.flatnonzero(~usual)
            if qtype == "q4_0":
                out[start + unusual] = _quantize_q4_0_general(chunk[unusual])
            else:
                out[start + unusual] = _quantize_q8_0_general(chunk[unusual], rounding)
    return out.reshape(-1)


_DEQUANTIZE_CHUNK_BLOCKS = 8192


def dequantize(raw: np.ndarray, qtype: str, n: int, dtype: type[np.floating] = np.float32) -> np.ndarray:
    """ggml ``to_float`` of the first ``n`` elements (``n % 32 == 0``) of raw blocks: flat float32.

    Each value is the f32 product of the widened f16 scale and the integer quant. That product is exact (11
    significant bits times at most 8), so ``dtype=np.float64`` gives the same values without a float32 copy
    of the tensor first (the golden's float64 inputs, straight from the blocks).
    """
    block_bytes = _check_qtype(qtype)
    if n % QK:
        raise ValueError(f"n must be a multiple of {QK}, got {n}")
    nblocks = n // QK
    data = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    if data.size < nblocks * block_bytes:
        raise ValueError(f"{n} {qtype} elements need {nblocks * block_bytes} bytes, got {data.size}")
    host = _host_records(data[: nblocks * block_bytes], qtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dequantize gives float32 or float64, not {np.dtype(dtype).name}")
    out = np.empty((nblocks, QK), dtype)
    with np.errstate(invalid="ignore", over="ignore"):  # inf/NaN scales behave as in C
        for start in range(0, nblocks, _DEQUANTIZE_CHUNK_BLOCKS):
            stop = min(nblocks, start + _DEQUANTIZE_CHUNK_BLOCKS)
            chunk = out[start:stop]
            if qtype == "q8_0":
                _q8_0_quants(host["qs"][start:stop], chunk)
            else:
                _q4_0_quants(host["qs"][start:stop], chunk)
            scales = host["d"][start:stop].view(np.float16).astype(dtype)
            np.multiply(chunk, scales[:, None], out=chunk)
    return out.reshape(-1)


def _q8_0_quants(host_qs: np.ndarray, out: np.ndarray) -> None:
    """(blocks, 32) float32 of the int8 quants, into ``out``."""
    as_int8 = _scratch.array("dequantize.int8", out.shape, np.int8)
    as_int8.view(host_qs.dtype)[:, 0] = host_qs
    np.copyto(out, as_int8)


def _q4_0_quants(host_qs: np.ndarray, out: np.ndarray) -> None:
    """(blocks, 32) float32 of nibble - 8 in element order (all low nibbles, then all high), into ``out``."""
    nblocks = host_qs.size
    packed = _scratch.array("dequantize.packed", (nblocks,), host_qs.dtype)
    np.copyto(packed, host_qs)
    lanes = packed.view(np.uint64)  # two per block
    # Low nibbles are elements 0..15, high nibbles 16..31: split them on whole arrays, then put each
    # block's two 16-byte halves side by side (contiguous-to-strided 16-byte copies are fast).
    halves = _scratch.array("dequantize.halves", (2, 2 * nblocks), np.uint64)
    np.bitwise_and(lanes, np.uint64(0x0F0F0F0F0F0F0F0F), out=halves[0])
    np.right_shift(lanes, np.uint64(4), out=halves[1])
    np.bitwise_and(halves[1], np.uint64(0x0F0F0F0F0F0F0F0F), out=halves[1])
    nibbles = _scratch.array("dequantize.nibbles", (nblocks, 2), host_qs.dtype)
    nibbles[:, 0] = halves[0].view(host_qs.dtype)
    nibbles[:, 1] = halves[1].view(host_qs.dtype)
    np.copyto(out, nibbles.view(np.uint8).reshape(nblocks, QK))
    np.subtract(out, np.float32(8), out=out)


# --------------------------------------------------------------------------------------------
# CANN device layout
#
# Speed matters here (the transforms run on every upload and download of weight tensors, tens of
# millions of elements). Host blocks are viewed as records of a 2-byte scale and a 16/32-byte void
# field. NumPy copies items of up to 16 bytes quickly when one side is contiguous, and calls memmove
# per item otherwise (so a Q8_0 block's 32 quants cost a memmove each), so the Q4_0 nibble work
# runs on contiguous uint64 arrays of one chunk, between such copies.

_CHUNK_BLOCKS = 32768  # measured: smaller chunks pay more in numpy calls than they win in cache
_U16 = np.uint16
_XOR_88 = np.uint64(0x8888888888888888)


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
    dev_scales = out[quant_bytes:].view(_U16)
    dev_quants = out[:quant_bytes].view(host.dtype["qs"])  # one item per block
    work = _NibbleWork.for_blocks(min(nblocks, _CHUNK_BLOCKS)) if qtype == "q4_0" else None
    # Scales and quants chunk by chunk, so each host byte comes from memory once.
    for start in range(0, nblocks, _CHUNK_BLOCKS):
        stop = min(nblocks, start + _CHUNK_BLOCKS)
        chunk = host[start:stop]
        dev_scales[start:stop] = chunk["d"]
        if work is None:
            dev_quants[start:stop] = chunk["qs"]
        else:
            _q4_0_nibbles_to_cann(chunk["qs"], dev_quants[start:stop].view(np.uint64).reshape(-1, 2), work)
    return out


@dataclass(frozen=True)
class _NibbleWork:
    """Work arrays of the Q4_0 transforms for chunks of up to ``nblocks`` blocks."""

    lanes: np.ndarray  # uint16 [nblocks, 8]: a block's 16 host qs bytes as little-endian pairs
    shifted: np.ndarray  # uint16 [nblocks, 8]
    first: np.ndarray  # uint64 [nblocks]: 8 bytes per block
    second: np.ndarray  # uint64 [nblocks]
    low: np.ndarray  # uint64 [nblocks]
    high: np.ndarray  # uint64 [nblocks]

    @classmethod
    def for_blocks(cls, nblocks: int) -> _NibbleWork:
        return cls(
            lanes=_scratch.array("nibbles.lanes", (nblocks, 8), _U16),
            shifted=_scratch.array("nibbles.shifted", (nblocks, 8), _U16),
            first=_scratch.array("nibbles.first", (nblocks,), np.uint64),
            second=_scratch.array("nibbles.second", (nblocks,), np.uint64),
            low=_scratch.array("nibbles.low", (nblocks,), np.uint64),
            high=_scratch.array("nibbles.high", (nblocks,), np.uint64),
        )


_LOW_NIBBLES = np.uint64(0x0F0F0F0F0F0F0F0F)
_HIGH_NIBBLES = np.uint64(0xF0F0F0F0F0F0F0F0)


def _transpose_nibbles(first: np.ndarray, second: np.ndarray, work: _NibbleWork) -> None:
    """In place, byte by byte (uint64 arrays, 8 bytes per item): with ``f`` and ``s`` the bytes at one
    position, ``f`` becomes ``f.low | s.low << 4`` and ``s`` becomes ``f.high | s.high << 4``.

    This is the whole Q4_0 layout change, in both directions: from the even and odd host qs bytes
    it makes the device bytes of elements 0..15 and of 16..31, and from those it makes the even
    and odd host bytes again (it is its own inverse).
    """
    n = first.size
    low, high = work.low[:n], work.high[:n]
    np.bitwise_and(second, _LOW_NIBBLES, out=low)
    np.left_shift(low, np.uint64(4), out=low)  # masked first, so no nibble crosses a byte
    np.right_shift(first, np.uint64(4), out=high)
    np.bitwise_and(high, _LOW_NIBBLES, out=high)  # drops what came down from the next byte
    np.bitwise_and(first, _LOW_NIBBLES, out=first)
    np.bitwise_or(first, low, out=first)
    np.bitwise_and(second, _HIGH_NIBBLES, out=second)
    np.bitwise_or(second, high, out=second)


def _q4_0_nibbles_to_cann(host_qs: np.ndarray, dev: np.ndarray, work: _NibbleWork) -> None:
    """One chunk: 16 host ``qs`` bytes per block -> 8 device bytes of elements 0..15 and 8 of 16..31.

    Host byte ``qs[j]`` holds element j (low nibble) and j + 16 (high). Device byte k of the first
    half holds elements 2k and 2k + 1, i.e. the low nibbles of ``qs[2k]`` and ``qs[2k + 1]``; byte k
    of the second half their high nibbles: a nibble transpose of the even and odd host bytes. The
    XOR 0x88 of every device byte rides on the copy into the device buffer.
    """
    n = host_qs.size
    lanes, shifted = work.lanes[:n], work.shifted[:n]
    even, odd = work.first[:n], work.second[:n]
    lanes.view(host_qs.dtype)[:, 0] = host_qs
    np.copyto(even.view(np.uint8).reshape(n, 8), lanes, casting="unsafe")  # low byte of each pair
    # A uint64 shift stands in for a uint16 one (numpy's is slower): the next pair's low byte lands
    # in the top byte, which the narrowing copy drops.
    np.right_shift(lanes.view(np.uint64), np.uint64(8), out=shifted.view(np.uint64))
    np.copyto(odd.view(np.uint8).reshape(n, 8), shifted, casting="unsafe")
    _transpose_nibbles(even, odd, work)
    np.bitwise_xor(even, _XOR_88, out=dev[:, 0])
    np.bitwise_xor(odd, _XOR_88, out=dev[:, 1])


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
    dev_scales = data[quant_bytes:].view(_U16)
    dev_quants = data[:quant_bytes].view(host.dtype["qs"])
    work = _NibbleWork.for_blocks(min(nblocks, _CHUNK_BLOCKS)) if qtype == "q4_0" else None
    for start in range(0, nblocks, _CHUNK_BLOCKS):
        stop = min(nblocks, start + _CHUNK_BLOCKS)
        chunk = host[start:stop]
        chunk["d"] = dev_scales[start:stop]
        if work is None:
            chunk["qs"] = dev_quants[start:stop]
        else:
            _q4_0_nibbles_from_cann(dev_quants[start:stop].view(np.uint64).reshape(-1, 2), chunk["qs"], work)
    return out


def _q4_0_nibbles_from_cann(dev: np.ndarray, host_qs: np.ndarray, work: _NibbleWork) -> None:
    """Inverse of :func:`_q4_0_nibbles_to_cann`, for one chunk: the same nibble transpose gives the
    even and odd host bytes, which are then interleaved into byte pairs."""
    n = host_qs.size
    lanes, shifted = work.lanes[:n], work.shifted[:n]
    even, odd = work.first[:n], work.second[:n]
    np.bitwise_xor(dev[:, 0], _XOR_88, out=even)
    np.bitwise_xor(dev[:, 1], _XOR_88, out=odd)
    _transpose_nibbles(even, odd, work)
    np.copyto(lanes, even.view(np.uint8).reshape(n, 8))
    np.copyto(shifted, odd.view(np.uint8).reshape(n, 8))
    np.left_shift(shifted.view(np.uint64), np.uint64(8), out=shifted.view(np.uint64))  # bytes: no spill
    np.bitwise_or(lanes, shifted, out=lanes)
    host_qs[:] = lanes.view(host_qs.dtype)[:, 0]


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

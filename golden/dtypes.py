"""ggml element types as the golden model sees them: rounding, byte encodings and sizes.

Values travel through the harness as float64 "logical values". A tensor of dtype T holds values
that are exactly representable in T; :func:`round_to` maps any float64 to the nearest such value
the way ggml's converters do (IEEE round-to-nearest-even for F32 and F16, RNE on the upper 16 bits
for BF16, truncation toward zero for I32 as CPY does).
"""

from __future__ import annotations

import numpy as np

FLOAT_TYPES = ("f32", "f16", "bf16")
QUANT_TYPES = ("q4_0", "q8_0")
ALL_TYPES = ("f32", "f16", "bf16", "i32", "q4_0", "q8_0")

# (bytes per block, elements per block), as ggml_type_size / ggml_blck_size report them
_BLOCK = {
    "f32": (4, 1),
    "f16": (2, 1),
    "bf16": (2, 1),
    "i32": (4, 1),
    "i64": (8, 1),  # COUNT_EQUAL's result
    "q4_0": (18, 32),
    "q8_0": (34, 32),
}

# ggml_type enum values (ggml.h, 0.20.2)
GGML_TYPE_ID = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 8, "i32": 26, "i64": 27, "bf16": 30}

# numpy dtype holding one stored element (bf16 is kept as its raw 16 bits)
STORAGE_DTYPE = {
    "f32": np.dtype("<f4"),
    "f16": np.dtype("<f2"),
    "bf16": np.dtype("<u2"),
    "i32": np.dtype("<i4"),
    "i64": np.dtype("<i8"),
}


def type_size(dtype: str) -> int:
    return _BLOCK[dtype][0]


def block_size(dtype: str) -> int:
    return _BLOCK[dtype][1]


def row_size(dtype: str, ne0: int) -> int:
    """``ggml_row_size``: bytes of ``ne0`` consecutive elements (ne0 a multiple of the block)."""
    size, blck = _BLOCK[dtype]
    if ne0 % blck:
        raise ValueError(f"{dtype} rows need a multiple of {blck} elements, got {ne0}")
    return size * ne0 // blck


def is_quantized(dtype: str) -> bool:
    return dtype in QUANT_TYPES


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 values to BF16 bit patterns: round-to-nearest-even on the upper 16 bits.

    NaN keeps its sign and becomes a quiet NaN, as ggml's ``ggml_compute_fp32_to_bf16`` does.
    """
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    out = np.where(nan, (bits >> 16) | 64, rounded)
    return out.astype(np.uint16)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_to(values: np.ndarray, dtype: str) -> np.ndarray:
    """Round float64 values once to ``dtype`` and return them as float64 again.

    BF16 goes float64 -> float32 -> bf16; the intermediate rounding can only matter for values
    within 2^-24 relative of a bf16 tie, which no golden output lands on by design.
    """
    x = np.asarray(values, dtype=np.float64)
    if dtype == "f32":
        with np.errstate(over="ignore"):
            return x.astype(np.float32).astype(np.float64)
    if dtype == "f16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16).astype(np.float64)
    if dtype == "bf16":
        with np.errstate(over="ignore"):
            return bf16_to_f32(bf16_bits(x.astype(np.float32))).astype(np.float64)
    if dtype == "i32":
        with np.errstate(invalid="ignore"):
            return np.trunc(x).astype(np.int32).astype(np.float64)
    if dtype == "i64":
        with np.errstate(invalid="ignore"):
            return np.trunc(x).astype(np.int64).astype(np.float64)
    raise ValueError(f"round_to: {dtype} is not a plain element type")


def to_storage(values: np.ndarray, dtype: str) -> np.ndarray:
    """Logical values (already representable) to the numpy array of stored elements."""
    if dtype == "bf16":
        return bf16_bits(np.asarray(values, dtype=np.float32))
    if dtype == "i32":
        return np.asarray(values).astype(np.int32)
    if dtype == "i64":
        return np.asarray(values).astype(np.int64)
    return np.asarray(values).astype(STORAGE_DTYPE[dtype])


def from_storage(stored: np.ndarray, dtype: str) -> np.ndarray:
    """Stored elements back to float64 logical values (int32 stays int32)."""
    if dtype == "bf16":
        return bf16_to_f32(stored).astype(np.float64)
    if dtype == "i32":
        return np.asarray(stored, dtype=np.int32)
    if dtype == "i64":
        return np.asarray(stored, dtype=np.int64)
    return np.asarray(stored).astype(np.float64)


def ulp(values: np.ndarray, dtype: str) -> np.ndarray:
    """Spacing of ``dtype`` at each value (the gap to the next representable magnitude)."""
    a = np.abs(np.asarray(values, dtype=np.float64))
    a = np.where(np.isfinite(a), a, 0.0)
    if dtype == "f32":
        with np.errstate(over="ignore"):
            f = a.astype(np.float32)
        # at and beyond the largest finite value the spacing is that of the top binade
        # (np.spacing(FLT_MAX) is inf, which would accept anything)
        top = np.nextafter(np.finfo(np.float32).max, np.float32(0))
        return np.spacing(np.minimum(f, top)).astype(np.float64)
    if dtype == "f16":
        with np.errstate(over="ignore"):
            h = a.astype(np.float16)
        top = np.nextafter(np.float16(65504), np.float16(0))
        return np.spacing(np.minimum(h, top)).astype(np.float64)
    if dtype == "bf16":
        exp = np.floor(np.log2(np.maximum(a, 2.0**-126)))
        return 2.0 ** (exp - 7)
    if dtype in ("i32", "i64"):
        return np.ones_like(a)
    raise ValueError(f"ulp: {dtype} is not a plain element type")

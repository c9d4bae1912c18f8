"""ggml element types as the golden model sees them: rounding, byte encodings and sizes.

Values travel through the harness as float64 "logical values". A tensor of dtype T holds values
that are exactly representable in T; :func:`round_to` maps any float64 to the nearest such value
the way ggml's converters do (IEEE round-to-nearest-even for F32 and F16, RNE on the upper 16 bits
for BF16, truncation toward zero for I32 as CPY does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class DType:
    """One ggml element type: the facts every layer reads from here and nowhere else."""

    name: str  # the harness's name, as in case ids: f32, q4_0...
    ggml_type: int  # enum ggml_type value (ggml.h)
    type_size: int  # bytes per block (ggml_type_size)
    block_size: int  # elements per block (ggml_blck_size)
    kind: str  # "float", "int" or "quant"
    storage: np.dtype[Any] | None  # numpy dtype of one stored element (bf16: its raw 16 bits); None for blocks


# The one dtype table (enum values from ggml.h, 0.20.2; checked against the header by the tests).
# Order matters: it is the order dtypes are listed in messages and reports.
DTYPES: dict[str, DType] = {d.name: d for d in (
    DType("f32", 0, 4, 1, "float", np.dtype("<f4")),
    DType("f16", 1, 2, 1, "float", np.dtype("<f2")),
    DType("bf16", 30, 2, 1, "float", np.dtype("<u2")),
    DType("i8", 24, 1, 1, "int", np.dtype("<i1")),
    DType("i16", 25, 2, 1, "int", np.dtype("<i2")),
    DType("i32", 26, 4, 1, "int", np.dtype("<i4")),
    DType("i64", 27, 8, 1, "int", np.dtype("<i8")),
    DType("q4_0", 2, 2 + 16, 32, "quant", None),  # f16 scale + 32 4-bit quants
    DType("q8_0", 8, 2 + 32, 32, "quant", None),  # f16 scale + 32 int8 quants
    # the other block formats golden/formats/ reads (layouts there; checked against it by the tests)
    DType("q4_1", 3, 20, 32, "quant", None),
    DType("q5_0", 6, 22, 32, "quant", None),
    DType("q5_1", 7, 24, 32, "quant", None),
    DType("q8_1", 9, 36, 32, "quant", None),
    DType("q2_k", 10, 84, 256, "quant", None),
    DType("q3_k", 11, 110, 256, "quant", None),
    DType("q4_k", 12, 144, 256, "quant", None),
    DType("q5_k", 13, 176, 256, "quant", None),
    DType("q6_k", 14, 210, 256, "quant", None),
    DType("q8_k", 15, 292, 256, "quant", None),
    DType("iq4_nl", 20, 18, 32, "quant", None),
    DType("tq2_0", 35, 66, 256, "quant", None),
    DType("mxfp4", 39, 17, 32, "quant", None),
    DType("iq2_xxs", 16, 66, 256, "quant", None),
    DType("iq2_xs", 17, 74, 256, "quant", None),
    DType("iq3_xxs", 18, 98, 256, "quant", None),
    DType("iq1_s", 19, 50, 256, "quant", None),
    DType("iq3_s", 21, 110, 256, "quant", None),
    DType("iq2_s", 22, 82, 256, "quant", None),
    DType("iq4_xs", 23, 136, 256, "quant", None),
    DType("iq1_m", 29, 56, 256, "quant", None),
    DType("tq1_0", 34, 54, 256, "quant", None),
    # newer than 0.20.2 (0.25.1 has them): a release without one never hands the golden its bytes
    DType("nvfp4", 40, 36, 64, "quant", None),
    DType("q1_0", 41, 18, 128, "quant", None),
    DType("q2_0", 42, 18, 64, "quant", None),
)}

ALL_TYPES: tuple[str, ...] = tuple(DTYPES)
FLOAT_TYPES: tuple[str, ...] = tuple(n for n, d in DTYPES.items() if d.kind == "float")
QUANT_TYPES: tuple[str, ...] = tuple(n for n, d in DTYPES.items() if d.kind == "quant")
# the quantized types every op with quantized signatures draws (CONT, OUT_PROD, the KV cache; CPY, DUP and
# SET_ROWS draw DRAWN_COPY_TYPES) and the CANN weight transforms know
DRAWN_QUANT_TYPES: tuple[str, ...] = ("q4_0", "q8_0")
# the quantized destinations CPY, SET_ROWS and DUP draw: every type ggml quantizes into at run time (the
# KV-cache types of llama.cpp's --cache-type-k/-v) whose quantizer the golden has
DRAWN_COPY_TYPES: tuple[str, ...] = DRAWN_QUANT_TYPES + ("q4_1", "q5_0", "q5_1", "iq4_nl")
# the weight formats MUL_MAT, MUL_MAT_ID and GET_ROWS draw as src0: every block format with a to_float
# (golden/formats); a new format joins the op tier by being added here (with its golden/matmul.py
# WEIGHT_ACTIVATIONS row and its Format.scale_fields)
DRAWN_WEIGHT_TYPES: tuple[str, ...] = DRAWN_QUANT_TYPES + (
    "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl", "tq2_0", "mxfp4",
    "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq4_xs", "tq1_0", "q1_0", "q2_0",
    "iq1_m", "nvfp4")  # last, so the signatures (and test ids, and ci draws) before them stay as they were
# read (models, conform model --weights) but not yet drawn by the op tier, each with its reason (none now:
# IQ1_M's nibble-spread F16 d and NVFP4's UE4M3 sub-block scales got their scale encodings on 2026-12-04)
NOT_YET_DRAWN_WEIGHT_TYPES: tuple[str, ...] = ()
INDEX_TYPES: tuple[str, ...] = tuple(n for n, d in DTYPES.items() if d.kind == "int")  # stay integers end to end
GGML_TYPE_ID: dict[str, int] = {n: d.ggml_type for n, d in DTYPES.items()}
STORAGE_DTYPE: dict[str, np.dtype[Any]] = {n: d.storage for n, d in DTYPES.items() if d.storage is not None}


def type_size(dtype: str) -> int:
    return DTYPES[dtype].type_size


def block_size(dtype: str) -> int:
    return DTYPES[dtype].block_size


def row_size(dtype: str, ne0: int) -> int:
    """``ggml_row_size``: bytes of ``ne0`` consecutive elements (ne0 a multiple of the block)."""
    d = DTYPES[dtype]
    if ne0 % d.block_size:
        raise ValueError(f"{dtype} rows need a multiple of {d.block_size} elements, got {ne0}")
    return d.type_size * ne0 // d.block_size


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
    if dtype in INDEX_TYPES:  # truncation toward zero, as CPY converts to I32
        with np.errstate(invalid="ignore"):
            return np.trunc(x).astype(STORAGE_DTYPE[dtype]).astype(np.float64)
    raise ValueError(f"round_to: {dtype} is not a plain element type")


def to_storage(values: np.ndarray, dtype: str) -> np.ndarray:
    """Logical values (already representable) to the numpy array of stored elements."""
    if dtype == "bf16":
        return bf16_bits(np.asarray(values, dtype=np.float32))
    return np.asarray(values).astype(STORAGE_DTYPE[dtype])


def from_storage(stored: np.ndarray, dtype: str) -> np.ndarray:
    """Stored elements back to float64 logical values (integer indices stay integers)."""
    if dtype == "bf16":
        return bf16_to_f32(stored).astype(np.float64)
    if dtype in INDEX_TYPES:
        return np.asarray(stored, dtype=STORAGE_DTYPE[dtype])
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
    if dtype in INDEX_TYPES:
        return np.ones_like(a)
    raise ValueError(f"ulp: {dtype} is not a plain element type")

"""Input arrays for a case, made from its data seed and value distribution with numpy's Generator.

The same case always gets the same bytes, so a case id alone reproduces a failure. Ops whose
inputs have structure (row indices, positions, masks) register a maker with their case entry
(``conformance.cases.register(make_inputs=...)``).
"""

from __future__ import annotations

import numpy as np

from golden import catalogue, dtypes
from golden.case import OpCase, TensorSpec

DISTRIBUTIONS = {
    "uniform": (-1.0, 1.0),  # test-backend-ops' default range
    "dense": (-8.0, 8.0),  # where activations bend: catches erf-vs-quick GELU (0.02 at x≈−2.27)
    "wide": (-150.0, 150.0),  # test-backend-ops' unary range: overflow/NaN probes
    "special": (-8.0, 8.0),  # dense plus ±0, ±inf, NaN and subnormals sprinkled in
}

# I64 stays within ±2^53 so the verdict's float64 comparison is exact; values that large still fill
# the upper four bytes (a device moving 4 of the 8 bytes is visible)
INT_RANGES = {"i8": (-128, 128), "i16": (-(1 << 15), 1 << 15), "i64": (-(1 << 53), 1 << 53)}
# distributions under which I32 data spans its whole range (the ``int>2^24`` regime)
FULL_RANGE_INTEGERS = ("wide", "special")
SUBNORMAL = {"f32": 2.0**-140, "f16": 2.0**-20, "bf16": 2.0**-130}

def floats(
    rng: np.random.Generator, spec: TensorSpec, distribution: str, specials: tuple[float, ...] = (),
    max_abs: float | None = None,
) -> np.ndarray:
    """Values for one float tensor, already rounded to its dtype (numpy order)."""
    lo, hi = DISTRIBUTIONS[distribution]
    x = rng.uniform(lo, hi, size=spec.np_shape)
    if distribution == "special" and x.size:
        n = max(1, x.size // 10)
        where = rng.integers(0, x.size, size=n)
        pool = list(specials) + [SUBNORMAL.get(spec.dtype, 0.0), -SUBNORMAL.get(spec.dtype, 0.0)]
        x.flat[where] = rng.choice(np.array(pool, dtype=np.float64), size=n)
    if max_abs is not None:
        finite = np.isfinite(x)
        x[finite] = np.clip(x[finite], -max_abs, max_abs)
    return dtypes.round_to(x, spec.dtype)


def full_range_i32(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """I32 over its whole range, a tenth of the values its extremes, 0, -1 and 2^24 + 1 (the first
    integer f32 cannot hold)."""
    info = np.iinfo(np.int32)
    edges = np.array([info.min, info.max, 0, -1, (1 << 24) + 1], np.int64)
    x = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=np.int64)
    x = np.where(rng.random(shape) < 0.1, rng.choice(edges, size=shape), x)
    return x.astype(np.int32)


# Raw random blocks of a weight format: every byte random but the super-scale fields (Format.scale_fields),
# which are drawn from these ranges so that every product stays finite and normal in F16 as well as f32
# (the largest |value| of any format is 128·32 sub-block scale·quant = 2^12 times d ≤ 2^-4: 256)
F16_SCALE_EXPONENTS = (-12.0, -4.0)  # |d| and |dmin| = 2^u, u uniform here, random sign
E8M0_SCALE_EXPONENTS = (119, 131)  # MXFP4's biased exponent e: d = 2^(e-128) from 2^-9 to 2^2
# NVFP4's UE4M3 sub-block scales: exponent field 0 (subnormal) to 11, any mantissa: halved scale up to
# 1.875·2^3 = 15, so |value| ≤ 12·15 = 180; never 0x7F/0xFF (exponent 15). Bit 7, which ggml's to_float
# ignores and its quantizer never sets (the U of UE4M3), is random only under UE4M3_BIT7_DISTRIBUTIONS
UE4M3_SCALE_EXPONENTS = (0, 11)
UE4M3_BIT7_DISTRIBUTIONS = ("special",)  # the out-of-range inputs (ggml-vulkan reads such a byte otherwise)
# distributions under which a format with a golden quantizer gets raw random blocks (else quantized data)
RAW_BLOCK_DISTRIBUTIONS = ("wide", "special")


def random_blocks(rng: np.random.Generator, qtype: str, n_blocks: int, ue4m3_bit7: bool = True) -> np.ndarray:
    """(n_blocks, type_size) uint8: any bits in quants and sub-block scales/mins, sane super-scales.
    ``ue4m3_bit7=False`` clears the unused top bit of UE4M3 scale bytes (the same draws otherwise)."""
    from golden import formats

    fmt = formats.get(qtype)
    blocks = rng.integers(0, 256, size=(n_blocks, fmt.type_size), dtype=np.uint8)
    n_fields = len(fmt.scale_fields)
    if fmt.scale_encoding == "e8m0":
        scales = rng.integers(*E8M0_SCALE_EXPONENTS, size=(n_blocks, n_fields), endpoint=True).astype(np.float64)
    elif fmt.scale_encoding == "ue4m3":
        exponent = rng.integers(*UE4M3_SCALE_EXPONENTS, size=(n_blocks, n_fields), endpoint=True)
        mantissa = rng.integers(0, 8, size=exponent.shape)
        bit7 = rng.integers(0, 2, size=exponent.shape) * ue4m3_bit7
        scales = ((exponent << 3) | mantissa | (bit7 << 7)).astype(np.float64)
    else:
        magnitude = 2.0 ** rng.uniform(*F16_SCALE_EXPONENTS, size=(n_blocks, n_fields))
        scales = np.where(rng.random((n_blocks, n_fields)) < 0.5, -magnitude, magnitude)
    fmt.write_scales(blocks, scales)
    return blocks


def weight_format_input(rng: np.random.Generator, spec: TensorSpec, distribution: str) -> np.ndarray:
    """A tensor of a weight format beyond Q4_0/Q8_0, as raw rows (numpy order, last axis the row's bytes):
    raw random blocks, or — for a format with a golden quantizer, under uniform/dense — real values in
    the distribution's range quantized by it."""
    from golden import formats

    fmt = formats.get(spec.dtype)
    rows_shape = tuple(reversed(spec.ne[1:]))
    if fmt.quantize is None or distribution in RAW_BLOCK_DISTRIBUTIONS:
        raw = random_blocks(rng, spec.dtype, spec.nelements // fmt.block_size,
                            ue4m3_bit7=distribution in UE4M3_BIT7_DISTRIBUTIONS)
    else:
        values = rng.uniform(*DISTRIBUTIONS[distribution], size=spec.np_shape).astype(np.float32)
        raw = fmt.quantize(values.reshape(-1, spec.ne[0]), "reference")
    return raw.reshape(rows_shape + (-1,))


def plain_input(rng: np.random.Generator, spec: TensorSpec, case: OpCase) -> np.ndarray:
    op = catalogue.get(case.op)
    if spec.dtype == "i32":
        if case.distribution in FULL_RANGE_INTEGERS:  # golden.spec.FULL_INTEGERS: beyond f32's 2^24
            return full_range_i32(rng, spec.np_shape)
        return rng.integers(-1000, 1000, size=spec.np_shape, dtype=np.int32)
    if spec.dtype in dtypes.INDEX_TYPES:  # I8/I16 over their whole range; I64 with its high bytes used
        lo, hi = INT_RANGES[spec.dtype]
        return rng.integers(lo, hi, size=spec.np_shape, dtype=dtypes.STORAGE_DTYPE[spec.dtype])
    if dtypes.is_quantized(spec.dtype) and spec.dtype not in dtypes.DRAWN_QUANT_TYPES:
        return weight_format_input(rng, spec, case.distribution)
    if dtypes.is_quantized(spec.dtype):
        from golden import quant

        values = rng.uniform(*DISTRIBUTIONS[case.distribution if case.distribution != "special" else "dense"],
                             size=spec.np_shape).astype(np.float32)
        raw = quant.quantize(values.reshape(-1, spec.ne[0]), spec.dtype)
        return raw.reshape(tuple(reversed(spec.ne[1:])) + (-1,))
    return floats(rng, spec, case.distribution, op.specials, op.max_abs_input)


def as_stored(values: np.ndarray, dtype: str) -> np.ndarray:
    """Logical values in the array type a device receives (float32/float16/int32/int64/uint8)."""
    if dtype in ("f32", "bf16"):
        return np.asarray(values, dtype=np.float32)
    if dtype == "f16":
        return np.asarray(values, dtype=np.float16)
    if dtype in dtypes.INDEX_TYPES:
        return np.asarray(values, dtype=dtypes.STORAGE_DTYPE[dtype])
    return np.asarray(values, dtype=np.uint8)

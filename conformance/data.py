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


def plain_input(rng: np.random.Generator, spec: TensorSpec, case: OpCase) -> np.ndarray:
    op = catalogue.get(case.op)
    if spec.dtype == "i32":
        if case.distribution in FULL_RANGE_INTEGERS:  # golden.spec.FULL_INTEGERS: beyond f32's 2^24
            return full_range_i32(rng, spec.np_shape)
        return rng.integers(-1000, 1000, size=spec.np_shape, dtype=np.int32)
    if spec.dtype in dtypes.INDEX_TYPES:  # I8/I16 over their whole range; I64 with its high bytes used
        lo, hi = INT_RANGES[spec.dtype]
        return rng.integers(lo, hi, size=spec.np_shape, dtype=dtypes.STORAGE_DTYPE[spec.dtype])
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

"""Unary activations and the simple one-input ops: GELU, GELU_QUICK, SILU, TANH, RELU,
HARDSIGMOID, HARDSWISH, SQR, SCALE (and scale+bias), CLAMP, LEAKY_RELU, ABS. Each golden function
is followed by its catalogue entry.

Exact float64 maths of ggml's definitions. Where ggml's CPU backend deviates on purpose (GELU and
GELU_QUICK go through an F16 lookup table) the golden stays exact; the tolerance table says how
far an implementation may be.
"""

from __future__ import annotations

import numpy as np

from golden.case import OpCase
from golden.spec import ELEMENTWISE_TOL, SAME_FLOAT, SAME_FLOAT_BF16, InputLayouts, OpList, OpSpec, P, libm, one, sig
from golden.tolerance import EXACT, F16_EPS, F32_EPS, ErrorModel, Tolerance, rounded_via_f32

SPECS = OpList()
SQRT_2_OVER_PI = 0.79788456080286535587989211986876
GELU_COEF_A = 0.044715
GELU_QUICK_COEF = 1.702


def _f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def f16_table_model(max_slope: float) -> ErrorModel:
    """ggml's CPU computes GELU/GELU_QUICK of F32 input as ``T[f16(x)]``: the input is rounded
    to F16 (|Δx| ≤ 2^-11·|x|, or 2^-25 in F16's subnormal range), the function moves that by at
    most ``max_slope``·|Δx|, and the table entry is an F16 rounding of an f32 evaluation whose
    ``1 + tanh`` cancels for negative x (≤ 2^-24·|x| absolute)."""

    def model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
        x = np.abs(np.where(np.isfinite(inputs[0]), inputs[0], 0.0)).astype(np.float64)
        g = np.abs(np.where(np.isfinite(golden), golden, 0.0))
        input_rounding = 0.0 if case.inputs[0].dtype == "f16" else max_slope * (F16_EPS * x + 2.0**-25)
        table_rounding = F16_EPS * g + 2.0**-25
        f32_eval = F32_EPS * x + 4 * F32_EPS * g
        return input_rounding + table_rounding + f32_eval

    model.__name__ = f"f16_table(max_slope={max_slope})"
    return model


_GELU_TABLE = "ggml's CPU evaluates it through an F16 lookup table (input and output rounded to F16)"


def gelu(x: np.ndarray) -> np.ndarray:
    """ggml's GELU is the tanh approximation: 0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²)))."""
    x = _f64(x)
    with np.errstate(over="ignore", invalid="ignore"):
        y = 0.5 * x * (1.0 + np.tanh(SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x)))
    return np.where(x == -np.inf, 0.0, y)  # the limit; ggml's F32 path returns 0 for x <= -10


SPECS.add(OpSpec(
    name="GELU", family="unary", golden=one(gelu), signatures=SAME_FLOAT,
    tolerance={"f32": Tolerance(_GELU_TABLE, ulp=0.5, model=f16_table_model(1.13)),
               "f16": Tolerance(_GELU_TABLE, ulp=0.5, model=f16_table_model(1.13))},
    input_layouts=InputLayouts.ROWS, specials=(np.nan, np.inf, 0.0, -0.0), max_abs_input=65504.0,
    notes="ggml GELU is the tanh approximation; the CPU table maps x ≤ −10 to 0 and x ≥ 10 to x; "
          "−inf has no agreed value (F32 path 0, F16 table NaN)"))


def gelu_quick(x: np.ndarray) -> np.ndarray:
    """x·σ(1.702·x); written with exp of a non-positive argument so it never overflows."""
    x = _f64(x)
    with np.errstate(over="ignore", invalid="ignore"):
        return x * _sigmoid(GELU_QUICK_COEF * x)


SPECS.add(OpSpec(
    name="GELU_QUICK", family="unary", golden=one(gelu_quick), signatures=SAME_FLOAT,
    tolerance={"f32": Tolerance(_GELU_TABLE, ulp=0.5, model=f16_table_model(1.1)),
               "f16": Tolerance(_GELU_TABLE, ulp=0.5, model=f16_table_model(1.1))},
    input_layouts=InputLayouts.ROWS, specials=(np.nan, np.inf, 0.0, -0.0), max_abs_input=65504.0,
    notes="x·σ(1.702x). The CPU's F32 path always goes through the F16 table, so |x| > 65504 "
          "becomes ±inf/NaN there: inputs are drawn within the F16 range"))


def _sigmoid(z: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def silu(x: np.ndarray) -> np.ndarray:
    x = _f64(x)
    with np.errstate(over="ignore", invalid="ignore"):
        return x * _sigmoid(x)


SPECS.add(OpSpec(
    name="SILU", family="unary", golden=one(silu), signatures=SAME_FLOAT,
    tolerance={"f32": Tolerance("SIMD exp (≤1.95 ulp) then 1+e and x/(1+e) roundings; exp(−x) overflows f32 "
                                "for x < −88.7 giving −0 where the exact value is below 4e-37",
                                ulp=4.0, atol=4e-37),
               "f16": Tolerance("f32 evaluation (≤4 ulp_f32), then F16", ulp=0.5, rtol=8 * 2.0**-24,
                                atol=2.0**-25)},
    input_layouts=InputLayouts.ROWS, specials=(np.nan, np.inf, 0.0, -0.0),
    notes="−inf excluded from special values: x/(1+exp(−x)) is NaN there and the limit is 0"))


def tanh(x: np.ndarray) -> np.ndarray:
    return np.tanh(_f64(x))


SPECS.add(OpSpec(
    name="TANH", family="unary", golden=one(tanh), signatures=SAME_FLOAT_BF16,
    tolerance=libm(2.5, "glibc documents tanhf within 2 ulp on x86-64 (measured 2.0 ulp here)"),
    input_layouts=InputLayouts.ROWS))


def relu(x: np.ndarray) -> np.ndarray:
    """``x > 0 ? x : 0``: relu(-0) = +0 and relu(NaN) = 0, as ggml writes it."""
    x = _f64(x)
    return np.where(x > 0, x, 0.0)


SPECS.add(OpSpec(name="RELU", family="unary", golden=one(relu), signatures=SAME_FLOAT_BF16,
                  tolerance={"*": EXACT}, input_layouts=InputLayouts.ROWS))


def hardsigmoid(x: np.ndarray) -> np.ndarray:
    x = _f64(x)
    with np.errstate(invalid="ignore"):
        return np.fmin(1.0, np.fmax(0.0, (x + 3.0) / 6.0))  # fminf/fmaxf: NaN -> 0, as ggml


SPECS.add(OpSpec(
    name="HARDSIGMOID", family="unary", golden=one(hardsigmoid), signatures=SAME_FLOAT_BF16,
    tolerance={"f32": Tolerance("(x+3) and /6 are two f32 roundings (2·2^-24 relative)", rtol=2 * 2.0**-24),
               "f16": rounded_via_f32("two f32 roundings, then F16"),
               "bf16": rounded_via_f32("two f32 roundings, then BF16")},
    input_layouts=InputLayouts.ROWS))


def hardswish(x: np.ndarray) -> np.ndarray:
    x = _f64(x)
    with np.errstate(invalid="ignore"):
        return x * hardsigmoid(x)


SPECS.add(OpSpec(
    name="HARDSWISH", family="unary", golden=one(hardswish), signatures=SAME_FLOAT_BF16,
    tolerance={"f32": Tolerance("(x+3), /6 and ·x are three f32 roundings (3·2^-24 relative)", rtol=3 * 2.0**-24),
               "f16": Tolerance("three f32 roundings, then F16", ulp=0.5, rtol=3 * 2.0**-24),
               "bf16": Tolerance("three f32 roundings, then BF16", ulp=0.5, rtol=3 * 2.0**-24)},
    input_layouts=InputLayouts.ROWS))


def sqr(x: np.ndarray) -> np.ndarray:
    x = _f64(x)
    with np.errstate(over="ignore"):
        return x * x


SPECS.add(OpSpec(name="SQR", family="unary", golden=one(sqr), signatures=SAME_FLOAT_BF16,
                  tolerance=ELEMENTWISE_TOL))


def scale(x: np.ndarray, s: float, b: float = 0.0) -> np.ndarray:
    """``x·s + b`` (ggml_scale_bias; plain ggml_scale has b = 0). s and b are F32 op params."""
    with np.errstate(over="ignore", invalid="ignore"):
        return _f64(x) * float(np.float32(s)) + float(np.float32(b))


SPECS.add(OpSpec(
    name="SCALE", family="unary", golden=lambda xs, c: scale(xs[0], c.param("s"), c.param("bias", 0.0)),
    signatures=(sig("f32"),),
    tolerance={"f32": Tolerance("x·s is one f32 rounding; x·s+b is one fused multiply-add rounding", ulp=0.5)},
    params={"s": P("scale factor (f32)"), "bias": P("added after scaling (ggml_scale_bias), 0 = plain", optional=True)},
    input_layouts=InputLayouts.PADDED_ROWS,
    notes="ggml_scale asserts ggml_is_padded_1d(a): rows may be padded, planes packed, no permute"))


def clamp(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``MAX(MIN(x, hi), lo)`` with C comparisons: NaN -> hi (MIN(NaN, hi) picks hi); lo > hi -> lo."""
    x = _f64(x)
    lo, hi = float(np.float32(lo)), float(np.float32(hi))
    upper = np.where(x < hi, x, hi)  # MIN(a,b) = a < b ? a : b, so NaN < hi is false -> hi
    return np.where(upper > lo, upper, lo)


SPECS.add(OpSpec(
    name="CLAMP", family="unary", golden=lambda xs, c: clamp(xs[0], c.param("min"), c.param("max")),
    signatures=SAME_FLOAT,
    tolerance={"*": Tolerance("the result is x or a bound; an f32 bound is rounded once to an F16 destination",
                              ulp=0.5)},
    params={"min": P("lower bound (f32)"), "max": P("upper bound (f32)")}, inplace_inputs=(0,),
    notes="ggml_clamp is in place: it returns a view of its input"))


def leaky_relu(x: np.ndarray, slope: float) -> np.ndarray:
    """``max(x,0) + slope·min(x,0)``, with NaN -> 0 as ggml's comparisons give."""
    x = _f64(x)
    s = float(np.float32(slope))
    with np.errstate(invalid="ignore"):  # 0·(−inf) is NaN, as in ggml's f32 arithmetic
        return np.where(x > 0, x, 0.0) + s * np.where(x < 0, x, 0.0)


SPECS.add(OpSpec(
    name="LEAKY_RELU", family="unary", golden=lambda xs, c: leaky_relu(xs[0], c.param("slope")),
    signatures=SAME_FLOAT,
    tolerance={"f32": Tolerance("slope·x is one rounding; max(x,0) adds an exact zero", ulp=0.5),
               "f16": rounded_via_f32()},
    params={"slope": P("negative slope (f32)")}))


def abs_(x: np.ndarray) -> np.ndarray:
    """|x|: exact in every dtype (|−0| = +0, |NaN| is NaN)."""
    return np.abs(_f64(x))


SPECS.add(OpSpec(name="ABS", family="unary", golden=one(abs_), signatures=SAME_FLOAT_BF16,
                 tolerance={"*": EXACT}, input_layouts=InputLayouts.ROWS))

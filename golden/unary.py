"""Unary activations and the simple one-input ops: GELU, GELU_QUICK, SILU, TANH, RELU,
HARDSIGMOID, HARDSWISH, SQR, SCALE (and scale+bias), CLAMP, LEAKY_RELU, ABS. Each golden function
is followed by its catalogue entry.

Exact float64 maths of ggml's definitions. Where ggml's CPU backend deviates on purpose (GELU and
GELU_QUICK go through an F16 lookup table) the golden stays exact; the tolerance table says how
far an implementation may be.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from golden import dtypes
from golden.case import OpCase
from golden.spec import (
    ELEMENTWISE_TOL,
    SAME_FLOAT,
    SAME_FLOAT_BF16,
    InputLayouts,
    OpList,
    OpSpec,
    P,
    element_regimes,
    libm,
    one,
    sig,
)
from golden.tolerance import EXACT, F16_EPS, F32_EPS, Calibration, ErrorModel, Tolerance, finite_abs, rounded_via_f32

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


def gelu_f32_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """GELU evaluated in f32 from its formula: ``z = c·x·(1 + a·x²)`` takes ≤ 5 roundings (5u·|z|),
    tanhf is within 2 ulp (4u·|t|) and moves by sech²(z)·|Δz|; ``1 + t`` and ``0.5·x·(…)`` add 3u·|y|.
    So ``|Δy| ≤ 0.5|x|·(4u|t| + 5u|z|·sech²z) + 3u|y|``."""
    x = finite_abs(inputs[0])
    z = SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x)
    with np.errstate(over="ignore"):
        sech2 = 1.0 / np.cosh(np.minimum(z, 350.0)) ** 2
    return 0.5 * x * (4 * F32_EPS * np.tanh(z) + 5 * F32_EPS * z * sech2) + 3 * F32_EPS * finite_abs(golden)


_GELU_F32 = ("tanh-GELU evaluated in f32 (tanhf within 2 ulp, 5 roundings in its argument, 3 after); ggml's CPU "
             "uses an F16 table instead: a known deviation of ggml:CPU (device/ggml/known_bugs_cpu.py)")
GELU_CPU_TABLE = Tolerance(_GELU_TABLE, ulp=0.5, model=f16_table_model(1.13))
SPECS.add(OpSpec(
    name="GELU", family="unary", inplace_form=True, golden=one(gelu), signatures=SAME_FLOAT,
    tolerance={"f32": Tolerance(_GELU_F32, ulp=0.5, model=gelu_f32_model, model_name="gelu_f32",
                                calibration=Calibration.GGML_CPU),
               "f16": Tolerance("f32 evaluation of F16 inputs, then one F16 rounding (ggml's CPU: its F16 table, "
                                "which is exactly that)", ulp=0.5, model=f16_table_model(1.13),
                                calibration=Calibration.GGML_CPU)},
    input_layouts=InputLayouts.ROWS, specials=(np.nan, np.inf, 0.0, -0.0), max_abs_input=65504.0,
    notes="ggml GELU is the tanh approximation; the CPU table maps x ≤ −10 to 0 and x ≥ 10 to x; "
          "−inf has no agreed value (F32 path 0, F16 table NaN); inputs stay within F16's range (the CPU's "
          "F32 path turns |x| > 65504 into ±inf through its table)"))


def gelu_quick(x: np.ndarray) -> np.ndarray:
    """x·σ(1.702·x); written with exp of a non-positive argument so it never overflows."""
    x = _f64(x)
    with np.errstate(over="ignore", invalid="ignore"):
        return x * _sigmoid(GELU_QUICK_COEF * x)


def gelu_quick_f32_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """``x·σ(1.702x)`` in f32: ``z = 1.702·x`` is one rounding (u·|z|), which moves the result by
    ``|x|·σ(1−σ)·u|z|``; expf (≤ 2 ulp), ``1 + e``, the division and the product stay within 4 ulp of y,
    and expf underflowing for z < −87 gives 0 where |y| < 4e-37."""
    x = finite_abs(inputs[0])
    z = GELU_QUICK_COEF * x
    s = _sigmoid(-z)  # σ(z)(1−σ(z)) is symmetric in z
    return x * s * (1.0 - s) * F32_EPS * z + 4e-37


GELU_QUICK_CPU_TABLE = Tolerance(_GELU_TABLE, ulp=0.5, model=f16_table_model(1.1))
SPECS.add(OpSpec(
    name="GELU_QUICK", family="unary", inplace_form=True, golden=one(gelu_quick), signatures=SAME_FLOAT,
    tolerance={"f32": Tolerance("x·σ(1.702x) in f32 (expf within 2 ulp; 4 ulp in all, plus the rounding of 1.702x); "
                                "ggml's CPU uses an F16 table instead: a known deviation of ggml:CPU",
                                ulp=4.0, model=gelu_quick_f32_model, model_name="gelu_quick_f32",
                                calibration=Calibration.GGML_CPU),
               "f16": Tolerance("f32 evaluation of F16 inputs, then one F16 rounding (ggml's CPU: its F16 table, "
                                "which is exactly that)", ulp=0.5, model=f16_table_model(1.1),
                                calibration=Calibration.GGML_CPU)},
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
    name="SILU", family="unary", inplace_form=True, golden=one(silu), signatures=SAME_FLOAT,
    tolerance={"f32": Tolerance("expf(−x) within 2.5 ulp (5u relative, scaled by e/(1+e) ≤ 1), then 1+e and "
                                "x/(1+e) (or x·(1/(1+e))) roundings: 7u ≤ 8u relative; exp(−x) overflows f32 for "
                                "x < −88.7 giving −0 where the exact value is below 4e-37; ggml CPU ci: ≤ 0.65 of it",
                                rtol=8 * 2.0**-24, atol=4e-37, calibration=Calibration.GGML_CPU),
               "f16": Tolerance("f32 evaluation (≤4 ulp_f32), then F16", ulp=0.5, rtol=8 * 2.0**-24,
                                atol=2.0**-25)},
    input_layouts=InputLayouts.ROWS, specials=(np.nan, np.inf, 0.0, -0.0),
    notes="−inf excluded from special values: x/(1+exp(−x)) is NaN there and the limit is 0"))


def tanh(x: np.ndarray) -> np.ndarray:
    return np.tanh(_f64(x))


SPECS.add(OpSpec(
    name="TANH", family="unary", inplace_form=True, golden=one(tanh), signatures=SAME_FLOAT_BF16,
    tolerance=libm(2.5, "glibc documents tanhf within 2 ulp on x86-64 (measured 2.0 ulp here)",
                   calibration=Calibration.GGML_CPU),
    input_layouts=InputLayouts.ROWS))


def relu(x: np.ndarray) -> np.ndarray:
    """``x > 0 ? x : 0``: relu(-0) = +0 and relu(NaN) = 0, as ggml writes it."""
    x = _f64(x)
    return np.where(x > 0, x, 0.0)


SPECS.add(OpSpec(name="RELU", family="unary", inplace_form=True, golden=one(relu), signatures=SAME_FLOAT_BF16,
                  tolerance={"*": EXACT}, input_layouts=InputLayouts.ROWS))


def hardsigmoid(x: np.ndarray) -> np.ndarray:
    x = _f64(x)
    with np.errstate(invalid="ignore"):
        return np.fmin(1.0, np.fmax(0.0, (x + 3.0) / 6.0))  # fminf/fmaxf: NaN -> 0, as ggml


SPECS.add(OpSpec(
    name="HARDSIGMOID", family="unary", inplace_form=True, golden=one(hardsigmoid), signatures=SAME_FLOAT_BF16,
    tolerance={"f32": Tolerance("(x+3) and /6 are two f32 roundings (2·2^-24 relative)", rtol=2 * 2.0**-24),
               "f16": rounded_via_f32("two f32 roundings, then F16"),
               "bf16": rounded_via_f32("two f32 roundings, then BF16")},
    input_layouts=InputLayouts.ROWS))


def hardswish(x: np.ndarray) -> np.ndarray:
    x = _f64(x)
    with np.errstate(invalid="ignore"):
        return x * hardsigmoid(x)


SPECS.add(OpSpec(
    name="HARDSWISH", family="unary", inplace_form=True, golden=one(hardswish), signatures=SAME_FLOAT_BF16,
    tolerance={"f32": Tolerance("(x+3), /6 and ·x are three f32 roundings (3·2^-24 relative)", rtol=3 * 2.0**-24),
               "f16": Tolerance("three f32 roundings, then F16", ulp=0.5, rtol=3 * 2.0**-24),
               "bf16": Tolerance("three f32 roundings, then BF16", ulp=0.5, rtol=3 * 2.0**-24)},
    input_layouts=InputLayouts.ROWS))


def sqr(x: np.ndarray) -> np.ndarray:
    x = _f64(x)
    with np.errstate(over="ignore"):
        return x * x


SPECS.add(OpSpec(name="SQR", family="unary", inplace_form=True, golden=one(sqr), signatures=SAME_FLOAT_BF16,
                  tolerance=ELEMENTWISE_TOL))


def scale(x: np.ndarray, s: float, b: float = 0.0) -> np.ndarray:
    """``x·s + b`` (ggml_scale_bias; plain ggml_scale has b = 0). s and b are F32 op params."""
    with np.errstate(over="ignore", invalid="ignore"):
        return _f64(x) * float(np.float32(s)) + float(np.float32(b))


def scale_unfused_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """With a bias, an implementation without FMA rounds x·s before adding b: ½ulp_f32(x·s) more."""
    if float(np.float32(case.param("bias", 0.0))) == 0.0:
        return np.zeros_like(golden)
    with np.errstate(over="ignore", invalid="ignore"):
        xs = _f64(inputs[0]) * float(np.float32(case.param("s")))
    return 0.5 * dtypes.ulp(xs, "f32")


SPECS.add(OpSpec(
    name="SCALE", family="unary", inplace_form=True,
    golden=lambda xs, c: scale(xs[0], c.param("s"), c.param("bias", 0.0)),
    signatures=(sig("f32"),),
    tolerance={"f32": Tolerance("x·s is one f32 rounding; x·s+b one rounding if fused, or two (x·s rounded "
                                "first: + ½ulp(x·s)) if not; ggml CPU ci: ≤ 0.998 (at rounding ties)", ulp=0.5,
                                model=scale_unfused_model, model_name="half_ulp_of_x_times_s_when_biased",
                                calibration=Calibration.GGML_CPU)},
    params={"s": P("scale factor (f32)"), "bias": P("added after scaling (ggml_scale_bias), 0 = plain", optional=True)},
    input_layouts=InputLayouts.PADDED_ROWS,
    notes="ggml_scale asserts ggml_is_padded_1d(a): rows may be padded, planes packed, no permute"))


def _f32_bound(bound: float) -> float:
    """A bound as ggml holds it: an f32 op param, so one beyond f32's range is that infinity."""
    with np.errstate(over="ignore"):  # the overflow to ±inf is the rounding ggml's float does
        return float(np.float32(bound))


def _distance(values: np.ndarray, bound: float) -> np.ndarray:
    """``|values - bound|``, with an infinity at distance 0 from itself (``inf - inf`` is NaN)."""
    with np.errstate(invalid="ignore"):
        gap = np.abs(values - bound)
    return np.where(values == bound, 0.0, gap)


def clamp(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``MAX(MIN(x, hi), lo)`` with C comparisons: NaN -> hi (MIN(NaN, hi) picks hi); lo > hi -> lo."""
    x = _f64(x)
    lo, hi = _f32_bound(lo), _f32_bound(hi)
    upper = np.where(x < hi, x, hi)  # MIN(a,b) = a < b ? a : b, so NaN < hi is false -> hi
    return np.where(upper > lo, upper, lo)


def clamp_undefined_choices(x: np.ndarray, lo: float, hi: float, device: np.ndarray) -> np.ndarray:
    """The golden with the elements ggml leaves undefined set to the allowed value nearest the device's.

    ggml defines CLAMP neither for a NaN input nor for min > max: its CPU computes ``MAX(MIN(x, max),
    min)`` (NaN → max; min > max → min), GLSL's ``clamp`` is ``min(max(x, lo), hi)`` with NaN-ignoring
    min/max (NaN → min; min > max is undefined, lavapipe gives max), CUDA's fminf/fmaxf chain the other
    way. So a NaN input may give NaN, min or max, and min > max either bound; every other element is
    :func:`clamp` exactly."""
    x, d = _f64(x), _f64(device).reshape(np.shape(x))
    lo, hi = _f32_bound(lo), _f32_bound(hi)
    golden = clamp(x, lo, hi)
    undefined = np.isnan(x) | (lo > hi)
    nearest_bound = np.where(_distance(d, lo) <= _distance(d, hi), lo, hi)
    choice = np.where(np.isnan(x) & np.isnan(d), np.nan, nearest_bound)
    return np.where(undefined, choice, golden)


SPECS.add(OpSpec(
    name="CLAMP", family="unary", golden=lambda xs, c: clamp(xs[0], c.param("min"), c.param("max")),
    signatures=SAME_FLOAT,
    tolerance={"*": Tolerance("the result is x or a bound; an f32 bound is rounded once to an F16 destination. "
                              "Where ggml leaves it undefined (NaN input: NaN, min or max; min > max: either "
                              "bound) the bound the device chose is the golden (clamp_undefined_choices)",
                              ulp=0.5)},
    params={"min": P("lower bound (f32)"), "max": P("upper bound (f32)")}, inplace_inputs=(0,),
    notes="ggml_clamp is in place: it returns a view of its input. The golden is ggml CPU's macro order "
          "MAX(MIN(x, max), min); the suite's comparator accepts the other legitimate orders where ggml "
          "leaves the value undefined (NaN input, min > max)"))


def leaky_relu(x: np.ndarray, slope: float) -> np.ndarray:
    """``max(x,0) + slope·min(x,0)``, with NaN -> 0 as ggml's comparisons give."""
    x = _f64(x)
    s = float(np.float32(slope))
    with np.errstate(invalid="ignore"):  # 0·(−inf) is NaN, as in ggml's f32 arithmetic
        return np.where(x > 0, x, 0.0) + s * np.where(x < 0, x, 0.0)


SPECS.add(OpSpec(
    name="LEAKY_RELU", family="unary", inplace_form=True, golden=lambda xs, c: leaky_relu(xs[0], c.param("slope")),
    signatures=SAME_FLOAT,
    tolerance={"f32": Tolerance("slope·x is one rounding; max(x,0) adds an exact zero", ulp=0.5),
               "f16": rounded_via_f32()},
    params={"slope": P("negative slope (f32)")}))


def abs_(x: np.ndarray) -> np.ndarray:
    """|x|: exact in every dtype (|−0| = +0, |NaN| is NaN)."""
    return np.abs(_f64(x))


SPECS.add(OpSpec(name="ABS", family="unary", inplace_form=True, golden=one(abs_), signatures=SAME_FLOAT_BF16,
                 tolerance={"*": EXACT}, input_layouts=InputLayouts.ROWS))


# ---- NEG SIGMOID EXP ELU SGN STEP GELU_ERF SOFTPLUS, and SQRT SIN COS LOG ----------------------------
# ggml's CPU evaluates each of these in f32 with the C library (unary-ops.cpp: expf, expm1f, logf,
# sinf, cosf, sqrtf; ops.cpp: erff), converting F16/BF16 inputs to f32 first and the result back.
# Error bounds for a libm function: the larger of what glibc (x86-64 libm-test-ulps) and CUDA's math
# library document, both counted from the correctly rounded result, plus the 0.5 ulp from that to the
# exact value. Subnormal results keep gradual underflow (both libraries do): a backend that flushes
# them to zero is outside these bounds.
F32_MAX = float(np.finfo(np.float32).max)
F32_MIN_NORMAL = 2.0**-126
F32_MIN_SUBNORMAL = 2.0**-149
_SPECIALS = (np.nan, np.inf, -np.inf, 0.0, -0.0)
_MEASURED = "ggml CPU 0.20.2 (glibc 2.36), ci + nightly: "  # where the margins in the notes come from
_F32_SUBNORMALS = (F32_MIN_SUBNORMAL, -F32_MIN_SUBNORMAL, F32_MIN_NORMAL * (1 - 2.0**-23))


def f32_libm(ulps: float, what: str, *, atol_f32: float = 0.0, model: ErrorModel | None = None,
             rtol: float = 0.0, calibration: Calibration = Calibration.DEFINITION) -> dict[str, Tolerance]:
    """Rows for an f32 evaluation within ``ulps`` ulp (+ ``rtol``·|g| + ``atol_f32`` + ``model``),
    then one rounding to an F16/BF16 destination. In relative terms k ulp_f32 ≤ 2k·2^-24·|g|; the
    narrower row also keeps k·2^-149 absolute, the f32 error where its result is subnormal (which can
    move a BF16 subnormal across a tie)."""
    inside = 2 * ulps * F32_EPS + rtol
    return {
        "f32": Tolerance(what, ulp=ulps, rtol=rtol, atol=atol_f32, model=model, calibration=calibration),
        "f16": Tolerance(what + "; then the F16 rounding", ulp=0.5, rtol=inside,
                         atol=atol_f32 + ulps * F32_MIN_SUBNORMAL, model=model, calibration=calibration),
        "bf16": Tolerance(what + "; then the BF16 rounding", ulp=0.5, rtol=inside,
                          atol=atol_f32 + ulps * F32_MIN_SUBNORMAL, model=model, calibration=calibration),
    }


def neg(x: np.ndarray) -> np.ndarray:
    return -_f64(x)


SPECS.add(OpSpec(name="NEG", family="unary", inplace_form=True, golden=one(neg), signatures=SAME_FLOAT_BF16,
                 tolerance={"*": Tolerance("bit-exact: negation flips the sign bit (NaN stays NaN)")},
                 input_layouts=InputLayouts.ROWS, specials=_SPECIALS + _F32_SUBNORMALS + (F32_MAX,)))


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1/(1 + e^−x), written with e^−|x| so that float64 never overflows."""
    x = _f64(x)
    with np.errstate(over="ignore", invalid="ignore"):
        return _sigmoid(x)


SPECS.add(OpSpec(
    name="SIGMOID", family="unary", inplace_form=True, golden=one(sigmoid), signatures=SAME_FLOAT_BF16,
    tolerance=f32_libm(0.5, "expf(−x) (≤2.5 ulp: glibc 1, CUDA 2) scaled by e/(1+e) ≤ 1, then the 1+e and "
                            "1/(1+e) roundings: ≤ 7·2^-24 relative; for x < −88.72 expf(−x) overflows and "
                            "1/inf = 0 where the exact value is below 2^-128 (2^-127 allowed: expf's error "
                            "moves where it overflows)",
                       rtol=6 * F32_EPS, atol_f32=2.0**-127, calibration=Calibration.GGML_CPU),
    input_layouts=InputLayouts.ROWS,
    specials=_SPECIALS + (-88.72283172607422, -88.72283935546875, -87.3365478515625, -103.97207641601562,
                          16.635532379150391, 17.328680038452148),
    notes="1/(1+expf(−x)) as ggml writes it: −inf gives 0, +inf gives 1; results are subnormal for "
          "−103.97 < x < −87.34. " + _MEASURED + "f32 worst 0.50 of the allowance (x < −88.72, "
          "exact ≤ 2^-128 against 2^-127)"))


def exp(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.exp(_f64(x))


SPECS.add(OpSpec(
    name="EXP", family="unary", inplace_form=True, golden=one(exp), signatures=SAME_FLOAT_BF16,
    tolerance=f32_libm(2.5, "expf within 2.5 ulp (glibc documents 1 ulp, CUDA 2 ulp), gradual underflow below "
                            "−87.34, +inf above ln(FLT_MAX) = 88.7228", calibration=Calibration.GGML_CPU),
    input_layouts=InputLayouts.ROWS,
    # the f32 neighbours of ln(FLT_MAX), ln(2^-126) (subnormal results begin), ln(2^-150) (results
    # round to 0), and of ln(65504) (the F16 overflow) and ln(2^-25) (F16 results round to 0)
    specials=_SPECIALS + (88.72283172607422, 88.72283935546875, 88.72284698486328, -87.3365478515625,
                          -87.33654022216797, -103.97207641601562, -103.97208404541016, -100.0,
                          11.089865684509277, 11.08986759185791, -17.32868003845215),
    notes="overflow to +inf and the subnormal range are drawn through the special values. "
          + _MEASURED + "f32 worst 0.20 of the allowance (0.50 ulp)"))


def elu(x: np.ndarray) -> np.ndarray:
    """ggml's ELU has α = 1: x for x > 0, else e^x − 1 (ELU(−0) = −0, ELU(−inf) = −1)."""
    x = _f64(x)
    with np.errstate(invalid="ignore"):
        return np.where(x > 0, x, np.expm1(x))


def _exp_minus_one_cancellation(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """expf(x) − 1 instead of expm1f(x): expf's 2.5 ulp of a value in (0, 1] is ≤ 2.5·2^-24 absolute, and
    the subtraction keeps it (exact by Sterbenz near 0). Only where x ≤ 0; x > 0 returns x itself."""
    x = np.asarray(inputs[0], dtype=np.float64)
    return np.where(x > 0, 0.0, 2.5 * F32_EPS)


_exp_minus_one_cancellation.__name__ = "exp_minus_one_cancellation(2.5·2^-24 for x ≤ 0)"

SPECS.add(OpSpec(
    name="ELU", family="unary", inplace_form=True, golden=one(elu), signatures=SAME_FLOAT_BF16,
    tolerance=f32_libm(1.5, "x > 0: x exactly; x ≤ 0: expm1f within 1.5 ulp (glibc and CUDA document 1 ulp), "
                            "or expf(x) − 1 within 2.5·2^-24 absolute",
                       model=_exp_minus_one_cancellation, calibration=Calibration.GGML_CPU),
    input_layouts=InputLayouts.ROWS, specials=_SPECIALS + _F32_SUBNORMALS + (-1e-7, -88.8, -104.0, 1e-7),
    notes="α = 1 (ggml_elu has no parameter); the result is x for x > 0, whatever the negative branch. "
          + _MEASURED + "f32 worst 0.19 of the allowance (0.75 ulp)"))


def sgn(x: np.ndarray) -> np.ndarray:
    """``x > 0 ? 1 : (x < 0 ? −1 : 0)`` as ggml writes it: SGN(±0) = 0 and SGN(NaN) = 0."""
    x = _f64(x)
    return np.where(x > 0, 1.0, np.where(x < 0, -1.0, 0.0))


SPECS.add(OpSpec(name="SGN", family="unary", inplace_form=True, golden=one(sgn), signatures=SAME_FLOAT_BF16,
                 tolerance={"*": Tolerance("bit-exact: the result is −1, 0 or 1 by comparisons")},
                 input_layouts=InputLayouts.ROWS, specials=_SPECIALS + _F32_SUBNORMALS,
                 notes="ggml defines SGN(NaN) = 0 and SGN(±0) = 0; subnormal inputs keep their sign"))


def step(x: np.ndarray) -> np.ndarray:
    """``x > 0 ? 1 : 0``: STEP(0) = 0 and STEP(NaN) = 0."""
    x = _f64(x)
    return np.where(x > 0, 1.0, 0.0)


SPECS.add(OpSpec(name="STEP", family="unary", inplace_form=True, golden=one(step), signatures=SAME_FLOAT_BF16,
                 tolerance={"*": Tolerance("bit-exact: the result is 0 or 1 by one comparison")},
                 input_layouts=InputLayouts.ROWS, specials=_SPECIALS + _F32_SUBNORMALS,
                 notes="STEP(NaN) = 0 and STEP(±0) = 0 as ggml writes it"))


_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def gelu_erf(x: np.ndarray) -> np.ndarray:
    """0.5·x·(1 + erf(x/√2)), written 0.5·x·erfc(−x/√2) so float64 keeps the negative tail exact."""
    x = _f64(x)
    with np.errstate(invalid="ignore"):
        return 0.5 * x * _erfc(-x / math.sqrt(2.0))


def _erf_cancellation(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """0.5·x times the absolute error of erff(x·c), c = (1/√2)_f32: erff's 2.5 ulp (≤ 5·2^-24, |erf| ≤ 1)
    plus its argument's relative error (x·c rounded, 2^-24; c itself, 0.29·2^-24), which moves erf by
    ≤ (2/√π)·max z·e^(−z²) = 0.48 times that: < 6·2^-24, so 3·2^-24·|x| absolute. It dominates for
    x ≪ 0, where 1 + erf cancels."""
    x = np.asarray(inputs[0], dtype=np.float64)
    return 3.0 * F32_EPS * np.abs(np.where(np.isfinite(x), x, 0.0))


_erf_cancellation.__name__ = "erf_cancellation(3·2^-24·|x|)"

SPECS.add(OpSpec(
    name="GELU_ERF", family="unary", inplace_form=True, golden=one(gelu_erf), signatures=SAME_FLOAT_BF16,
    tolerance=f32_libm(0.5, "f32 0.5·x·(1 + erff(x/√2)): erff within 2.5 ulp (glibc 1, CUDA 2) and the "
                            "argument's roundings (3·2^-24·|x| absolute, see the model), then 1 + erf rounded "
                            "(2^-24 relative) and the product's rounding",
                       rtol=F32_EPS, model=_erf_cancellation, calibration=Calibration.GGML_CPU),
    input_layouts=InputLayouts.ROWS, specials=(np.nan, np.inf, 0.0, -0.0, -5.0, -9.0, -13.5, 6.0, F32_MAX),
    notes="the exact erf GELU. BF16: ggml-cann claims it, ggml's CPU claims it and aborts (ops.cpp handles F32 "
          "and F16 only: a CPU known bug). −inf is not drawn: the limit is 0 but ggml's formula gives NaN (−inf·0). "
          + _MEASURED + "f32 worst 0.37 of the allowance"))


def softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + e^x), exactly (numpy's logaddexp never overflows)."""
    with np.errstate(invalid="ignore"):  # NaN in, NaN out
        return np.logaddexp(0.0, _f64(x))


SPECS.add(OpSpec(
    name="SOFTPLUS", family="unary", inplace_form=True, golden=one(softplus), signatures=SAME_FLOAT_BF16,
    tolerance=f32_libm(1.5, "logf(1 + expf(x)): logf within 1.5 ulp (glibc and CUDA 1 ulp); expf's 2.5 ulp "
                            "(5·2^-24 relative) moves the log by at most 5·2^-24·softplus; rounding 1 + e is "
                            "2^-24 absolute in the log. ggml returns x for x > 20, off by log1p(e^-20) = 2e-9: "
                            "any threshold ≥ 12 is within these bounds; none overflows to inf",
                       rtol=5 * F32_EPS, atol_f32=F32_EPS, calibration=Calibration.GGML_CPU),
    input_layouts=InputLayouts.ROWS,
    specials=_SPECIALS + (20.0, 20.000001907348633, 19.999998092651367, 20.015625, 19.984375, 88.72283935546875,
                          100.0, 1e4, F32_MAX, -20.0, -88.8, -104.0),
    notes="(x > 20) ? x : logf(1 + expf(x)) in ggml; a form without the threshold overflows to inf for x > 88.72. "
          + _MEASURED + "f32 worst 1.00 of the allowance, where 1 + e rounds to 1 (x < −16.6: the exact "
          "value, just under 2^-24, is lost, as the model says)"))


def sqrt(x: np.ndarray) -> np.ndarray:
    """IEEE square root: sqrt(−0) = −0, negative inputs and −inf give NaN."""
    with np.errstate(invalid="ignore"):
        return np.sqrt(_f64(x))


SPECS.add(OpSpec(
    name="SQRT", family="unary", inplace_form=True, golden=one(sqrt), signatures=SAME_FLOAT_BF16,
    tolerance={"f32": Tolerance("IEEE sqrt is correctly rounded (glibc and CUDA: 0 ulp)", ulp=0.5,
                                calibration=Calibration.GGML_CPU),
               "f16": rounded_via_f32("sqrtf correctly rounded in f32, then the F16 rounding"),
               "bf16": rounded_via_f32("sqrtf correctly rounded in f32, then the BF16 rounding")},
    specials=_SPECIALS + _F32_SUBNORMALS + (-F32_MIN_SUBNORMAL, -1.0, 4.0, 2.0, F32_MAX, F32_MIN_NORMAL),
    notes="GGML_OP_SQRT (ggml_sqrt accepts any layout). " + _MEASURED + "correctly rounded (0.5 ulp)"))


# the f32 values nearest a multiple of π/2 in their binade (exhaustive search of [2^k, 2^(k+1)) with
# float64 sin/cos): an argument reduction with too few bits of π loses every digit of the result there
_SIN_NEAR_ZERO = (355.0, 2023.1856689453125, 1240093312.0, 2.0682583902772807e27)
_COS_NEAR_ZERO = (177.5, 52516.43359375, 1522788990976.0, 1.2614587862244266e38)
_LARGE_ARGUMENTS = (65504.0, 1e6, 16777217.0, 1e10, 1e22, F32_MAX, -1e30)


def sin(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.sin(_f64(x))


def cos(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.cos(_f64(x))


_TRIG = ("within 2.5 ulp (glibc 1, CUDA 2 ulp) over the whole f32 range: both reduce the argument with "
         "enough bits of π (Payne–Hanek) for any f32")
SPECS.add(OpSpec(
    name="SIN", family="unary", inplace_form=True, golden=one(sin), signatures=SAME_FLOAT_BF16,
    tolerance=f32_libm(2.5, "sinf " + _TRIG, calibration=Calibration.GGML_CPU),
    specials=_SPECIALS + _F32_SUBNORMALS + _SIN_NEAR_ZERO + _COS_NEAR_ZERO + _LARGE_ARGUMENTS,
    notes="GGML_OP_SIN; large arguments and those nearest multiples of π/2 come through the special values. "
          + _MEASURED + "f32 worst 0.22 of the allowance (0.56 ulp)"))
SPECS.add(OpSpec(
    name="COS", family="unary", inplace_form=True, golden=one(cos), signatures=SAME_FLOAT_BF16,
    tolerance=f32_libm(2.5, "cosf " + _TRIG, calibration=Calibration.GGML_CPU),
    specials=_SPECIALS + _F32_SUBNORMALS + _SIN_NEAR_ZERO + _COS_NEAR_ZERO + _LARGE_ARGUMENTS,
    notes="GGML_OP_COS; large arguments and those nearest odd multiples of π/2 come through the special values. "
          + _MEASURED + "f32 worst 0.22 of the allowance (0.56 ulp)"))


def log(x: np.ndarray) -> np.ndarray:
    """Natural log: log(±0) = −inf, negative inputs and −inf give NaN."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(_f64(x))


SPECS.add(OpSpec(
    name="LOG", family="unary", inplace_form=True, golden=one(log), signatures=SAME_FLOAT_BF16,
    tolerance=f32_libm(1.5, "logf within 1.5 ulp (glibc and CUDA document 1 ulp), subnormal inputs included",
                       calibration=Calibration.GGML_CPU),
    specials=_SPECIALS + _F32_SUBNORMALS + (-F32_MIN_SUBNORMAL, -1.0, 1.0, 1.0000001192092896,
                                            0.99999994039535522, F32_MIN_NORMAL, F32_MAX),
    notes="GGML_OP_LOG; log(0) = −inf, log(x < 0) = NaN; subnormal inputs must not be flushed to 0. "
          + _MEASURED + "f32 worst 0.53 of the allowance (0.79 ulp)"))


# Every unary op is one elementwise kernel: its grid-limit regime (the strategies' big-tensor branch)
SPECS = OpList.of(replace(spec, regimes=(*spec.regimes, *element_regimes())) for spec in SPECS)

"""Reductions and scans: SUM, MEAN, ARGMAX, COUNT_EQUAL, L2_NORM, CUMSUM.

Exact float64 maths on the stored values (NaN and ±inf propagate as IEEE sums do; those patterns do
not depend on the summation order). The error models bound f32 arithmetic in ANY summation order:
for a sum of k terms computed by any tree of f32 additions (sequential, pairwise, a parallel scan),
``|Ŝ − S| ≤ γ_{k−1}·Σ|x_i|`` with ``γ_m = m·u/(1 − m·u)`` and ``u = 2^-24`` (Higham, Accuracy and
Stability, §4.2), whatever the tree's shape, since no term passes through more than k − 1 roundings.

Shapes (ggml order): SUM [1,1,1,1] of a's type; MEAN [1, ne1, ne2, ne3] F32; ARGMAX [ne1] I32 of a
matrix; COUNT_EQUAL [1] I64; L2_NORM and CUMSUM a's shape.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from golden.case import OpCase
from golden.spec import (
    FULL_INTEGERS,
    SPECIAL_VALUES,
    OpList,
    OpSpec,
    P,
    element_regimes,
    grid_regime,
    many_rows,
    row_regimes,
    sig,
)
from golden.tolerance import F32_EPS, F32_SUBNORMAL_HALF_STEP, Calibration, Tolerance, finite_abs

SPECS = OpList()


def gamma(m: np.ndarray | int) -> np.ndarray:
    """Higham's γ_m = m·u/(1 − m·u) for f32 (m roundings on one path)."""
    mu = np.asarray(m, dtype=np.float64) * F32_EPS
    return mu / (1.0 - mu)


def _f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


# ---- SUM -----------------------------------------------------------------------------------------
def sum_all(x: np.ndarray) -> np.ndarray:
    """SUM: every element of the tensor added up, shape [1,1,1,1]."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.sum(_f64(x)).reshape(1, 1, 1, 1)


def sum_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """γ_{n−1}·Σ|x| over all n elements: f32 summation in any order (then the destination rounding)."""
    x = _f64(inputs[0])
    return gamma(max(x.size - 1, 0)) * np.sum(finite_abs(x)).reshape(1, 1, 1, 1)


def _rss(m: int) -> float:
    """√m·u: m roundings each ≤ u relative to the running sum, root-sum-square (the aggregate criterion)."""
    return float(np.sqrt(max(m, 0))) * F32_EPS


def sum_typical(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """√(n−1)·u·Σ|x|: sum_model's n − 1 roundings as root-sum-square (golden/tolerance.py)."""
    x = _f64(inputs[0])
    return _rss(x.size - 1) * np.sum(finite_abs(x)).reshape(1, 1, 1, 1)


_SUM_TYPICAL: dict[str, Any] = {"typical": sum_typical, "typical_name": "√(n−1)·u·Σ|x|"}
_SUM_REASON = ("all n elements added in f32 in any order (γ_{n−1}·Σ|x|, Higham), then rounded to the "
               "destination; ggml's CPU adds F32 in double and F16/BF16 in f32")
SPECS.add(OpSpec(
    name="SUM", family="reduction", golden=lambda xs, c: sum_all(xs[0]),
    regimes=row_regimes() + (grid_regime(), SPECIAL_VALUES),
    signatures=(sig("f32"), sig("f16"), sig("bf16")),
    tolerance={"f32": Tolerance(_SUM_REASON + " (γ includes the last addition's rounding; a double sum "
                                "rounded once is within u·|S|). ggml CPU nightly: ≤ 0.05 of the allowance (it adds in "
                                "double)",
                                model=sum_model, model_name="γ_{n−1}·Σ|x|", **_SUM_TYPICAL,
                                calibration=Calibration.GGML_CPU),
               "f16": Tolerance(_SUM_REASON + " (an F16 accumulator is not a correct implementation). ggml CPU "
                                "nightly: ≤ 0.997 of the allowance (a sum rounded to an F16 tie)", ulp=0.5,
                                model=sum_model, model_name="γ_{n−1}·Σ|x|", **_SUM_TYPICAL,
                                calibration=Calibration.GGML_CPU),
               "bf16": Tolerance(_SUM_REASON + " (a BF16 accumulator is not a correct implementation). ggml CPU "
                                 "nightly: ≤ 1.0 of the allowance (an exact sum on a BF16 tie)", ulp=0.5,
                                 model=sum_model, model_name="γ_{n−1}·Σ|x|", **_SUM_TYPICAL,
                                 calibration=Calibration.GGML_CPU)},
    notes="ggml_sum accepts any layout; ggml-cann declines rows that are not contiguous "
          "(ggml_is_contiguous_rows). The result is one element of a's type: F16 overflows to ±inf past 65504"))


# ---- MEAN ----------------------------------------------------------------------------------------
def mean_rows(x: np.ndarray) -> np.ndarray:
    """MEAN: each row's (ggml dim 0) sum divided by ne0, shape [1, ne1, ne2, ne3]."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.mean(_f64(x), axis=-1, keepdims=True)


def mean_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """γ_{n+1}·mean|x| per row: the row summed in f32 in any order (γ_{n−1}·Σ|x|) then divided by n,
    or each term divided first, or multiplied by an f32 1/n (two more roundings either way)."""
    x = _f64(inputs[0])
    n = x.shape[-1]
    # the division (or the two products) also errs by up to 2^-150 where its result is subnormal; the sum
    # of subnormals is exact
    return gamma(n + 1) * np.mean(finite_abs(x), axis=-1, keepdims=True) + 2 * F32_SUBNORMAL_HALF_STEP


def mean_typical(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """√(n+1)·u·mean|x|: mean_model's n + 1 roundings as root-sum-square (golden/tolerance.py)."""
    x = _f64(inputs[0])
    return _rss(x.shape[-1] + 1) * np.mean(finite_abs(x), axis=-1, keepdims=True) + 2 * F32_SUBNORMAL_HALF_STEP


SPECS.add(OpSpec(
    name="MEAN", family="reduction", golden=lambda xs, c: mean_rows(xs[0]), signatures=(sig("f32"),),
    regimes=row_regimes() + (many_rows(), SPECIAL_VALUES),
    tolerance={"f32": Tolerance("row sum in f32 in any order (γ_{n−1}·Σ|x|), then /n or ·(1/n) (two "
                                "roundings, each +2^-150 where subnormal): γ_{n+1}·mean|x|, the final rounding "
                                "included. ggml CPU "
                                "nightly: ≤ 0.34 "
                                "of the allowance (it adds in double)",
                                model=mean_model, model_name="γ_{n+1}·mean|x|",
                                typical=mean_typical, typical_name="√(n+1)·u·mean|x|",
                                calibration=Calibration.GGML_CPU)},
    notes="F32 only: ggml_mean accepts any type (and ggml-cann claims every type), but ggml's CPU aborts on "
          "anything but F32, so other types are not drawn. Any layout"))


# ---- ARGMAX --------------------------------------------------------------------------------------
def argmax_rows(x: np.ndarray) -> np.ndarray:
    """ARGMAX of each row of a matrix, shape [ne1]: the first index of the row's maximum.

    ggml leaves ties open: its CPU returns the LAST tied index (``max = MAX(max, x[i]); if (max ==
    x[i]) idx = i``), CUDA whichever thread's candidate survives the warp reduction. The verdict
    accepts any index of a maximal value (conformance/cases/reduction.py ``judge_argmax``). A row with
    NaN has no agreed argmax either (CPU: the maximum after the last NaN; CUDA: NaN skipped; numpy:
    the first NaN); the golden gives numpy's first NaN, and the verdict asks only for an index in range.
    """
    x = _f64(x)
    return np.argmax(x, axis=-1).astype(np.int32).reshape(1, 1, 1, -1)


def check_argmax(case: OpCase, inputs: list[np.ndarray]) -> None:
    ne = case.inputs[0].ne
    if ne[2] != 1 or ne[3] != 1:
        raise ValueError(f"ARGMAX: a must be a matrix (ggml_argmax asserts ggml_is_matrix), got ne={list(ne)}")


SPECS.add(OpSpec(
    name="ARGMAX", family="reduction", golden=lambda xs, c: argmax_rows(xs[0]), signatures=(sig("f32", dst="i32"),),
    regimes=row_regimes() + (many_rows(), SPECIAL_VALUES),
    tolerance={"*": Tolerance("judged as an index: it must select a maximal value of its row (ties may resolve to "
                              "any tied index: ggml's CPU takes the last, CUDA a thread-order one); a row with NaN "
                              "needs only an index in [0, ne0)", calibration=Calibration.GGML_CPU)},
    validate=check_argmax, specials=(np.nan, np.inf, -np.inf, 0.0, -0.0), structured_inputs=True, own_verdict=True,
    notes="F32 only (ggml's CPU aborts on other types). Rows drawn with ties at the maximum, maxima one f32 "
          "ulp apart (an F16 pass would merge them), NaN and rows of −inf (CUDA's kernel, starting from −FLT_MAX "
          "with a strict >, returns −1 there)"))


# ---- COUNT_EQUAL ---------------------------------------------------------------------------------
def count_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """COUNT_EQUAL: how many elements of a equal b's at the same position, as one I64."""
    return np.array(np.count_nonzero(np.asarray(a) == np.asarray(b)), dtype=np.int64).reshape(1, 1, 1, 1)


def check_same_shape(case: OpCase, inputs: list[np.ndarray]) -> None:
    a, b = case.inputs
    if a.ne != b.ne:
        raise ValueError(f"COUNT_EQUAL: a and b must have the same shape (ggml asserts it): "
                         f"{list(a.ne)} vs {list(b.ne)}")


SPECS.add(OpSpec(
    name="COUNT_EQUAL", family="reduction", golden=lambda xs, c: count_equal(xs[0], xs[1]),
    regimes=(FULL_INTEGERS, *element_regimes()),
    signatures=(sig("i32", "i32", dst="i64"),),
    tolerance={"*": Tolerance("exact: an integer count of equal I32 pairs (any order of counting gives it)")},
    validate=check_same_shape,
    structured_inputs=True,
    notes="I32 only (ggml's CPU aborts on other types); the count is an I64 scalar. Inputs drawn from few "
          "values so that about half the positions are equal, and from the full I32 range"))


# ---- L2_NORM -------------------------------------------------------------------------------------
def l2_norm(x: np.ndarray, eps: float) -> np.ndarray:
    """L2_NORM per row: ``x / max(‖x‖₂, eps)`` (ggml: ``scale = 1/fmaxf(sqrtf(Σx²), eps)``, eps
    outside the square root). Written as x·(1/…) so a zero row with eps = 0 is NaN as in ggml."""
    x = _f64(x)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        norm = np.sqrt(np.sum(x * x, axis=-1, keepdims=True))
        return x * (1.0 / np.fmax(norm, float(np.float32(eps))))


def l2_norm_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """Σx² in f32 in any order: the n squares and the sum are γ_n relative (positive terms, n
    roundings on any path), so sqrtf(Σ) is within γ_⌈n/2⌉ then one rounding; max(·, eps) is exact,
    1/· (or x/·) and ·x add two more: γ_{⌈n/2⌉+3}·|y| (Higham's lemma 3.3 composes them)."""
    n = np.asarray(inputs[0]).shape[-1]
    return gamma(-(-n // 2) + 3) * finite_abs(golden)


SPECS.add(OpSpec(
    name="L2_NORM", family="reduction", golden=lambda xs, c: l2_norm(xs[0], c.param("eps")),
    regimes=row_regimes() + (many_rows(), SPECIAL_VALUES),
    signatures=(sig("f32"),),
    tolerance={"f32": Tolerance("Σx² in f32 in any order (γ_n relative), sqrtf, max with eps (exact), 1/ and ·x: "
                                "γ_{⌈n/2⌉+3}·|y|, the final rounding included; x·scale may land in the subnormal "
                                "range (2^-150). ggml CPU nightly: ≤ 0.98 of the allowance (subnormal results, the "
                                "2^-150 step)",
                                atol=F32_SUBNORMAL_HALF_STEP, model=l2_norm_model, model_name="γ_{⌈n/2⌉+3}·|y|",
                                calibration=Calibration.GGML_CPU)},
    params={"eps": P("lower bound on the row norm, outside the sqrt (f32, ≥ 0; > 1e-12 drawn)")},
    notes="F32 only (ggml's CPU aborts on other types). eps is drawn from 1e-12 up to 16, so that rows "
          "shorter than eps are common and 'x / sqrt(Σx² + eps)' or 'x / sqrt(max(Σx², eps))' differs from "
          "ggml. eps = 0 is not drawn: a row whose squares all underflow f32 gives x·(1/0) in every f32 "
          "implementation, where the exact value is ±1"))


# ---- CUMSUM --------------------------------------------------------------------------------------
def cumsum(x: np.ndarray) -> np.ndarray:
    """CUMSUM along each row (ggml dim 0), inclusive: y_k = x_0 + … + x_k."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.cumsum(_f64(x), axis=-1)


def cumsum_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """Prefix k (k+1 terms) in f32 by any tree of additions (sequential, or a parallel scan's
    up/down sweeps): γ_k·Σ_{i≤k}|x_i|."""
    x = finite_abs(inputs[0])
    k = np.arange(x.shape[-1], dtype=np.float64)
    return gamma(k) * np.cumsum(x, axis=-1)


SPECS.add(OpSpec(
    name="CUMSUM", family="reduction", golden=lambda xs, c: cumsum(xs[0]), signatures=(sig("f32"),),
    regimes=row_regimes() + (many_rows(), SPECIAL_VALUES),
    tolerance={"f32": Tolerance("each prefix of k+1 terms added in f32 by any tree (a sequential loop or a "
                                "parallel scan): γ_k·Σ_{i≤k}|x_i|, growing with the position (y_0 = x_0 exactly). ggml "
                                "CPU nightly: ≤ 0.9985 of the allowance (y_1 = x_0 + x_1, one rounding: the bound "
                                "is attained)", model=cumsum_model, model_name="γ_k·Σ_{i≤k}|x_i|",
                                calibration=Calibration.GGML_CPU)},
    notes="Inclusive scan along ne0; ggml_cumsum asserts F32 and accepts any layout"))

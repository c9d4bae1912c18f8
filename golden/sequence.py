"""Sequences and row reductions: ARANGE, ARGSORT, SUM_ROWS."""

from __future__ import annotations

import numpy as np

from golden import dtypes
from golden import movement_checks as checks
from golden.case import OpCase
from golden.spec import SPECIAL_VALUES, OpList, OpSpec, P, Signature, element_regimes, many_rows, one, row_regimes, sig
from golden.tolerance import Calibration, Tolerance

SPECS = OpList()


def arange_length(start: float, stop: float, step: float) -> int:
    """``(int64)ceilf((stop − start) / step)`` with every operation in f32, as ggml sizes it."""
    with np.errstate(all="ignore"):
        span = np.float32(np.float32(stop) - np.float32(start)) / np.float32(step)
    return int(np.ceil(np.float32(span)))


def _arange_outputs(c: OpCase) -> int:
    return arange_length(c.param("start"), c.param("stop"), c.param("step"))


def arange(start: float, stop: float, step: float) -> np.ndarray:
    """ARANGE: ``start + step·i`` for i < :func:`arange_length`, exact (ggml rounds one fused
    multiply-add to f32). The f32 parameters are exact in float64, and so is ``step·i``."""
    s, d = float(np.float32(start)), float(np.float32(step))
    n = arange_length(start, stop, step)
    return s + d * np.arange(n, dtype=np.float64)


def argsort(x: np.ndarray, descending: bool) -> np.ndarray:
    """ARGSORT per row (ggml dim 0): a permutation that sorts ascending, or descending.

    Ties are returned in stable order; ggml's std::sort is unstable, so any order of tied values
    is right (the verdict compares the sorted values, not the indices).
    """
    x = np.asarray(x, dtype=np.float64)
    key = -x if descending else x
    return np.argsort(key, axis=-1, kind="stable").astype(np.int64)


def sum_rows(x: np.ndarray) -> np.ndarray:
    """SUM_ROWS: the sum of each row (ggml dim 0), shape ``[1, ne1, ne2, ne3]``."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.sum(np.asarray(x, dtype=np.float64), axis=-1, keepdims=True)


def arange_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """Half an f32 ulp of step·i: what an unfused multiply adds before the final rounding."""
    return 0.5 * dtypes.ulp(golden - float(np.float32(case.param("start"))), "f32")


def sum_rows_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """γ_{n−1}·Σ|x| per row (Higham): n terms added in f32 in any order, sequential, pairwise or tree, the
    last addition's rounding included; a wider accumulator rounded once is within u·|S| ≤ γ_{n−1}·Σ|x|
    (n ≥ 2), and one element is copied exactly."""
    x = np.abs(np.asarray(inputs[0], dtype=np.float64))
    total = np.sum(np.where(np.isfinite(x), x, 0.0), axis=-1, keepdims=True)
    m = max(x.shape[-1] - 1, 0) * 2.0**-24
    return m / (1.0 - m) * total


def sum_rows_typical(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """The aggregate criterion's scale (golden/tolerance.py): the n − 1 additions each err by at most
    u·|partial| ≤ u·Σ|x|, root-sum-square √(n−1)·u·Σ|x|."""
    x = np.abs(np.asarray(inputs[0], dtype=np.float64))
    total = np.sum(np.where(np.isfinite(x), x, 0.0), axis=-1, keepdims=True)
    return np.sqrt(max(x.shape[-1] - 1, 0)) * 2.0**-24 * total


SPECS.add(OpSpec(
    name="ARANGE", family="sequence",
    regimes=(*element_regimes(elements=_arange_outputs),),
    golden=lambda xs, c: arange(c.param("start"), c.param("stop"), c.param("step")).reshape(1, 1, 1, -1),
    signatures=(Signature((), "f32"),),
    tolerance={"f32": Tolerance("ggml rounds one fused multiply-add start+step·i (0.5 ulp); an unfused multiply "
                                "then add also rounds step·i (0.5 ulp of it)", ulp=0.5, model=arange_model,
                                model_name="half_ulp_of_step_times_i", calibration=Calibration.GGML_CPU)},
    params={"start": P("first value (f32)"), "stop": P("exclusive end (f32), > start"),
            "step": P("increment (f32)")},
    validate=checks.arange_range, notes="length (int64)ceilf((stop−start)/step) in f32; no inputs"))
SPECS.add(OpSpec(
    name="ARGSORT", family="sequence", golden=lambda xs, c: argsort(xs[0], c.param("order") == "desc"),
    regimes=row_regimes() + (many_rows(), SPECIAL_VALUES),
    signatures=(sig("f32", dst="i32"),),
    tolerance={"*": Tolerance("judged as a permutation: each row must be a permutation of 0..ne0−1 that puts the "
                              "values in order; tied values may come in any order (std::sort is unstable)")},
    params={"order": P("asc or desc", str)}, specials=(np.inf, -np.inf, 0.0, -0.0), structured_inputs=True,
    own_verdict=True, notes="NaN is not drawn (its order is undefined)"))
SPECS.add(OpSpec(
    name="SUM_ROWS", family="sequence", golden=one(sum_rows), signatures=(sig("f32"),),
    regimes=row_regimes() + (many_rows(), SPECIAL_VALUES),
    tolerance={"f32": Tolerance("the row's n terms added in f32 in any order (sequential, pairwise, tree): "
                                "γ_{n−1}·Σ|x| (Higham), the final rounding included; ggml's CPU sums in double "
                                "and rounds once (≤ u·|S|); ggml CPU ci: ≤ 0.017 of the allowance",
                                model=sum_rows_model, model_name="γ_{n−1}·Σ|x|",
                                typical=sum_rows_typical, typical_name="√(n−1)·u·Σ|x|",
                                calibration=Calibration.GGML_CPU)},
    validate=checks.one_input, notes="output ne [1, ne1, ne2, ne3]; half the cases are one or two rows longer "
                                     "than 1,024 (to 8,192 in ci, 131k in nightly)"))

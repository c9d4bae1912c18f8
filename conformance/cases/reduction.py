"""Reductions and scans (SUM, MEAN, ARGMAX, COUNT_EQUAL, L2_NORM, CUMSUM): strategies, the input
makers that reach their hard regimes, and ARGMAX's index verdict.

Hard regimes: long rows (up to 4096, and SUM over all of a 32k-element tensor), where the summation
error grows; ARGMAX rows with ties at the maximum, maxima one f32 ulp apart, NaN, and rows of −inf;
COUNT_EQUAL on few distinct integers (about half equal) and on the full I32 range; L2_NORM with eps
from 1e-12 to 16 and rows scaled down by powers of two, so the norm falls below eps often; CUMSUM
rows of one sign (no cancellation to hide a lost term). Every source may have any layout (the
constructors accept it).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import strategies as st

from conformance.cases.registry import register
from conformance.data import DISTRIBUTIONS, FULL_RANGE_INTEGERS, full_range_i32, plain_input
from conformance.strategies import (
    f32,
    finish,
    grid_shape,
    input_layouts,
    long_row_branch,
    many_rows_branch,
    row_size,
    shapes,
    spec,
)
from conformance.verdict import Metrics
from golden import catalogue, dtypes
from golden.case import OpCase
from golden.spec import Signature
from golden.tolerance import Tolerance

MAX_ELEMENTS = 1 << 15
L2_EPS = st.sampled_from([1e-12, 1e-6, 1e-5, 1e-3, 0.5, 1.0, 4.0, 16.0])


def _layout(op: str) -> st.SearchStrategy:
    return input_layouts(catalogue.get(op).input_layouts)


@st.composite
def reduce_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    """SUM, MEAN, CUMSUM: one tensor of any shape and layout."""
    src = spec(sig.srcs[0], draw(shapes()), draw(_layout(op)))
    # the many-rows branch: MEAN and CUMSUM give a block to a row; SUM reaches its grid limit by it too
    return many_rows_branch(draw, long_row_branch(draw, finish(draw, OpCase(op, (src,), dst=sig.dst))))


@st.composite
def l2_norm_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    src = spec(sig.srcs[0], draw(shapes()), draw(_layout(op)))
    case = finish(draw, OpCase(op, (src,), params=(("eps", f32(draw(L2_EPS))),), dst=sig.dst))
    return many_rows_branch(draw, long_row_branch(draw, case))


@st.composite
def argmax_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    ne0 = draw(row_size())
    ne1 = draw(st.integers(1, max(1, min(32, MAX_ELEMENTS // ne0))))
    src = spec(sig.srcs[0], (ne0, ne1, 1, 1), draw(_layout(op)))
    # one signature only: a larger share keeps the 4,096-row regime in each 30-example draw
    return many_rows_branch(draw, long_row_branch(draw, finish(draw, OpCase(op, (src,), dst=sig.dst)), every=3))


@st.composite
def count_equal_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    ne = draw(shapes(max_elements=MAX_ELEMENTS // 2))
    a, b = spec(sig.srcs[0], ne, draw(_layout(op))), spec(sig.srcs[1], ne, draw(_layout(op)))
    case = finish(draw, OpCase(op, (a, b), dst=sig.dst))
    big = grid_shape(draw)  # the grid-limit regime, drawn last: both tensors just past 65,536 elements, packed
    return replace(case, inputs=(spec(sig.srcs[0], big), spec(sig.srcs[1], big))) if big else case


# ---- input makers ---------------------------------------------------------------------------------
ARGMAX_ROWS = ("drawn", "ties", "near_tie", "neg_inf", "nan")
ARGMAX_ROW_WEIGHTS = (0.35, 0.25, 0.2, 0.1, 0.1)


def argmax_inputs(case: OpCase, rng: np.random.Generator) -> list[np.ndarray]:
    """Each row one regime: as drawn; few distinct values (ties at the maximum); the maximum and a
    value one f32 ulp below it, in either order (an F16 pass merges them into a tie); all −inf; or
    with NaN. Rows of other regimes hold no NaN."""
    (src,) = case.inputs
    x = plain_input(rng, src, case)
    rows = x.reshape(-1, src.ne[0])
    n_rows, n = rows.shape
    lo, hi = DISTRIBUTIONS[case.distribution]
    # every row at once (a case may have 65,536 rows): the regimes, then each regime's rows
    regime = rng.choice(ARGMAX_ROWS, p=ARGMAX_ROW_WEIGHTS, size=n_rows)
    nan = np.isnan(rows)
    rows[nan] = dtypes.round_to(rng.uniform(lo, hi, size=int(nan.sum())), "f32")
    ties = regime == "ties"
    rows[ties] = rng.integers(-3, 4, size=(int(ties.sum()), n)) * 0.5
    near = np.flatnonzero((regime == "near_tie") & (n >= 2))
    if near.size:
        finite = np.where(np.isfinite(rows[near]), rows[near], -np.inf).max(axis=1)
        top = np.where(np.isfinite(finite), finite, 1.0).astype(np.float32)
        i = rng.integers(0, n, size=near.size)
        j = (i + rng.integers(1, n, size=near.size)) % n  # another element of the row
        rows[near, i] = top
        rows[near, j] = np.nextafter(top, np.float32(np.inf))
    rows[regime == "neg_inf"] = -np.inf
    nan_rows = np.flatnonzero(regime == "nan")
    if nan_rows.size:
        picks = rng.integers(0, n, size=(nan_rows.size, 2))
        rows[nan_rows, picks[:, 0]] = np.nan
        second = rng.integers(1, 3, size=nan_rows.size) == 2  # one or two NaN per row
        rows[nan_rows[second], picks[second, 1]] = np.nan
    return [rows.reshape(src.np_shape)]


def count_equal_inputs(case: OpCase, rng: np.random.Generator) -> list[np.ndarray]:
    """a from a handful of values, or the whole I32 range under ``wide`` and ``special``; b equal to a at
    a random share of the positions and drawn alike elsewhere (over the whole range, half of those
    within 64 of a: unequal, but equal once rounded to f32)."""
    a_spec, b_spec = case.inputs
    if case.distribution in FULL_RANGE_INTEGERS:  # the int>2^24 regime
        draw = lambda n: full_range_i32(rng, (n,))  # noqa: E731
    else:
        draw = lambda n: rng.integers(-2, 3, size=n)  # noqa: E731 (few values: chance equalities too)
    n = a_spec.nelements
    a = draw(n)
    same = rng.random(n) < rng.choice([0.0, 0.5, 0.9, 1.0])
    b = np.where(same, a, draw(n))
    if case.distribution in FULL_RANGE_INTEGERS:  # near misses: a ± 1..64, one f32 value beyond 2^24
        info = np.iinfo(np.int32)
        near = np.clip(a.astype(np.int64) + rng.choice([-1, 1], n) * rng.integers(1, 65, n), info.min, info.max)
        b = np.where(~same & (rng.random(n) < 0.5), near, b)
    return [a.astype(np.int32).reshape(a_spec.np_shape), b.astype(np.int32).reshape(b_spec.np_shape)]


def l2_norm_inputs(case: OpCase, rng: np.random.Generator) -> list[np.ndarray]:
    """Rows scaled by 1, 2^-10, 2^-20 or 2^-30, so that small eps values meet norms below them too."""
    (src,) = case.inputs
    x = plain_input(rng, src, case)
    rows = x.reshape(-1, src.ne[0])
    scale = 2.0 ** -rng.choice([0, 0, 10, 20, 30], size=(rows.shape[0], 1))
    with np.errstate(invalid="ignore"):
        rows = dtypes.round_to(rows * scale, src.dtype)
    return [rows.reshape(src.np_shape)]


def cumsum_inputs(case: OpCase, rng: np.random.Generator) -> list[np.ndarray]:
    """A third of the rows made non-negative: prefixes then grow steadily and nothing cancels."""
    (src,) = case.inputs
    x = plain_input(rng, src, case)
    rows = x.reshape(-1, src.ne[0])
    positive = rng.random(rows.shape[0]) < 1 / 3
    rows[positive] = np.abs(rows[positive])
    return [rows.reshape(src.np_shape)]


# ---- ARGMAX's verdict -----------------------------------------------------------------------------
def judge_argmax(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray, device: np.ndarray,
                 tol: Tolerance | None = None) -> Metrics:
    """Each row's index must be in [0, ne0) and select a maximal value (any of tied maxima); a row
    holding NaN needs only an index in range (its argmax is not agreed)."""
    ne0 = case.inputs[0].ne[0]
    x = np.asarray(inputs[0], dtype=np.float64).reshape(-1, ne0)
    d = np.asarray(device).astype(np.int64).reshape(-1)
    m = Metrics(n=int(x.shape[0]))
    if d.size != x.shape[0]:
        m.passed, m.error_ratio = False, float("inf")
        m.detail = f"shape mismatch: device gave {d.size} indices for {x.shape[0]} rows"
        return m
    in_range = (d >= 0) & (d < ne0)
    has_nan = np.isnan(x).any(axis=1)
    picked = x[np.arange(x.shape[0]), np.where(in_range, d, 0)]
    with np.errstate(invalid="ignore"):
        top = np.max(np.where(np.isnan(x), -np.inf, x), axis=1)
    bad = ~in_range | (~has_nan & (picked != top))
    m.n_bad = int(bad.sum())
    m.passed = m.n_bad == 0
    if not m.passed:
        row = int(np.argmax(bad))
        m.worst_index = [row, 0, 0, 0]
        m.error_ratio = float("inf")
        m.worst_device, m.worst_golden = float(d[row]), float(np.asarray(golden).reshape(-1)[row])
        chose = f"value {float(picked[row])!r}" if in_range[row] else "out of range"
        m.detail = (f"row {row}: index {int(d[row])} ({chose}), but the row's maximum is {float(top[row])!r} "
                    f"(e.g. index {int(m.worst_golden)}); {m.n_bad}/{m.n} rows wrong")
    return m


register("SUM", "MEAN", group="reductions", draw=reduce_case)
register("CUMSUM", group="reductions", draw=reduce_case, make_inputs=cumsum_inputs)
register("L2_NORM", group="reductions", draw=l2_norm_case, make_inputs=l2_norm_inputs)
register("ARGMAX", group="reductions", draw=argmax_case, make_inputs=argmax_inputs, judge=judge_argmax)
register("COUNT_EQUAL", group="reductions", draw=count_equal_case, make_inputs=count_equal_inputs)

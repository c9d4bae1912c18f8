"""NORM, RMS_NORM, GROUP_NORM: normalisation without affine weights (ggml applies those with MUL/ADD).

Exact float64 maths on the stored values. ``eps`` is an F32 op param, so it is taken as the f32
value ggml stores. A non-finite value anywhere in a row (group) makes that whole row NaN, as it
does on ggml's CPU: the mean is ±inf or NaN and every ``x − mean`` follows.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from golden.case import OpCase
from golden.spec import SPECIAL_VALUES, OpList, OpSpec, P, Regime, RegimeKind, many_rows, partial_tile, row_regimes, sig
from golden.tolerance import F32_EPS, F32_SUBNORMAL_HALF_STEP, Calibration, ErrorModel, Tolerance, finite_abs

SPECS = OpList()

# ggml-cuda normalises a group with one block, of 1,024 threads once the group has that many elements
GROUP_TILE = 1024


def _group_size(c: OpCase) -> int:
    """Elements in a full group: ne0·ne1 times ceil(channels / n_groups) channels."""
    ne = c.inputs[0].ne
    return ne[0] * ne[1] * -(-ne[2] // c.param("n_groups"))


def _f32(value: float) -> float:
    return float(np.float32(value))


def norm(x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """Per row (ne0): ``(x − mean) / sqrt(var + eps)`` with the biased variance."""
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        d = x - x.mean(axis=-1, keepdims=True)
        var = np.mean(d * d, axis=-1, keepdims=True)
        return d / np.sqrt(var + _f32(eps))


def rms_norm(x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Per row: ``x / sqrt(mean(x²) + eps)``; written as ``x · (1/…)`` so ±inf rows give 0 and NaN as ggml."""
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        ms = np.mean(x * x, axis=-1, keepdims=True)
        return x * (1.0 / np.sqrt(ms + _f32(eps)))


def group_bounds(channels: int, n_groups: int) -> list[tuple[int, int]]:
    """ggml's groups over ne2: ``ceil(C/G)`` channels each, the last ones shorter or empty."""
    per = -(-channels // n_groups)
    return [(g * per, min((g + 1) * per, channels)) for g in range(n_groups) if g * per < channels]


def _by_group(x: np.ndarray, n_groups: int, per_row: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """``per_row`` applied to each group's elements as one row (numpy (N, C, H, W)); the groups of
    ``ceil(C/G)`` channels at once, then the shorter last one (group_bounds' groups, without a loop over
    them: a case may have 65,536 groups)."""
    out = np.empty_like(x)
    per = -(-x.shape[1] // n_groups)
    full = x.shape[1] // per
    for lo, hi, groups in ((0, full * per, full), (full * per, x.shape[1], 1)):
        if hi > lo:
            part = x[:, lo:hi].reshape(x.shape[0], groups, -1)
            out[:, lo:hi] = np.broadcast_to(per_row(part), part.shape).reshape(x[:, lo:hi].shape)
    return out


def group_norm(x: np.ndarray, n_groups: int = 32, eps: float = 1e-6) -> np.ndarray:
    """Numpy shape (N, C, H, W) = ggml [W, H, C, N]: NORM over each group's whole W×H×channels block."""
    return _by_group(np.asarray(x, np.float64), n_groups, lambda rows: norm(rows, eps))


def row_stats(x: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-row mean and ``1/sqrt(var + eps)``, broadcastable to x (for the tolerance model)."""
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        mean = x.mean(axis=-1, keepdims=True)
        return mean, 1.0 / np.sqrt(np.mean((x - mean) ** 2, axis=-1, keepdims=True) + _f32(eps))


def group_stats(x: np.ndarray, n_groups: int, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-group mean and ``1/sqrt(var + eps)`` spread over each group's elements (numpy (N, C, H, W))."""
    x = np.asarray(x, np.float64)
    return (_by_group(x, n_groups, lambda rows: row_stats(rows, eps)[0]),
            _by_group(x, n_groups, lambda rows: row_stats(rows, eps)[1]))


def _worst(m: float) -> float:
    return m


def _root_sum_square(m: float) -> float:
    return float(np.sqrt(max(m, 0.0)))


def centred_norm_model(stats: Callable[[OpCase, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray, int]],
                       count: Callable[[float], float] = _worst) -> ErrorModel:
    """NORM/GROUP_NORM in f32 with the sums in any order (sequential f32 included: ggml's CPU does
    that on strided rows, a device may everywhere). Over ``n`` elements the f32 mean is off by
    ``Δm ≤ (n−1)·u·mean|x| + u·|mean|`` (Higham's bound, then the division); each ``d = x − mean``
    by ``Δm + u·|d|``. The variance is a sum of squares (positive terms: relative (n+1)·u), and its
    first-order change with the mean is zero (Σd = 0), leaving ``n·Δm²``; sqrtf and the reciprocal
    add 2u, or an rsqrtf within 2 ulp 4u (CUDA's). So
    ``|Δy| ≤ rstd·Δm + |y|·((n+1)/2 + 6)·u + ½|y|·(rstd·Δm)²``. ``stats`` gives mean, rstd, mean|x|
    (broadcastable to the input) and n. ``count`` turns a number of roundings into their weight: the
    number itself (worst case), or its square root (the aggregate criterion's root-sum-square)."""

    def model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            mean, rstd, mean_abs, n = stats(case, np.asarray(inputs[0], np.float64))
            # each rounding also errs by up to 2^-150 absolute where its result is subnormal (the n − 1 sums
            # and the division of the mean; x − mean, scaled by rstd; the final product)
            dmean = count(n - 1) * F32_EPS * finite_abs(mean_abs) + F32_EPS * finite_abs(mean) \
                + count(n) * F32_SUBNORMAL_HALF_STEP
            shift = finite_abs(rstd) * dmean
            y = finite_abs(golden)
            bound = shift + y * (count(n + 1) / 2 + 6) * F32_EPS + 0.5 * y * shift * shift \
                + (finite_abs(rstd) + 1) * F32_SUBNORMAL_HALF_STEP
        return np.broadcast_to(bound, golden.shape)

    model.__name__ = "centred_norm(rstd·Δmean + ((n+1)/2+6)·u·|y|)"
    return model


def _row_stats_model(c: OpCase, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    mean, rstd = row_stats(x, c.param("eps"))
    return mean, rstd, np.mean(np.abs(x), axis=-1, keepdims=True), x.shape[-1]


def _group_stats_model(c: OpCase, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    n_groups = c.param("n_groups")
    mean, rstd = group_stats(x, n_groups, c.param("eps"))
    mean_abs, _ = group_stats(np.abs(x), n_groups, c.param("eps"))
    per = -(-x.shape[1] // n_groups)
    return mean, rstd, mean_abs, per * x.shape[2] * x.shape[3]


def one_pass_variance_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray,
                            count: Callable[[float], float] = _worst) -> np.ndarray:
    """NORM with the variance in one pass, ``Σx²/n − mean²`` in f32 (ggml-cuda's and ggml-vulkan's
    norm kernels): Σx²/n is off by (n+1)·u·(mean² + var) (positive terms), mean² by 2|mean|·Δm + u·mean²
    (Δm as in :func:`centred_norm_model`: here it does not cancel), and the subtraction by u·(mean² + var),
    so ``Δvar ≤ (n+3)·u·(mean² + var) + 2|mean|·Δm``. The scale 1/sqrt(var + eps) then moves by
    ``1/sqrt(1 − δ) − 1`` relatively, δ = Δvar/(var + eps): unbounded once δ ≥ 1 (the cancellation
    can leave nothing of the variance when mean² ≫ var)."""
    x = np.asarray(inputs[0], np.float64)
    n = x.shape[-1]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        mean, rstd = row_stats(x, case.param("eps"))
        var = np.mean((x - mean) ** 2, axis=-1, keepdims=True)
        dmean = count(n - 1) * F32_EPS * finite_abs(np.mean(np.abs(x), axis=-1, keepdims=True)) \
            + F32_EPS * finite_abs(mean) + count(n) * F32_SUBNORMAL_HALF_STEP
        dvar = count(n + 3) * (F32_EPS * finite_abs(mean * mean + var) + F32_SUBNORMAL_HALF_STEP) \
            + 2 * finite_abs(mean) * dmean
        delta = dvar * finite_abs(rstd) ** 2
        scale_error = np.where(delta < 1.0, 1.0 / np.sqrt(np.maximum(1.0 - delta, 1e-300)) - 1.0, np.inf)
        bound = finite_abs(golden) * scale_error
    return np.broadcast_to(bound, golden.shape)


_centred_rows = centred_norm_model(_row_stats_model)


def norm_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """The centred (two-pass) model, plus what a one-pass variance adds."""
    return _centred_rows(case, inputs, golden) + one_pass_variance_model(case, inputs, golden)


_centred_rows_typical = centred_norm_model(_row_stats_model, _root_sum_square)


def norm_typical(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """norm_model with each count m of roundings in a sum taken as √m (the aggregate criterion)."""
    return _centred_rows_typical(case, inputs, golden) + one_pass_variance_model(case, inputs, golden,
                                                                                 _root_sum_square)


def rms_norm_typical(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """rms_norm_model with the sum's n + 1 roundings as root-sum-square: (√(n+1)/2 + 6)·u·|y|."""
    n = np.asarray(inputs[0]).shape[-1]
    return finite_abs(golden) * (np.sqrt(n + 1) / 2 + 6) * F32_EPS


def rms_norm_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """RMS_NORM in f32 with the sum of squares in any order: Σx² (positive terms) is off by (n+1)·u
    relatively (squares, sum, /n), so the scale by ½(n+1)·u; +eps, sqrtf, 1/ and ·x add 4u, or 6u
    with an rsqrtf within 2 ulp (CUDA's) in place of sqrtf and 1/."""
    n = np.asarray(inputs[0]).shape[-1]
    return finite_abs(golden) * ((n + 1) / 2 + 6) * F32_EPS


_F32_ONLY = (sig("f32"),)
_NORM_NOTE = ("F32 only on ggml's CPU. eps > 0 is drawn: with eps = 0 a constant row is 0/0 exactly but the "
              "CPU's f32 mean need not cancel exactly")
SPECS.add(OpSpec(
    name="NORM", family="norm", golden=lambda xs, c: norm(xs[0], c.param("eps")), signatures=_F32_ONLY,
    regimes=row_regimes() + (many_rows(), SPECIAL_VALUES),
    tolerance={"f32": Tolerance("mean and variance summed in f32 in any order (Higham; +2^-150 per subnormal "
                                "rounding), then sqrtf and 1/ (or an "
                                "rsqrtf within 2 ulp); the variance two-pass (ggml's CPU: in double on contiguous "
                                "rows, in f32 on strided ones) or one-pass Σx²/n − mean² (ggml-cuda, ggml-vulkan), "
                                "whose cancellation moves 1/sqrt(var+eps) by 1/sqrt(1−δ) − 1, δ = ((n+3)·u·(mean²+var) "
                                "+ 2|mean|·Δmean)/(var+eps); ggml CPU ci (0.20.2, 0.25.1, 0.17.0): ≤ 0.16, "
                                "ggml-vulkan 0.25.1: ≤ 0.28 of the allowance",
                                ulp=0.5, atol=2.0**-149, model=norm_model,
                                model_name="centred_norm + one_pass_variance", typical=norm_typical,
                                typical_name="the same with √m for each m roundings of a sum",
                                calibration=Calibration.GGML_CPU)},
    params={"eps": P("added to the variance (f32, > 0)")}, notes=_NORM_NOTE))
SPECS.add(OpSpec(
    name="RMS_NORM", family="norm", golden=lambda xs, c: rms_norm(xs[0], c.param("eps")), signatures=_F32_ONLY,
    regimes=row_regimes() + (many_rows(), SPECIAL_VALUES),
    tolerance={"f32": Tolerance("x·x summed in f32 in any order ((n+1)·u relative), /n, +eps, sqrtf and 1/ (or an "
                                "rsqrtf within 2 ulp) and ·x; one subnormal step where x·scale underflows (ggml's "
                                "CPU sums in double); ggml CPU ci: ≤ 0.25 of the allowance",
                                ulp=0.5, atol=2.0**-149, model=rms_norm_model,
                                typical=rms_norm_typical, typical_name="(√(n+1)/2 + 6)·u·|y|",
                                calibration=Calibration.GGML_CPU)},
    params={"eps": P("added to the mean square (f32, > 0)")},
    notes=_NORM_NOTE + ". form=inplace builds ggml_rms_norm_inplace on a ggml_dup of the input (the in-place "
                       "kernel runs; the input stays checkable)"))
SPECS.add(OpSpec(
    name="GROUP_NORM", family="norm",
    regimes=(partial_tile("group", _group_size, GROUP_TILE),
             Regime("groups>65535", lambda c: c.param("n_groups") > 65535,
                    "more groups than one grid dimension has blocks (one block per group)", RegimeKind.GRID)),
    golden=lambda xs, c: group_norm(xs[0], c.param("n_groups"), c.param("eps")),
    signatures=_F32_ONLY,
    tolerance={"f32": Tolerance("NORM over each group's ne0·ne1·channels block, sums in f32 in any order (+2^-150 "
                                "per subnormal rounding); ggml "
                                "CPU ci: ≤ 0.33 of the allowance",
                                ulp=0.5, atol=2.0**-149, model=centred_norm_model(_group_stats_model),
                                typical=centred_norm_model(_group_stats_model, _root_sum_square),
                                typical_name="the same with √m for each m roundings of a sum",
                                calibration=Calibration.GGML_CPU)},
    params={"n_groups": P("groups over ne2: ceil(C/G) channels each, the last shorter or empty", int),
            "eps": P("added to the variance (f32, > 0)")},
    notes=_NORM_NOTE + ". Channels are ne2; every ne3 batch is normalised separately"))

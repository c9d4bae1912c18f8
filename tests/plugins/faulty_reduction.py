"""Deliberately wrong reduction devices: the golden oracle with one reduction or scan computed the
way a backend author could get it wrong (``--device tests.plugins.faulty_reduction:cumsum_exclusive``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from device.base import RunResult
from device.golden_device import GoldenDevice
from golden import dtypes, reduction
from golden.case import OpCase
from tests.plugins import FaultyDevice, planted


def _result(out: np.ndarray, inputs: list[np.ndarray]) -> RunResult:
    return RunResult(out, [np.array(x) for x in inputs])


def _argmax_after_f16(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """The row is converted to F16 before the search (first index of the F16 maximum): values
    closer than F16's spacing become ties and the first of them wins."""
    x = dtypes.round_to(np.asarray(inputs[0], np.float64), "f16")
    return _result(np.argmax(x, axis=-1).astype(np.int32).reshape(1, 1, 1, -1), inputs)


def _argmax_from_minus_flt_max(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """A search that starts from −FLT_MAX with index −1 and takes strictly greater values (ggml-cuda's
    argmax_f32): a row of −inf (or NaN) keeps −1."""
    x = np.asarray(inputs[0], np.float64)
    with np.errstate(invalid="ignore"):
        above = x > -np.finfo(np.float32).max
    idx = np.where(above.any(axis=-1), np.argmax(np.where(above, x, -np.inf), axis=-1), -1)
    return _result(idx.astype(np.int32).reshape(1, 1, 1, -1), inputs)


def _cumsum_exclusive(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """An exclusive scan: y_k = x_0 + … + x_{k−1} (y_0 = 0)."""
    inclusive = reduction.cumsum(inputs[0])
    out = np.concatenate([np.zeros_like(inclusive[..., :1]), inclusive[..., :-1]], axis=-1)
    return _result(dtypes.round_to(out, case.dst), inputs)


def _l2_norm_eps_inside_sqrt(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """RMS-norm habit: x / sqrt(Σx² + eps) instead of x / max(‖x‖, eps)."""
    x = np.asarray(inputs[0], np.float64)
    eps = float(np.float32(case.param("eps")))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        out = x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps)
    return _result(dtypes.round_to(out, case.dst), inputs)


def _l2_norm_eps_not_squared(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """rsqrt(max(Σx², eps)): the clamp moved inside the root without squaring eps (the norm is
    clamped at √eps instead of eps)."""
    x = np.asarray(inputs[0], np.float64)
    eps = float(np.float32(case.param("eps")))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        out = x / np.sqrt(np.fmax(np.sum(x * x, axis=-1, keepdims=True), eps))
    return _result(dtypes.round_to(out, case.dst), inputs)


def _sum_in_dst_type(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """An F16/BF16 SUM accumulated in its own type: every partial sum rounded to the destination."""
    if case.dst == "f32":
        return golden.run(case, inputs)
    total = 0.0
    with np.errstate(invalid="ignore", over="ignore"):
        for v in np.asarray(inputs[0], np.float64).ravel():
            total = float(dtypes.round_to(np.array(total + v), case.dst))
    return _result(np.array(total).reshape(1, 1, 1, 1), inputs)


def _count_in_f16(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """The 0/1 equality map summed in F16 (ggml-cann sums it in the sources' type): sequential
    additions stop growing at 2048."""
    eq = (np.asarray(inputs[0]) == np.asarray(inputs[1])).ravel()
    total = np.float16(0)
    for v in eq:
        total = np.float16(total + np.float16(v))
    return _result(np.array(int(total), dtype=np.int64).reshape(1, 1, 1, 1), inputs)


@planted("argmax", "ARGMAX on F16-rounded values: maxima closer than F16's spacing resolve to the first index")
def argmax_after_f16(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("argmax_after_f16", "ARGMAX", _argmax_after_f16)


@planted("argmax", "ARGMAX starting from −FLT_MAX with a strict >: a row of −inf gives −1 (ggml-cuda's argmax_f32)")
def argmax_minus_one_on_neg_inf(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("argmax_minus_one_on_neg_inf", "ARGMAX", _argmax_from_minus_flt_max)


@planted("cumsum", "an exclusive CUMSUM (the scan's shift applied once too often)")
def cumsum_exclusive(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("cumsum_exclusive", "CUMSUM", _cumsum_exclusive)


@planted("l2_norm", "L2_NORM with eps inside the sqrt: x / sqrt(Σx² + eps) instead of x / max(‖x‖, eps)")
def l2_norm_eps_inside_sqrt(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("l2_norm_eps_inside_sqrt", "L2_NORM", _l2_norm_eps_inside_sqrt)


@planted("l2_norm", "L2_NORM as rsqrt(max(Σx², eps)): eps not squared when the clamp moved inside the root")
def l2_norm_eps_not_squared(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("l2_norm_eps_not_squared", "L2_NORM", _l2_norm_eps_not_squared)


@planted("sum and f16", "SUM of F16 accumulated in F16")
def sum_in_dst_type(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("sum_in_dst_type", "SUM", _sum_in_dst_type)


@planted("count_equal", "COUNT_EQUAL summing its 0/1 map in F16 (exact only up to 2048)")
def count_equal_in_f16(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("count_equal_in_f16", "COUNT_EQUAL", _count_in_f16)

"""Faults that only show in regimes the suite used to draw rarely or never (issue 15): each stands for
a real way a backend goes wrong, and the ci profile of the tests named in its ``@planted`` must
catch it (``tests/test_planted_faults.py``).
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from typing import Any

import numpy as np

from device.base import RunResult
from device.golden_device import GoldenDevice
from golden import catalogue, dtypes, matmul, softmax
from golden.case import OpCase
from tests.plugins import FaultyDevice, planted


def _exact_inputs(case: OpCase, inputs: list[np.ndarray]) -> list[np.ndarray]:
    return catalogue.golden_inputs(case, inputs)


def _with_output(result: RunResult, values: np.ndarray, dst: str) -> RunResult:
    """``result`` with its output replaced by ``values`` stored as the destination type stores them."""
    if dst in dtypes.INDEX_TYPES:
        out = np.asarray(values).astype(dtypes.STORAGE_DTYPE[dst])
    else:
        out = dtypes.round_to(np.asarray(values, np.float64), dst)
    return replace(result, output=out.reshape(np.shape(result.output)))


# ---- CONCAT: the axis looked up by its extent -------------------------------------------------------
def _concat_axis_by_extent(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """The join axis found as the first dim with the joined dim's extent (``ne.index(ne[dim])``): right
    unless another dim has that extent. With a and b of one shape the wrong join is a valid one, and
    its values go into the destination in order."""
    result = golden.run(case, inputs)
    a, b = case.inputs
    dim = case.param("dim")
    axis = list(a.ne).index(a.ne[dim])
    if axis == dim or a.ne != b.ne:
        return result
    x, y = _exact_inputs(case, inputs)
    return _with_output(result, np.concatenate([x, y], axis=3 - axis), case.dst)


@planted("concat", "CONCAT joins along the first dim whose extent equals the joined dim's (wrong axis when two "
                   "dims have equal extents)")
def concat_axis_by_extent(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("concat_axis_by_extent", "CONCAT", _concat_axis_by_extent)


# ---- GET_ROWS: a table size limit -------------------------------------------------------------------
MAX_TABLE_ROWS = 1000


def _get_rows_aborts_on_tall_tables(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """Aborts the process, as a failed GGML_ASSERT does, when the table has more than 1,000 rows."""
    if case.inputs[0].ne[1] > MAX_TABLE_ROWS:
        sys.stderr.write(f"ggml-fake.c:7: GGML_ASSERT(src0->ne[1] <= {MAX_TABLE_ROWS}) failed\n")
        sys.stderr.flush()
        os.abort()
    return golden.run(case, inputs)


@planted("get_rows", "GET_ROWS aborts on tables of more than 1,000 rows (a fixed-size row cache)")
def get_rows_aborts_on_tall_tables(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("get_rows_aborts_on_tall_tables", "GET_ROWS", _get_rows_aborts_on_tall_tables)


# ---- ARGSORT, SUM_ROWS: one block of 1,024 per row ----------------------------------------------------
BLOCK = 1024


def _argsort_per_block(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """A bitonic sort in one block of 1,024 threads: longer rows come back sorted block by block,
    never merged."""
    result = golden.run(case, inputs)
    x = np.asarray(inputs[0], np.float64)
    if x.shape[-1] <= BLOCK:
        return result
    descending = case.param("order") == "desc"
    out = np.empty(x.shape, np.int64)
    for lo in range(0, x.shape[-1], BLOCK):
        chunk = x[..., lo:lo + BLOCK]
        out[..., lo:lo + BLOCK] = lo + np.argsort(-chunk if descending else chunk, axis=-1, kind="stable")
    return replace(result, output=out.astype(np.int32))


def _sum_rows_one_block(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """A row reduction in one block of 1,024 threads that never loops: elements past 1,024 are dropped."""
    result = golden.run(case, inputs)
    x = np.asarray(inputs[0], np.float64)
    if x.shape[-1] <= BLOCK:
        return result
    with np.errstate(invalid="ignore", over="ignore"):
        return _with_output(result, x[..., :BLOCK].sum(axis=-1, keepdims=True), case.dst)


@planted("argsort", "ARGSORT sorts rows longer than 1,024 block by block without merging")
def argsort_per_block(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("argsort_per_block", "ARGSORT", _argsort_per_block)


@planted("sum_rows", "SUM_ROWS drops the elements of a row past 1,024")
def sum_rows_one_block(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("sum_rows_one_block", "SUM_ROWS", _sum_rows_one_block)


# ---- SOFT_MAX: ALiBi slopes kept in F16 -------------------------------------------------------------
def _softmax_f16_alibi_slopes(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """The ALiBi slopes computed (or cached) in F16: exact for power-of-two slopes, off by up to 2^-12
    relative for the others."""
    result = golden.run(case, inputs)
    max_bias = float(np.float32(case.param("max_bias")))
    if not case.param("mask") or max_bias <= 0.0:
        return result
    a, mask, sinks = softmax.split_inputs(_exact_inputs(case, inputs), True, bool(case.param("sinks")))
    ne3, ne2, ne1, _ = a.shape
    m = np.asarray(mask, np.float64)[:, :, :ne1, :]
    m = m[np.arange(ne3) % m.shape[0]][:, np.arange(ne2) % m.shape[1]]
    slopes = dtypes.round_to(softmax.alibi_slopes(ne2, max_bias), "f16").reshape(1, ne2, 1, 1)
    with np.errstate(invalid="ignore", over="ignore"):
        out = softmax.soft_max(a, slopes * m, sinks, case.param("scale"), 0.0)
    return _with_output(result, out, case.dst)


@planted("soft_max and anchor", "ALiBi slopes rounded to F16 (visible only where a slope is not a power of two)")
def softmax_f16_alibi_slopes(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("softmax_f16_alibi_slopes", "SOFT_MAX", _softmax_f16_alibi_slopes)


# ---- MUL_MAT: an F16 accumulator --------------------------------------------------------------------
def _mul_mat_f16_accumulator(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """F16 weights: src1 rounded to F16 (as ggml's CPU and CANN do), then the dot product accumulated in
    F16 — each partial sum rounded to F16 (11 significant bits), as an F16 GEMM without an f32
    accumulator does."""
    result = golden.run(case, inputs)
    if case.inputs[0].dtype != "f16":
        return result
    a, b = (np.asarray(x, np.float64) for x in _exact_inputs(case, inputs))
    a = matmul.broadcast_weights(a, b.shape)  # (X, Y, N, K)
    b = dtypes.round_to(b, "f16")  # (X, Y, M, K)
    acc = np.zeros(b.shape[:-1] + (a.shape[-2],))
    with np.errstate(invalid="ignore", over="ignore"):
        for k in range(a.shape[-1]):
            acc = dtypes.round_to(acc + b[..., :, k, None] * a[..., None, :, k], "f16")
    return _with_output(result, acc, case.dst)


@planted("mul_mat", "MUL_MAT with F16 weights accumulates in F16 (the src1-rounding term of the F16 row must not "
                    "hide it)")
def mul_mat_f16_accumulator(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("mul_mat_f16_accumulator", "MUL_MAT", _mul_mat_f16_accumulator)

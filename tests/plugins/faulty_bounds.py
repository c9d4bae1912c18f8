"""Faults that hide where a bound is loose or a known bug looks away (issue 28). Each must be caught
by the ci profile (tests/test_planted_faults.py):

* kernels that drop a tail of a reduction — keys, K, a row — by less than the per-element worst-case
  bound (a bound that grows with n); the aggregate criterion (golden/tolerance.py) catches them;
* a device presenting itself as ggml's CPU 0.20.2, whose known layout bugs cover most
  CROSS_ENTROPY_LOSS draws, and which is also wrong in a narrow regime (logits above 88): caught
  because covered draws do not spend the examples and each gets a companion in a covered-free layout.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import numpy as np

from device import known_bugs
from device.base import RunResult
from device.golden_device import GoldenDevice
from golden import attention, catalogue, matmul, sequence
from golden.case import OpCase
from tests.plugins import FaultyDevice, planted

SPLITS = 4  # a split-KV kernel's number of chunks


def fa_without_last_split(xs: list[np.ndarray], case: OpCase) -> np.ndarray:
    """FLASH_ATTN_EXT over the first n_kv − ⌊n_kv/4⌋ keys: the last of four KV splits never merged."""
    n_kv = case.inputs[1].ne[1]
    kept = n_kv - n_kv // SPLITS
    changed = [np.asarray(x) for x in xs]
    changed[1], changed[2] = changed[1][:, :, :kept], changed[2][:, :, :kept]
    if case.param("mask"):
        changed[3] = changed[3][..., :kept]
    return attention.flash_attn_ext(changed, case)


def _fa_last_split_dropped(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    if case.inputs[1].ne[1] < 128:  # short ranges are not split
        return golden.run(case, inputs)
    out = fa_without_last_split(catalogue.golden_inputs(case, inputs), case)
    return RunResult(out, [np.array(x) for x in inputs])


def mul_mat_without_last_term(xs: list[np.ndarray]) -> np.ndarray:
    """MUL_MAT over K − 1 terms: the long-K loop's bound off by one."""
    a, b = (np.asarray(x, np.float64) for x in xs[:2])
    return matmul.mul_mat(a[..., :-1], b[..., :-1])


def _mul_mat_last_term_dropped(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    if case.inputs[0].ne[0] < 1024:  # the short-K path is right
        return golden.run(case, inputs)
    out = mul_mat_without_last_term(catalogue.golden_inputs(case, inputs))
    return RunResult(out, [np.array(x) for x in inputs])


def sum_rows_without_last(xs: list[np.ndarray]) -> np.ndarray:
    """SUM_ROWS of each row but its last element: the vector loop's tail never added."""
    return sequence.sum_rows(np.asarray(xs[0], np.float64)[..., :-1])


def _sum_rows_last_dropped(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    if case.inputs[0].ne[0] < 4096:  # the long-row path only: there γ_{n−1}·Σ|x| exceeds one element
        return golden.run(case, inputs)
    return RunResult(sum_rows_without_last(catalogue.golden_inputs(case, inputs)), [np.array(x) for x in inputs])


@planted("flash_attn_ext", "split-KV attention (n_kv ≥ 128) never merges its last of four splits: a quarter of the "
                           "keys is ignored, within the F16-accumulator worst case on long rows")
def fa_drops_last_split(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("fa_drops_last_split", "FLASH_ATTN_EXT", _fa_last_split_dropped)


@planted("test_mul_mat and mul_mat-", "MUL_MAT with K ≥ 1024 skips the last term of each dot product (a loop bound "
                                      "off by one), within γ_K·Σ|a||b| at large K")
def mul_mat_drops_last_term(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("mul_mat_drops_last_term", "MUL_MAT", _mul_mat_last_term_dropped)


@planted("sum_rows", "SUM_ROWS on rows of 4,096 or more never adds the last element, within γ_{n−1}·Σ|x| there")
def sum_rows_drops_last(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("sum_rows_drops_last", "SUM_ROWS", _sum_rows_last_dropped)


# ---- a known bug that covers most draws, next to a fault in a narrow regime -------------------------
CPU_RELEASE = "0.20.2"
EXP_OVERFLOW = 88.0  # e^x overflows f32 from x ≈ 88.72


class CpuWithHiddenFault(GoldenDevice):
    """Presents itself as ggml's CPU 0.20.2, so its known bugs apply; fails every case one of them
    covers as that bug does (a wrong value, or an abort), and computes CROSS_ENTROPY_LOSS's softmax
    without subtracting the row maximum in f32, so logits above 88 overflow to inf and the loss is
    NaN — the regime that only 'wide' data reach, mostly in layouts the known bugs cover."""

    def info(self) -> dict[str, Any]:
        return {"spec": "cpu_with_hidden_fault", "name": "CPU", "ggml_version": CPU_RELEASE,
                "backend": "faulty: CPU's known bugs plus a narrow CROSS_ENTROPY_LOSS fault"}

    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        bug = known_bugs.find(case, "CPU", CPU_RELEASE)
        if bug is not None and bug.tolerance is None:
            if "fail" not in bug.outcomes:
                os.abort()  # the bug aborts: so does this device, in its worker
            result = super().run(case, inputs)
            return replace(result, output=np.full_like(result.output, np.nan))
        result = super().run(case, inputs)
        if case.op != "CROSS_ENTROPY_LOSS":
            return result
        logits = np.asarray(inputs[0], np.float32)
        if not np.nanmax(np.abs(logits), initial=0.0) > EXP_OVERFLOW:
            return result
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            e = np.exp(logits)  # no max subtracted: inf from 88.7 on
            log_p = np.log(e / e.sum(axis=-1, keepdims=True))
            labels = np.asarray(inputs[1], np.float32)
            loss = -(labels * log_p).sum() / (logits.size // logits.shape[-1])
        return replace(result, output=np.full_like(result.output, loss))


@planted("cross_entropy_loss", "a device whose known layout bugs cover most CROSS_ENTROPY_LOSS draws computes the "
                               "softmax without the max subtracted: logits above 88 give NaN")
def cpu_with_hidden_fault(options: dict[str, Any]) -> CpuWithHiddenFault:
    return CpuWithHiddenFault()

"""Deliberately wrong FLASH_ATTN_EXT and SET_ROWS devices: the golden oracle with one mistake each,
the kind an attention kernel or a KV-cache write gets wrong. Each must be caught by the ci profile
(tests/test_planted_faults.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from device.base import RunResult
from device.golden_device import GoldenDevice
from golden import attention
from golden.case import OpCase
from tests.plugins import FaultyDevice, planted


def _run_on(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray], changed: list[np.ndarray]) -> RunResult:
    """The golden result on ``changed`` inputs, reporting the inputs themselves as untouched."""
    result = golden.run(case, changed)
    return replace(result, inputs_after=[np.array(x) for x in inputs])


def _nan_when_fully_masked(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """A row whose keys are all masked gives NaN (−inf − (−inf) in the softmax) instead of ggml's 0."""
    result = golden.run(case, inputs)
    x = attention.split_inputs([np.asarray(a, np.float64) for a in inputs], case)
    logits = attention.attention_logits(x.q, x.k, x.mask, case.param("scale"), case.param("max_bias"),
                                        case.param("logit_softcap")).total
    empty = np.all(np.isneginf(logits), axis=-1)  # (ne3, n_head, n_q)
    out = np.array(result.output, dtype=np.float32)
    out[np.swapaxes(empty, 1, 2)] = np.nan  # dst is (ne3, n_q, n_head, DV)
    return replace(result, output=out)


def _gqa_modulo(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """Head h reads kv head h % n_head_kv instead of h // (n_head / n_head_kv)."""
    n_head = case.inputs[0].ne[2]
    changed = list(inputs)
    for i in (1, 2):
        kv = np.asarray(inputs[i])
        changed[i] = kv[:, np.arange(n_head) % kv.shape[1]]  # one kv head per head, picked by modulo
    return _run_on(golden, case, inputs, changed)


def _scale_after_mask(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """The softmax scale multiplies q·k + slope·mask instead of q·k alone."""
    if not case.param("mask"):
        return golden.run(case, inputs)
    changed = list(inputs)
    with np.errstate(invalid="ignore"):
        changed[3] = np.asarray(inputs[3], np.float64) * float(np.float32(case.param("scale")))
    return _run_on(golden, case, inputs, changed)


def _set_rows_off_by_one(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """Each source row lands one destination row further on (wrapping at the end)."""
    changed = list(inputs)
    changed[2] = (np.asarray(inputs[2]) + 1) % case.inputs[0].ne[1]
    return _run_on(golden, case, inputs, changed)


@planted("flash_attn_ext", "fully masked rows come out NaN instead of 0 (softmax of all −inf)")
def fa_nan_fully_masked(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("fa_nan_fully_masked", "FLASH_ATTN_EXT", _nan_when_fully_masked)


@planted("flash_attn_ext", "GQA maps head h to kv head h % n_head_kv instead of h / (n_head / n_head_kv)")
def fa_gqa_modulo(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("fa_gqa_modulo", "FLASH_ATTN_EXT", _gqa_modulo)


@planted("flash_attn_ext", "the softmax scale applied after the mask is added")
def fa_scale_after_mask(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("fa_scale_after_mask", "FLASH_ATTN_EXT", _scale_after_mask)


@planted("set_rows", "SET_ROWS writes each row one destination row off")
def set_rows_off_by_one(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("set_rows_off_by_one", "SET_ROWS", _set_rows_off_by_one)

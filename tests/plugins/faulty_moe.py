"""Deliberately wrong devices for MUL_MAT_ID, the multi-section ROPE modes and CROSS_ENTROPY_LOSS:
the golden oracle with one op distorted the way a backend gets it wrong."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from device.base import RunResult
from device.golden_device import GoldenDevice
from golden import rope
from golden.case import OpCase
from tests.plugins import FaultyDevice, planted


def _ids_by_token(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """The kernel reads ids as if token were the fast axis: slot e of token t takes the expert at
    flat index e·n_tokens + t instead of t·n_expert_used + e."""
    ids = np.asarray(inputs[2])
    n_tokens, n_used = ids.shape[-2], ids.shape[-1]
    swapped = ids.reshape(-1).reshape(n_used, n_tokens).T.reshape(ids.shape)
    result = golden.run(case, [inputs[0], inputs[1], swapped])
    return replace(result, inputs_after=[np.array(x) for x in inputs])


def _sections_reversed(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """The t, h and w sections laid out in the opposite order (w, h, t): the first s2 pairs rotate by
    the w position, and so on (VISION's y and x: x, y)."""
    if int(case.param("mode")) not in rope.MULTI_SECTION_MODES:
        return golden.run(case, inputs)
    s0, s1, s2, s3 = case.param("sections")
    pos = np.asarray(inputs[1]).reshape(4, -1)
    if int(case.param("mode")) == rope.VISION:
        # VISION uses only [y, x, 0, 0]: reversing all four would put its sections in the ignored slots,
        # a call the oracle refuses (an error record, the plug-in's own failure, not a caught fault)
        order, sections = [1, 0, 2, 3], (s1, s0, s2, s3)
    else:
        order, sections = [2, 1, 0, 3], (s2, s1, s0, s3)
    swapped_pos = pos[order].reshape(np.shape(inputs[1]))
    params = tuple((k, sections if k == "sections" else v) for k, v in case.params)
    result = golden.run(replace(case, params=params), [inputs[0], swapped_pos, *inputs[2:]])
    return replace(result, inputs_after=[np.array(x) for x in inputs])


def _mean_over_elements(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """The loss divided by the number of elements instead of the number of rows."""
    result = golden.run(case, inputs)
    n_classes = case.inputs[0].ne[0]
    return replace(result, output=np.asarray(result.output, np.float32) / np.float32(n_classes))


@planted("mul_mat_id", "MUL_MAT_ID applying ids along the wrong axis (experts indexed by token, not by slot)")
def mul_mat_id_ids_by_token(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("mul_mat_id_ids_by_token", "MUL_MAT_ID", _ids_by_token)


@planted("rope", "MROPE/IMROPE/VISION sections applied in the wrong order (w, h, t instead of t, h, w)")
def mrope_sections_reversed(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("mrope_sections_reversed", "ROPE", _sections_reversed)


@planted("cross_entropy_loss", "CROSS_ENTROPY_LOSS averaged over all elements instead of over rows")
def cross_entropy_mean_over_elements(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("cross_entropy_mean_over_elements", "CROSS_ENTROPY_LOSS", _mean_over_elements)

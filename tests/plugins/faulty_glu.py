"""Deliberately wrong GLU devices: the golden oracle with one GLU op computed the way a backend
author could get it wrong. Each factory follows the device plug-in contract
(``--device tests.plugins.faulty_glu:swiglu_halves_swapped``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from device.base import RunResult
from device.golden_device import GoldenDevice
from golden import dtypes, glu
from golden.case import OpCase
from tests.plugins import FaultyDevice, planted


def _halves_swapped(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """The activation applied to the gate half and multiplied by the other: the fused form with
    ``swapped`` read the wrong way round, the split form with a and b exchanged."""
    if case.form == glu.SPLIT:
        result = golden.run(case, [inputs[1], inputs[0]])
    else:
        flipped = tuple((k, not v) if k == "swapped" else (k, v) for k, v in case.params)
        result = golden.run(replace(case, params=flipped), inputs)
    return replace(result, inputs_after=[np.array(x) for x in inputs])


def _split_act_on_b(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """Split form only: the unary op is applied to src1 and the product taken with src0."""
    if case.form != glu.SPLIT:
        return golden.run(case, inputs)
    return _halves_swapped(golden, case, inputs)


def _erf_as_tanh(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """GEGLU_ERF computed with the tanh GELU: the GELU kernel's ``approximate`` flag inverted."""
    x, g = glu.halves(inputs, case)
    with np.errstate(over="ignore", invalid="ignore"):
        out = glu.gelu(x) * g
    return RunResult(dtypes.round_to(out, case.dst), [np.array(v) for v in inputs])


@planted("swiglu", "SWIGLU with its halves swapped: SiLU applied to the gate, times the activation input")
def swiglu_halves_swapped(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("swiglu_halves_swapped", "SWIGLU", _halves_swapped)


@planted("geglu and f16_f16", "ggml_glu_split with a and b exchanged in the backend's gated fallback "
                             "(GELU of the gate tensor, times the input tensor)")
def geglu_split_act_on_b(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("geglu_split_act_on_b", "GEGLU", _split_act_on_b)


@planted("geglu_erf", "GEGLU_ERF evaluated with the tanh GELU (the 'approximate' flag of the fused GeGLU "
                      "kernel read the other way round)")
def geglu_erf_as_tanh(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("geglu_erf_as_tanh", "GEGLU_ERF", _erf_as_tanh)

"""Quantizing copies that are wrong the way a backend author could ship them."""

from __future__ import annotations

from typing import Any

import numpy as np

from device.base import RunResult
from device.golden_device import GoldenDevice
from golden import catalogue, quant
from golden.case import OpCase
from tests.plugins import FaultyDevice, planted


def _q8_0_scale_over_128(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """Q8_0 with d = amax/128 (the quants then use 128/amax): every value lands within one step."""
    if case.dst != "q8_0" or case.inputs[0].dtype == "q8_0":
        return golden.run(case, inputs)
    exact = catalogue.evaluate(case, catalogue.golden_inputs(case, inputs))
    blocks = np.asarray(exact, np.float32).reshape(-1, 32).astype(np.float64)
    amax = np.abs(blocks).max(axis=1, keepdims=True)
    d = amax / 128.0
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.clip(np.rint(np.where(d > 0, blocks / d, 0.0)), -127, 127).astype(np.int8)
    out = np.empty((blocks.shape[0], 34), np.uint8)
    out[:, :2] = np.float16(d[:, 0]).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return RunResult(out.reshape(-1), [np.array(x) for x in inputs])


def _q4_0_truncating(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """Q4_0 whose quants truncate x/d + 8 instead of rounding it (a missing +0.5)."""
    if case.dst != "q4_0" or case.inputs[0].dtype == "q4_0":
        return golden.run(case, inputs)
    exact = catalogue.evaluate(case, catalogue.golden_inputs(case, inputs))
    blocks = quant.quantize(np.asarray(exact, np.float32).reshape(-1, 32), "q4_0").reshape(-1, 18)
    d = blocks[:, :2].copy().view(np.float16).astype(np.float64)
    x = np.asarray(exact, np.float32).reshape(-1, 32).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.clip(np.floor(np.where(d != 0, x / d, 0.0) + 8.0), 0, 15).astype(np.uint8)
    blocks[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return RunResult(blocks.reshape(-1), [np.array(v) for v in inputs])


@planted("quantized and cpy and q8_0", "a Q8_0 quantizer with the scale amax/128 (one step looser than ggml's)")
def q8_0_scale_over_128(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("q8_0_scale_over_128", "CPY", _q8_0_scale_over_128)


@planted("quantized and cpy and q4_0", "a Q4_0 quantizer that truncates instead of rounding")
def q4_0_truncating(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("q4_0_truncating", "CPY", _q4_0_truncating)

"""Deliberately wrong devices for the harness's own tests: the golden oracle with one numerics
op distorted the way real CANN bugs distorted it. Each factory follows the device plug-in
contract (``--device tests.plugins.faulty_numerics:rope_double_attn``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from device.base import RunResult
from device.golden_device import GoldenDevice
from golden import conv, dtypes
from golden.case import OpCase
from tests.plugins import FaultyDevice, planted


def _with_params(case: OpCase, **changes: Any) -> OpCase:
    return replace(case, params=tuple((k, changes.get(k, v)) for k, v in case.params))


def _rope_double_attn(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """B6: the sin/cos cache is scaled by attn_factor twice (NMSE (af − 1)² on the rotated part)."""
    af = float(case.param("attn_factor"))
    return golden.run(_with_params(case, attn_factor=float(np.float32(af * af))), inputs)


def _softmax_ignore_max_bias(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """B10-like: the ALiBi slopes are dropped (every slope 1)."""
    return golden.run(_with_params(case, max_bias=0.0), inputs)


def _pool_avg_exclude_pad(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """AVG pooling divides by the taps inside the image (count_include_pad = False) instead of k0·k1."""
    result = golden.run(case, inputs)
    if case.param("op") != conv.POOL_AVG:
        return result
    p = case.params_dict
    share = conv.pool_2d(np.ones(np.shape(inputs[0])), conv.POOL_AVG, p["k0"], p["k1"], p["s0"], p["s1"],
                         p["p0"], p["p1"])  # fraction of each window inside the image
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(share > 0, np.asarray(result.output, np.float64) / share, 0.0)
    return replace(result, output=dtypes.round_to(out, case.dst))


def _pool_max_zero_pad(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """MAX pooling over a zero-padded image: windows reaching outside give at least 0 (never −FLT_MAX)."""
    result = golden.run(case, inputs)
    if case.param("op") != conv.POOL_MAX:
        return result
    p = case.params_dict
    share = conv.pool_2d(np.ones(np.shape(inputs[0])), conv.POOL_AVG, p["k0"], p["k1"], p["s0"], p["s1"],
                         p["p0"], p["p1"])
    out = np.asarray(result.output, np.float64)
    return replace(result, output=np.where(share < 1.0, np.maximum(out, 0.0), out))


@planted("rope", "B6: ggml-cann scaled the sin/cos cache by attn_factor twice")
def rope_double_attn(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("rope_double_attn", "ROPE", _rope_double_attn)


@planted("soft_max", "B10: ALiBi slopes dropped")
def softmax_ignore_max_bias(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("softmax_ignore_max_bias", "SOFT_MAX", _softmax_ignore_max_bias)


@planted("pool_2d", "B5: AVG pooling excludes the padding from the divisor")
def pool_avg_exclude_pad(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("pool_avg_exclude_pad", "POOL_2D", _pool_avg_exclude_pad)


@planted("pool_2d", "MAX pooling pads with 0 instead of -FLT_MAX")
def pool_max_zero_pad(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("pool_max_zero_pad", "POOL_2D", _pool_max_zero_pad)

"""Devices that present themselves as ggml's CPU 0.20.2 (so its known bugs apply) for the harness's
tests of known-bug matching: one computes GELU through an F16 table, as the CPU does; one computes
GELU as GELU_QUICK (x·σ(1.702x)), which no documented deviation explains (erf-GELU would not do:
it is within the CPU table's own error)."""

from __future__ import annotations

from typing import Any

import numpy as np

from device.base import RunResult
from device.golden_device import GoldenDevice
from golden import catalogue, dtypes
from golden.case import OpCase


class CpuLike(GoldenDevice):
    def __init__(self, gelu: str) -> None:
        self.gelu = gelu

    def info(self) -> dict[str, Any]:
        return {"spec": "cpu_like", "name": "CPU", "ggml_version": "0.20.2", "backend": "cpu-like test double"}

    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        if case.op != "GELU" or case.inputs[0].dtype != "f32":
            return super().run(case, inputs)
        x = np.asarray(inputs[0], np.float64)
        if self.gelu == "f16_table":
            exact = catalogue.evaluate(case, [dtypes.round_to(x, "f16")])
            y = dtypes.round_to(exact, "f16")
        else:
            y = x / (1 + np.exp(-1.702 * x))
        return RunResult(np.asarray(y, np.float32), [np.array(v) for v in inputs])


def f16_table(options: dict[str, Any]) -> CpuLike:
    return CpuLike("f16_table")


def quick_gelu(options: dict[str, Any]) -> CpuLike:
    return CpuLike("quick")

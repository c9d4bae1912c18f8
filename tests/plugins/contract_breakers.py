"""Plug-ins that break the device contract in the ways a vendor's first attempt does.

Each must end as a record (an ERROR saying what is wrong) or as one line naming the device, never
as a lost record, a pytest internal error or a pass. ``tests/test_contract.py`` drives them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from device.base import RunResult
from device.ggml.device import GgmlDevice
from device.golden_device import GoldenDevice
from golden.case import OpCase


class ReturnsNone(GoldenDevice):
    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        return None  # type: ignore[return-value]


class ReturnsList(GoldenDevice):
    """A RunResult whose output is a plain list."""

    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        result = super().run(case, inputs)
        return replace(result, output=result.output.tolist())


class ReturnsFloat64(GoldenDevice):
    """Right values, but float64 for every destination (the exact values, unrounded)."""

    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        result = super().run(case, inputs)
        return replace(result, output=np.asarray(result.output, dtype=np.float64))


class ExtraHolds(GoldenDevice):
    """Right results, with ``extra`` holding ``value`` under the key ``"odd"``."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        result = super().run(case, inputs)
        return replace(result, extra={"odd": self.value})


class InfoIs(GoldenDevice):
    def __init__(self, info: Any) -> None:
        self._info = info

    def info(self) -> Any:
        return self._info


class ZeroAdd(GgmlDevice):
    """ggml's CPU device, except that its ADD returns zeros: an override of run() must be what runs."""

    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        result = super().run(case, inputs)
        if case.op == "ADD":
            return replace(result, output=np.zeros_like(result.output))
        return result


def returns_none(options: dict[str, Any]) -> ReturnsNone:
    return ReturnsNone()


def returns_list(options: dict[str, Any]) -> ReturnsList:
    return ReturnsList()


def returns_float64(options: dict[str, Any]) -> ReturnsFloat64:
    return ReturnsFloat64()


def extra_set(options: dict[str, Any]) -> ExtraHolds:
    return ExtraHolds({3, 1, 2})


def extra_bytes(options: dict[str, Any]) -> ExtraHolds:
    return ExtraHolds(b"\x00\xff")


def extra_small_array(options: dict[str, Any]) -> ExtraHolds:
    return ExtraHolds(np.arange(3, dtype=np.float32))


def extra_big_array(options: dict[str, Any]) -> ExtraHolds:
    return ExtraHolds(np.zeros(100_000))


def extra_object(options: dict[str, Any]) -> ExtraHolds:
    return ExtraHolds(object())


def extra_lambda(options: dict[str, Any]) -> ExtraHolds:
    return ExtraHolds(lambda: None)  # cannot even be pickled back to the harness


def info_list(options: dict[str, Any]) -> InfoIs:
    return InfoIs(["not", "a", "dict"])


def info_object(options: dict[str, Any]) -> InfoIs:
    return InfoIs({"name": "odd", "handle": object()})


def info_set(options: dict[str, Any]) -> InfoIs:
    return InfoIs({"name": "odd", "features": {"b", "a"}, "serial": b"\x01\x02"})


def factory_raises(options: dict[str, Any]) -> GoldenDevice:
    raise RuntimeError("no such board")


def zero_add(options: dict[str, Any]) -> ZeroAdd:
    return ZeroAdd("CPU", options.get("ggml_lib"), threads=int(options.get("threads") or 1))


class Slow(GoldenDevice):
    """Right results, a quarter of a second each: a run that is still going when it is interrupted."""

    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        import time

        time.sleep(0.25)
        return super().run(case, inputs)


def slow(options: dict[str, Any]) -> Slow:
    return Slow()


class Leaks(GoldenDevice):
    """Right results, but keeps 32 MiB (touched, so resident) from every run: a leak nothing fails on."""

    def __init__(self) -> None:
        self.kept: list[np.ndarray] = []

    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        self.kept.append(np.ones(32 * 2**20, dtype=np.uint8))
        return super().run(case, inputs)


def leaks(options: dict[str, Any]) -> Leaks:
    return Leaks()

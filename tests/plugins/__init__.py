"""Deliberately wrong devices (faulty plug-ins) that stand for real backend bugs.

Every fault the conformance suite must catch is registered with :func:`planted` on its factory:
``tests/test_planted_faults.py`` runs the ci profile of the selected tests on each one and fails if
any planted fault passes. :class:`FaultyDevice` is the usual shape of one: the golden device with
one op computed wrongly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from device.base import RunResult, as_output
from device.golden_device import GoldenDevice
from golden import dtypes
from golden.case import OpCase

Distortion = Callable[[GoldenDevice, OpCase, list[np.ndarray]], RunResult]


@dataclass(frozen=True)
class PlantedFault:
    spec: str  # the --device spec: "tests.plugins.faulty_glu:swiglu_swapped"
    select: str  # pytest -k expression of the conformance tests that must catch it
    bug: str  # the real bug it stands for


PLANTED: list[PlantedFault] = []


def planted(select: str, bug: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a factory as a planted fault that the tests selected by ``select`` must catch."""

    def register(factory: Callable[..., Any]) -> Callable[..., Any]:
        PLANTED.append(PlantedFault(f"{factory.__module__}:{factory.__name__}", select, bug))
        return factory

    return register


class FaultyDevice:
    """The golden device, except that ``op`` goes through ``distortion``."""

    def __init__(self, fault: str, op: str, distortion: Distortion) -> None:
        self.name = f"faulty:{fault}"
        self.op = op
        self._golden = GoldenDevice()
        self._distortion = distortion

    def info(self) -> dict[str, Any]:
        return {"spec": self.name, "name": self.name, "description": f"golden with a planted {self.op} fault",
                "backend": "faulty"}

    def supports(self, case: OpCase) -> bool | None:
        return self._golden.supports(case)

    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        if case.op != self.op:
            return self._golden.run(case, inputs)
        result = self._distortion(self._golden, case, inputs)
        if not dtypes.is_quantized(case.dst) and result.output.dtype == np.float64:
            # a distortion may compute in float64: round it to the destination as a device would
            result = replace(result, output=as_output(result.output, case.dst))
        return result

    def close(self) -> None:
        self._golden.close()


def all_planted() -> list[PlantedFault]:
    """Import every plug-in module here, then the registry."""
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
    return list(PLANTED)

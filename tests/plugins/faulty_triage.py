"""A device with three planted faults whose boundaries are known exactly, for ``conform triage``'s test:

* ADD: src0 as a view at a byte offset that is not a multiple of 16 (a misaligned binding);
* SILU: rows longer than 1024 elements (ne0 > 1024: a work-group size limit);
* CONV_TRANSPOSE_1D: stride s0 = 3 only (one specialised kernel).

Each gives the exact result plus 1 in every element, a wrong answer no bound accepts.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from device.base import RunResult, as_output
from device.golden_device import GoldenDevice
from golden.case import OpCase
from golden.geometry import storage_of


def planted_fault(case: OpCase) -> bool:
    if case.op == "ADD":
        return storage_of(case.inputs[0]).offset_bytes % 16 != 0
    if case.op == "SILU":
        return case.inputs[0].ne[0] > 1024
    if case.op == "CONV_TRANSPOSE_1D":
        return case.param("s0") == 3
    return False


class Boundaries(GoldenDevice):
    name = "tests.plugins.faulty_triage:boundaries"

    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        result = super().run(case, inputs)
        if not planted_fault(case):
            return result
        wrong = np.asarray(result.output, np.float64) + 1.0
        return dataclasses.replace(result, output=as_output(wrong, case.dst))


def boundaries(options: dict[str, Any]) -> Boundaries:
    return Boundaries()

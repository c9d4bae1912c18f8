"""A device with three planted faults whose boundaries are known exactly, for ``conform triage``'s test:

* ADD: src0 as a view at a byte offset that is not a multiple of 16 (a misaligned binding);
* SILU: rows longer than 1024 elements (ne0 > 1024: a work-group size limit);
* CONV_TRANSPOSE_1D: stride s0 = 3 only (one specialised kernel);
* SQR: any src0 value above 0.99 in magnitude (a value fault, not a size one: a table that ends at 0.99).
  From one data seed a bigger tensor draws more values, so a size looks like a boundary; fresh data
  on both sides of it shows it is not (SILU's is a real size boundary: fresh data keeps it).

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


def planted_fault(case: OpCase, inputs: list[np.ndarray]) -> bool:
    if case.op == "ADD":
        return storage_of(case.inputs[0]).offset_bytes % 16 != 0
    if case.op == "SILU":
        return case.inputs[0].ne[0] > 1024
    if case.op == "CONV_TRANSPOSE_1D":
        return case.param("s0") == 3
    if case.op == "SQR":
        return bool(np.any(np.abs(np.asarray(inputs[0], np.float64)) > 0.99))
    return False


class Boundaries(GoldenDevice):
    name = "tests.plugins.faulty_triage:boundaries"

    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        result = super().run(case, inputs)
        if not planted_fault(case, inputs):
            return result
        wrong = np.asarray(result.output, np.float64) + 1.0
        return dataclasses.replace(result, output=as_output(wrong, case.dst))


def boundaries(options: dict[str, Any]) -> Boundaries:
    return Boundaries()

"""A correct device (the golden) that writes the inputs of each case it runs to ``$CONFORM_TEST_INPUTS_DIR``,
so a test can see exactly which tensors a replay handed the device (not a planted fault)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from device.base import RunResult
from device.golden_device import GoldenDevice
from golden.case import OpCase


class RecordsInputs(GoldenDevice):
    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        folder = Path(os.environ["CONFORM_TEST_INPUTS_DIR"])
        folder.mkdir(parents=True, exist_ok=True)
        np.savez(folder / f"case{len(list(folder.iterdir())):03d}.npz",
                 **{f"input{i}": np.asarray(x) for i, x in enumerate(inputs)})
        return super().run(case, inputs)


def records_inputs(options: dict[str, Any]) -> RecordsInputs:
    return RecordsInputs()

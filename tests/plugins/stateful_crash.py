"""A device whose crash needs history: it aborts on the third run after a given op.

Any single case passes on a fresh device process; only a sequence with the trigger op and then
two more cases before the third crashes it, the way a backend that corrupts its own state in one
op and trips over it a few ops later does. The suite's crash records carry that history, and
``conform repro --history`` replays and shrinks it (``tests/test_crash_history.py``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from device.base import RunResult
from device.golden_device import GoldenDevice
from golden.case import OpCase

CRASH_ON_CALL = 3  # the run that aborts, counted from the one after the trigger op


class CrashesThirdCallAfter(GoldenDevice):
    """Correct results, but the third ``run`` after a ``trigger`` case aborts the process."""

    def __init__(self, trigger: str) -> None:
        self.trigger = trigger
        self.name = f"tests.plugins.stateful_crash:crashes_third_call_after_{trigger.lower()}"
        self.calls_since_trigger: int | None = None  # None until the trigger op has run

    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        if self.calls_since_trigger is not None:
            self.calls_since_trigger += 1
            if self.calls_since_trigger == CRASH_ON_CALL:
                sys.stderr.write(f"stateful_crash: state left by {self.trigger} is corrupt at {case.op}\n")
                sys.stderr.flush()
                os.abort()
        if case.op == self.trigger:
            self.calls_since_trigger = 0
        return super().run(case, inputs)


def crashes_third_call_after_scale(options: dict[str, Any]) -> CrashesThirdCallAfter:
    return CrashesThirdCallAfter("SCALE")


class CrashesOn(GoldenDevice):
    """Correct results, except that every ``run`` of the ``trigger`` op aborts, with or without history."""

    def __init__(self, trigger: str) -> None:
        self.trigger = trigger
        self.name = f"tests.plugins.stateful_crash:crashes_on_{trigger.lower()}"

    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        if case.op == self.trigger:
            os.abort()
        return super().run(case, inputs)


def crashes_on_hardsigmoid(options: dict[str, Any]) -> CrashesOn:
    return CrashesOn("HARDSIGMOID")

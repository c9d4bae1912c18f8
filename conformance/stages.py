"""Where a conformance run's time goes: a clock the harness laps at each stage of a case.

Off by default (``Harness.clock`` is None, so each stage costs one attribute test);
``benchmarks/bench_throughput.py`` attaches a :class:`StageClock` and prints the shares. A lap
charges the time since the previous lap to the named stage, so the stages add up to the wall time
between the first and the last lap.
"""

from __future__ import annotations

import time
from enum import Enum


class Stage(Enum):
    STARTUP = "start-up"  # imports, collection, opening the device: before the first test body
    GENERATION = "generation"  # Hypothesis drawing the case (and its engine's bookkeeping between cases)
    INPUTS = "inputs"  # the case's arrays from its data seed
    GOLDEN = "golden"  # the exact float64 result
    DEVICE = "device"  # the device round trip (through the worker process, or in process)
    VERDICT = "verdict"  # comparing, input-integrity and raw-memory checks, known bugs
    RECORD = "record"  # the results record: building, writing, artefacts
    PYTEST = "pytest"  # outside the test bodies: fixtures, reporting, between tests


class StageClock:
    """Seconds per :class:`Stage`, and the number of cases seen; with ``keep_laps`` every lap too."""

    def __init__(self, keep_laps: bool = False) -> None:
        self.seconds: dict[Stage, float] = dict.fromkeys(Stage, 0.0)
        self.cases = 0
        self.laps: dict[Stage, list[float]] | None = {s: [] for s in Stage} if keep_laps else None
        self._mark = time.perf_counter()

    def lap(self, stage: Stage) -> None:
        """Charge the time since the last lap to ``stage``."""
        now = time.perf_counter()
        self.seconds[stage] += now - self._mark
        if self.laps is not None:
            self.laps[stage].append(now - self._mark)
        self._mark = now

    @property
    def total(self) -> float:
        return sum(self.seconds.values())

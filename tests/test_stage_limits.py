"""The case timeout covers the harness's golden and verdict stages too: a stage that runs out of
time or memory leaves an ERROR record naming the stage, and the next case runs as usual."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from conformance.harness import Harness
from conformance.limits import StageLimitExceeded, stage_limit
from golden import catalogue
from golden.case import OpCase, TensorSpec
from results.outcome import Outcome

CASE = OpCase("ABS", (TensorSpec("f32", (8, 2, 1, 1)),), data_seed=1)


def _slow(seconds: float) -> Any:
    def run(*args: object, **kwargs: object) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:  # Python work between bytecodes, as a blocked golden does
            time.sleep(0.01)

    return run


def test_stage_limit_interrupts_and_restores() -> None:
    with pytest.raises(StageLimitExceeded, match="golden ran past the case timeout of 0.2 s"):
        with stage_limit(0.2, "golden"):
            _slow(5.0)()
    with stage_limit(5.0, "golden"):  # a stage that finishes in time is untouched, and no alarm is left
        pass
    time.sleep(0.3)


def test_a_golden_that_runs_out_of_time_is_recorded_and_the_run_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    harness = Harness("golden", {}, timeout=0.3, keep_artefacts=False)
    try:
        exact = catalogue.evaluate
        monkeypatch.setattr(catalogue, "evaluate", _slow(5.0))
        start = time.monotonic()
        record = harness.evaluate(CASE)
        assert time.monotonic() - start < 3.0
        assert record.outcome is Outcome.ERROR and record.failing
        assert record.extra == {"ran_out": {"stage": "golden", "resource": "time"}}
        assert "ran out of time in the golden stage" in record.message
        monkeypatch.setattr(catalogue, "evaluate", exact)
        assert harness.evaluate(CASE).outcome is Outcome.PASS
    finally:
        harness.close()


@pytest.mark.parametrize(("fault", "resource"), [(_slow(5.0), "time"), (None, "memory")])
def test_a_verdict_that_runs_out_is_recorded(monkeypatch: pytest.MonkeyPatch, fault: Any, resource: str) -> None:
    def no_memory(*args: object, **kwargs: object) -> None:
        raise MemoryError("Unable to allocate 1.50 GiB for an array with shape (1, 24, 512, 16384)")

    harness = Harness("golden", {}, timeout=0.3, keep_artefacts=False)
    try:
        monkeypatch.setattr(harness, "_judge", fault or no_memory)
        record = harness.evaluate(CASE)
        assert record.outcome is Outcome.ERROR
        assert record.extra == {"ran_out": {"stage": "verdict", "resource": resource}}
        assert f"ran out of {resource} in the verdict stage" in record.message
        monkeypatch.undo()
        again = harness.evaluate(CASE)
        assert again.outcome is Outcome.PASS and np.isfinite(again.metrics["error_ratio"])  # type: ignore[index]
    finally:
        harness.close()

"""The stateful sequence test must catch a device that replays a graph cached by shape, and report
the failing case with the sequence that led to it and a repro that replays that sequence."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.errors import Flaky, FlakyFailure

from conformance.harness import CaseFailed, Harness
from conformance.plugin import SHRINK_NO_EXPLAIN
from conformance.test_stateful import SequenceFailed, run_sequences, same_shape_machine
from golden.case import OpCase, TensorSpec

ROOT = Path(__file__).resolve().parent.parent
CACHING = "tests.plugins.faulty:caches_by_shape"
# no shrink phase here: shrinking a 12-step sequence replays it hundreds of times (a minute on this
# machine); finding the failure and reporting its sequence is what these tests check
SEQUENCE = settings(max_examples=60, stateful_step_count=12, database=None, derandomize=True, deadline=None,
                    report_multiple_bugs=False, print_blob=False, suppress_health_check=list(HealthCheck),
                    phases=[Phase.explicit, Phase.reuse, Phase.generate])


@pytest.fixture
def caching_harness():
    h = Harness(CACHING, {}, timeout=60)
    yield h
    h.close()


def scale(s: float, seed: int) -> OpCase:
    return OpCase("SCALE", (TensorSpec("f32", (64, 3, 1, 1)),), params=(("s", s), ("bias", 0.0)), data_seed=seed)


def test_each_case_alone_passes_on_the_caching_device(caching_harness: Harness) -> None:
    """One case per shape is right: only a repeated shape with other params shows the bug."""
    assert caching_harness.evaluate(scale(2.0, 1)).outcome == "pass"
    assert caching_harness.evaluate(scale(2.0, 2)).outcome == "pass"  # same params: the cache is right
    stale = caching_harness.evaluate(scale(3.0, 3))
    assert stale.outcome == "fail"  # computed with s=2


def test_state_machine_names_the_failing_case_its_sequence_and_a_replay(caching_harness: Harness,
                                                                           tmp_path: Path) -> None:
    with pytest.raises(SequenceFailed) as failure:
        run_sequences(same_shape_machine(caching_harness), SEQUENCE)
    message = str(failure.value)
    headline, *rest = message.splitlines()
    assert headline.startswith("FAIL ") and f"on {CACHING}" in headline
    assert any(op in headline for op in ("SCALE(", "CLAMP(", "LEAKY_RELU(")), headline
    cases = failure.value.cases
    assert len(cases) >= 2 and headline.split()[1] == cases[-1]  # the stale cache needs an earlier case
    for i, case_id in enumerate(cases, 1):
        assert f"    {i}. {case_id}" in message
    replay = next(line for line in rest if "reproduce the sequence:" in line).split(": ", 1)[1]
    assert shlex.split(replay)[:5] == ["conform", "repro", "--device", CACHING, "--sequence"]
    assert shlex.split(replay)[5:] == list(cases)
    # the line replays the sequence on a fresh device process, and the last case fails again
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "conformance.cli", *shlex.split(replay)[1:], "--out", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"FAIL at case {len(cases)}/{len(cases)}: the sequence reproduces it" in done.stdout, done.stdout


def test_state_machine_shrinks_a_state_bug_without_flakiness(caching_harness: Harness) -> None:
    """Each sequence starts on a freshly opened device, so the failure replays and Hypothesis
    shrinks it (a few steps at most), with no FlakyFailure in between."""
    with pytest.raises(SequenceFailed) as failure:
        run_sequences(same_shape_machine(caching_harness),
                      settings(SEQUENCE, stateful_step_count=4, phases=SHRINK_NO_EXPLAIN))
    assert not isinstance(failure.value.__cause__, FlakyFailure)
    assert 2 <= len(failure.value.cases) <= 4


class FailsOnceHarness:
    """Fails the 5th case it is given, whatever the sequence: a state bug that no replay reproduces,
    which Hypothesis reports as FlakyFailure."""

    def __init__(self) -> None:
        self.calls = 0

    def reopen_device(self) -> None:
        pass

    def sequence_repro(self, cases: tuple[str, ...]) -> str:
        return "conform repro --device fake --sequence " + " ".join(shlex.quote(c) for c in cases)

    def check(self, case: OpCase) -> None:
        self.calls += 1
        if self.calls == 5:
            raise CaseFailed(f"FAIL {case.case_id} on fake: stale state\n  reproduce: conform repro x")


def test_flakiness_is_not_the_headline() -> None:
    with pytest.raises(CaseFailed) as failure:
        run_sequences(same_shape_machine(FailsOnceHarness()), settings(SEQUENCE, phases=list(Phase)))
    assert isinstance(failure.value, SequenceFailed), type(failure.value)
    assert isinstance(failure.value.__cause__, Flaky)  # Hypothesis' verdict stays, as the cause
    assert str(failure.value).startswith("FAIL ") and "stale state" in str(failure.value)
    assert "reproduce the sequence: conform repro --device fake --sequence" in str(failure.value)


def test_state_machine_passes_on_a_correct_device() -> None:
    h = Harness("golden", {}, timeout=60)
    try:
        run_sequences(same_shape_machine(h), settings(SEQUENCE, max_examples=15))
    finally:
        h.close()

"""The circuit breaker: a hanging or crashing op costs a bounded number of timeouts or crashes per
op × signature, not one per example Hypothesis draws and shrinks; the skipped examples are counted."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.harness import BREAKER_EXTRA_ATTEMPTS, BREAKER_EXTRA_DEATHS, Breaker, CaseFailed
from golden.case import OpCase, TensorSpec
from results.outcome import Outcome
from results.record import CaseDescription, CaseRecord

ROOT = Path(__file__).resolve().parent.parent


def _record(case_id: str, outcome: Outcome) -> CaseRecord:
    return CaseRecord(case_id=case_id, device="d", op="SILU", outcome=outcome,
                      description=CaseDescription({}, {}, {}, {}), distribution="dense", data_seed=0,
                      supported=True, duration_s=0.0, repro="", tolerance={})


def test_the_breaker_opens_after_its_budget() -> None:
    breaker = Breaker("t")
    breaker.saw(_record("A", Outcome.PASS), None)
    assert not breaker.tripped and not breaker.open
    breaker.saw(_record("B", Outcome.TIMEOUT), "TIMEOUT B")
    assert breaker.tripped and breaker.tripped_by == "B"
    for i in range(BREAKER_EXTRA_DEATHS[Outcome.TIMEOUT] - 1):
        breaker.saw(_record(f"C{i}", Outcome.TIMEOUT), "TIMEOUT")
        assert not breaker.open
    breaker.saw(_record("D", Outcome.PASS), None)
    assert not breaker.open  # passing shrink attempts are cheap: only the attempt budget counts them
    breaker.saw(_record("E", Outcome.TIMEOUT), "TIMEOUT E")
    assert breaker.open and breaker.failures["B"] == "TIMEOUT B"


def test_a_known_bugs_crash_does_not_trip_it() -> None:
    """Known bugs crash on some layouts by design (device/ggml/known_bugs_cpu.py); the other examples of
    the test must still run."""
    from results.record import ExpectedFailure

    breaker = Breaker("t")
    for i in range(10):
        known = _record(f"K{i}", Outcome.CRASH)
        known.expected = ExpectedFailure("cpu-sqr-row-stride", "asserts contiguous rows", "SQR(...)", ("crash",))
        breaker.saw(known, None)
    assert not breaker.tripped and not breaker.open


def test_many_cheap_attempts_also_open_it() -> None:
    breaker = Breaker("t")
    breaker.saw(_record("B", Outcome.CRASH), "CRASH B")
    for i in range(BREAKER_EXTRA_ATTEMPTS):
        assert not breaker.open
        breaker.saw(_record(f"P{i}", Outcome.PASS), None)
    assert breaker.open


def test_known_crashes_do_not_trip_it() -> None:
    """A crash a known bug explains fails no test: the breaker stays shut, and Hypothesis keeps drawing
    valid examples (an open breaker rejects every later one: a crash-heavy known bug would otherwise
    spend its test's time on thousands of rejected examples)."""
    breaker = Breaker("t")
    for i in range(3 * BREAKER_EXTRA_DEATHS[Outcome.CRASH]):
        breaker.saw(_record(f"K{i}", Outcome.CRASH), None)  # failure None: expected
    assert not breaker.tripped and not breaker.open
    breaker.saw(_record("T", Outcome.TIMEOUT), None)  # a known hang still costs its timeout
    assert breaker.tripped


def _suite(tmp_path: Path, device: str, op: str, *extra: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    results = tmp_path / "r.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "--op", op,
         "--device", device, "--results", str(results), "--conform-profile", "dev",
         "--hypothesis-db", str(tmp_path / "db"), *extra],  # a fresh example database: nothing replayed
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )
    return proc, [json.loads(line) for line in results.read_text().splitlines()]


def test_a_hanging_op_costs_about_one_timeout_per_signature(tmp_path: Path) -> None:
    proc, lines = _suite(tmp_path, "tests.plugins.faulty:hangs_on_silu", "SILU", "--case-timeout", "2")
    assert proc.returncode == 1
    timeouts = Counter(r["test_id"] for r in lines if r["type"] == "case" and r["outcome"] == "timeout")
    assert timeouts and all(n <= 1 + BREAKER_EXTRA_DEATHS[Outcome.TIMEOUT] for n in timeouts.values()), timeouts
    footer = lines[-1]
    breakers = {b["test_id"]: b for b in footer["breakers"]}
    assert set(breakers) == set(timeouts)
    assert all(b["outcome"] == "timeout" and b["case_id"].startswith("SILU(") for b in breakers.values())
    assert sum(b["skipped"] for b in breakers.values()) > 0  # Hypothesis drew more; they cost nothing
    # the headline is the timeout itself, not Hypothesis' flakiness report
    assert "FlakyFailure" not in proc.stdout and "TIMEOUT SILU(" in proc.stdout
    assert "circuit breaker stopped" in proc.stdout
    print(f"{sum(timeouts.values())} timeouts over {len(timeouts)} tests; "
          f"{sum(b['skipped'] for b in breakers.values())} examples skipped")


def test_a_crashing_op_costs_a_bounded_number_of_crashes(tmp_path: Path) -> None:
    proc, lines = _suite(tmp_path, "tests.plugins.faulty:aborts_on_odd_rows", "RELU")
    assert proc.returncode == 1
    crashes = Counter(r["test_id"] for r in lines if r["type"] == "case" and r["outcome"] == "crash")
    assert crashes and all(n <= 1 + BREAKER_EXTRA_DEATHS[Outcome.CRASH] for n in crashes.values()), crashes
    assert "FlakyFailure" not in proc.stdout and "CRASH RELU(" in proc.stdout


def test_known_bug_crashes_leave_the_breaker_closed(tmp_path: Path) -> None:
    """ggml 0.20.2's CPU SQR aborts on strided rows (a known bug): those crashes are expected, and the
    test keeps drawing every other layout."""
    proc, lines = _suite(tmp_path, "ggml:CPU", "SQR", "--conform-profile", "ci")
    assert proc.returncode == 0, proc.stdout[-2000:]
    cases = [r for r in lines if r["type"] == "case"]
    known = [r for r in cases if r["outcome"] == "crash" and r.get("expected")]
    assert known, "the ci draw no longer reaches the known crash: pick another known bug"
    assert lines[-1]["breakers"] == []
    assert sum(r["outcome"] == "pass" for r in cases) > len(known)


@pytest.mark.filterwarnings("ignore:Using `reject` outside a property-based test")  # the rejection is the point
def test_an_open_breaker_answers_a_replayed_case_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the breaker is open, Hypothesis may still replay an example that ran before (a passing one
    while shrinking, the failing one for its report): it gets its earlier answer without the device. A
    rejection there would read to Hypothesis as a flaky test and hide the real failure."""
    from hypothesis.errors import UnsatisfiedAssumption

    from conformance.harness import CaseFailed, Harness

    monkeypatch.setattr("conformance.harness._in_hypothesis_test", lambda: True)
    harness = Harness("golden", {}, keep_artefacts=False)
    try:
        harness.current_test_id = "t"
        breaker = harness._breaker()
        assert breaker is not None
        breaker.saw(_record("A", Outcome.PASS), None)
        for i in range(BREAKER_EXTRA_DEATHS[Outcome.CRASH] + 1):
            breaker.saw(_record(f"C{i}", Outcome.CRASH), f"CRASH C{i}")
        assert breaker.open

        def device_runs() -> CaseRecord:
            raise AssertionError("an open breaker ran the device")

        assert harness._checked("A", device_runs) is None
        with pytest.raises(CaseFailed, match="CRASH C0"):
            harness._checked("C0", device_runs)
        with pytest.raises(UnsatisfiedAssumption):  # a new example: rejected, no device time
            harness._checked("new", device_runs)
    finally:
        harness.close()


def _draw_same_case(harness: Any, case: OpCase, once: bool, examples: int = 4) -> list[Any]:
    """Run ``case`` in every example of a Hypothesis test (a dummy draw makes the examples differ)."""
    answers: list[Any] = []

    @settings(max_examples=examples, database=None, derandomize=True, deadline=None)
    @given(st.integers(0, examples - 1))
    def drawn(_: int) -> None:
        try:
            answers.append(harness.check(case, once=once))
        except CaseFailed:
            answers.append("failed")

    drawn()
    return answers


def test_a_passed_case_is_not_run_again_in_its_test() -> None:
    from conformance.harness import Harness

    harness = Harness("golden", {}, timeout=60)
    harness.current_test_id = "test_unary[relu-f32]"
    case = OpCase("RELU", (TensorSpec("f32", (8, 1, 1, 1)),), data_seed=1)
    try:
        answers = _draw_same_case(harness, case, once=True)
        assert answers[0] is not None and answers[1:] == [None] * (len(answers) - 1)
        assert harness.counts == {"pass": 1}  # one device run, one record
        assert harness.breakers["test_unary[relu-f32]"].repeats == len(answers) - 1
        # without once (the stateful sequences) every draw runs
        again = _draw_same_case(harness, case, once=False)
        assert all(a is not None for a in again) and harness.counts == {"pass": 1 + len(again)}
    finally:
        harness.close()


def test_a_failing_case_is_run_again() -> None:
    """A failure is rerun when drawn again, so one that does not repeat still reads as flaky."""
    from conformance.harness import Harness

    harness = Harness("tests.plugins.faulty:erf_gelu_quick", {}, timeout=60)
    harness.current_test_id = "test_unary[gelu_quick-f32]"
    case = OpCase("GELU_QUICK", (TensorSpec("f32", (256, 4, 1, 1)),), dst="f32", data_seed=1,
                  distribution="dense")
    try:
        answers = _draw_same_case(harness, case, once=True, examples=3)
        assert answers and set(answers) == {"failed"}
        assert harness.counts == {"fail": len(answers)}
        assert harness.breakers["test_unary[gelu_quick-f32]"].repeats == 0
    finally:
        harness.close()

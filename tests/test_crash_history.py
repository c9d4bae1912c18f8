"""Crashes that need history: the record carries what the device process ran before it, and
``conform repro`` replays that sequence and shrinks it to the shortest one that still crashes.

The device (``tests/plugins/stateful_crash.py``) aborts on the third run after a SCALE case, so the
crashing case passes alone, the recorded sequence reproduces the crash, and the shortest sequence
is SCALE, the two cases after it, and the crashing case.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.harness import Harness
from conformance.sequence import Replay, Step, shrink
from device.worker import DeviceWorker
from golden.case import OpCase, TensorSpec
from results.outcome import Outcome
from results.record import CaseRecord
from results.schema import ResultsWriter

ROOT = Path(__file__).parent.parent
DEVICE = "tests.plugins.stateful_crash:crashes_third_call_after_scale"


def unary(op: str, seed: int, **params: float) -> OpCase:
    return OpCase(op, (TensorSpec("f32", (16, 2, 1, 1)),), params=tuple(params.items()), data_seed=seed)


# SCALE is 4th; the 3rd run after it (HARDSIGMOID, the 7th case) aborts
SEQUENCE = [unary("RELU", 1), unary("TANH", 2), unary("SQR", 3), unary("SCALE", 4, s=2.0, bias=0.0),
            unary("GELU", 5), unary("SILU", 6), unary("HARDSIGMOID", 7)]
IDS = [case.case_id for case in SEQUENCE]
SHORTEST = IDS[3:]


def conform(*args: str) -> tuple[int, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def crash_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results file whose last record is the crash, written by the harness as the suite would."""
    results = tmp_path_factory.mktemp("history") / "results.jsonl"
    with ResultsWriter(str(results)) as writer:
        harness = Harness(DEVICE, {}, writer=writer, out_dir=str(results.parent), timeout=60, run_id="r1")
        try:
            records = [harness.evaluate(case) for case in SEQUENCE]
        finally:
            harness.close()
    assert [r.outcome for r in records] == [Outcome.PASS] * 6 + [Outcome.CRASH]
    return results


def test_the_crash_record_carries_the_history(crash_results: Path) -> None:
    lines = [json.loads(line) for line in crash_results.read_text().splitlines()]
    crash = lines[-1]
    assert crash["outcome"] == "crash" and crash["crash"]["signal"] == "SIGABRT"
    assert crash["history"] == IDS  # every case the process ran, ending with the crashing one
    assert all("history" not in line for line in lines[:-1])  # passing cases carry none
    assert CaseRecord.from_json(crash).to_json() == crash  # the typed record reads back to the same line


def test_the_crash_is_replayed_alone_and_stays_unexpected_without_an_entry(crash_results: Path) -> None:
    crash = json.loads(crash_results.read_text().splitlines()[-1])
    assert crash["extra"]["alone"]["outcome"] == "pass"  # alone in a fresh worker it computes the right answer
    assert "alone in a fresh worker: pass" in crash["message"]
    assert "expected" not in crash  # no entry says this device's history corrupts it


AFTER_HISTORY_ENTRY = """
[[bug]]
id = "plugin-state-left-by-scale"
devices = "tests.plugins.stateful_crash:*"
op = "*"
outcomes = ["crash"]
after_history = true
reason = "the third case after a SCALE aborts: state SCALE left behind"
repro = "{repro}"
"""


def evaluate_in_turn(device: str, sequence: list[OpCase], tmp_path: Path, entry: str) -> list[CaseRecord]:
    expectations = tmp_path / "history.toml"
    expectations.write_text(entry)
    harness = Harness(device, {}, out_dir=str(tmp_path), timeout=60, run_id="r1", expectations=(str(expectations),))
    try:
        return [harness.evaluate(case) for case in sequence]
    finally:
        harness.close()


def test_an_after_history_entry_explains_a_crash_the_case_alone_does_not_give(tmp_path: Path) -> None:
    records = evaluate_in_turn(DEVICE, SEQUENCE, tmp_path, AFTER_HISTORY_ENTRY.format(repro=IDS[-1]))
    crash = records[-1]
    assert crash.outcome is Outcome.CRASH and crash.extra is not None and crash.extra["alone"]["outcome"] == "pass"
    assert crash.expected is not None and crash.expected.id == "plugin-state-left-by-scale"
    # the entry matches no case by itself: the cases before the crash are judged with no expectation
    assert all(r.outcome is Outcome.PASS and r.expected is None for r in records[:-1])


def test_an_after_history_entry_leaves_a_crash_the_case_gives_alone(tmp_path: Path) -> None:
    device = "tests.plugins.stateful_crash:crashes_on_hardsigmoid"
    sequence = [unary("RELU", 1), unary("HARDSIGMOID", 2)]
    records = evaluate_in_turn(device, sequence, tmp_path, AFTER_HISTORY_ENTRY.format(repro=IDS[-1]))
    crash = records[-1]
    assert crash.outcome is Outcome.CRASH and crash.extra is not None and crash.extra["alone"]["outcome"] == "crash"
    assert crash.expected is None  # its own crash: unexpected


def test_a_crash_in_a_fresh_worker_is_not_replayed(tmp_path: Path) -> None:
    device = "tests.plugins.stateful_crash:crashes_on_hardsigmoid"
    records = evaluate_in_turn(device, [unary("HARDSIGMOID", 2)], tmp_path, AFTER_HISTORY_ENTRY.format(repro=IDS[-1]))
    assert records[0].outcome is Outcome.CRASH and "alone" not in (records[0].extra or {})


def test_the_history_restarts_with_the_process_and_keeps_the_latest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("device.worker.HISTORY_LIMIT", 3)
    worker = DeviceWorker(DEVICE, {}, timeout=60)
    try:
        replies = [worker.attempt(case, [case_input(case)]) for case in SEQUENCE]
        assert replies[-1].outcome is Outcome.CRASH
        assert replies[-1].history == tuple(IDS[-3:]) and replies[-1].history_dropped == 4
        after = worker.attempt(SEQUENCE[0], [case_input(SEQUENCE[0])])  # a fresh process: a fresh history
        assert after.answered and worker.history == [IDS[0]] and worker.restarts == 1
    finally:
        worker.close()


def case_input(case: OpCase):  # type: ignore[no-untyped-def]
    from conformance.data import as_stored
    from conformance.inputs import make_inputs

    return as_stored(make_inputs(case)[0], case.inputs[0].dtype)


def test_the_crashing_case_alone_does_not_crash() -> None:
    code, out = conform("repro", IDS[-1], "--device", DEVICE)
    assert code == 0 and out.startswith(f"PASS  {IDS[-1]}"), out


def test_replaying_the_history_reproduces_the_crash(crash_results: Path) -> None:
    code, out = conform("repro", "--history", str(crash_results))  # the device comes from the record
    assert code == 1, out
    assert f"replaying 7 case(s) on {DEVICE}" in out
    assert "7/7 CRASH" in out and "CRASH at case 7/7: the sequence reproduces it" in out


def test_shrinking_finds_the_shortest_sequence(crash_results: Path, tmp_path: Path) -> None:
    code, out = conform("repro", IDS[-1], "--history", str(crash_results), "--shrink")
    assert code == 1, out
    assert "shortest sequence that still ends in CRASH: 4 of 7 case(s)" in out
    listed = [line.strip() for line in out.split("shortest sequence")[1].splitlines()[1:5]]
    assert listed == SHORTEST
    # the printed sequence reproduces the crash; without any one of its earlier cases it does not
    sequence = tmp_path / "shortest.txt"
    sequence.write_text("# the shrunk sequence\n" + "\n".join(SHORTEST) + "\n")
    code, out = conform("repro", "--device", DEVICE, "--sequence", str(sequence))
    assert code == 1 and "CRASH at case 4/4: the sequence reproduces it" in out, out
    code, out = conform("repro", "--device", DEVICE, "--sequence", *SHORTEST[1:])
    assert code == 0 and "does not reproduce a crash" in out, out


class PredicateRunner:
    """Stands in for SequenceRunner: a sequence 'crashes' at its last case when ``dies`` says so."""

    def __init__(self, dies) -> None:  # type: ignore[no-untyped-def]
        self.dies = dies
        self.replays = 0

    def replay(self, cases: list[OpCase]) -> Replay:
        self.replays += 1
        ids = [c.case_id for c in cases]
        last = Outcome.CRASH if self.dies(ids) else Outcome.PASS
        return Replay(tuple(Step(i, Outcome.PASS, "") for i in ids[:-1]) + (Step(ids[-1], last, ""),), len(ids))


@pytest.mark.parametrize(("needed", "length"), [((), 12), ((0,), 12), ((3, 9), 12), ((0, 5, 6, 10), 11),
                                                 ((1, 2, 3, 4, 5, 6, 7), 8)])
def test_shrink_keeps_exactly_the_cases_the_crash_needs(needed: tuple[int, ...], length: int) -> None:
    cases = [unary("RELU", seed) for seed in range(length)] + [unary("SILU", 99)]
    wanted = {cases[i].case_id for i in needed}
    runner = PredicateRunner(lambda ids: wanted <= set(ids[:-1]) and ids[-1] == cases[-1].case_id)
    shortest = shrink(runner, cases, Outcome.CRASH)  # type: ignore[arg-type]
    assert [c.case_id for c in shortest] == [c.case_id for c in cases if c.case_id in wanted] + [cases[-1].case_id]
    assert runner.replays <= 4 * length  # delta debugging, not every subset


def test_shrink_does_not_count_an_earlier_crash() -> None:
    """A sequence that dies before its last case does not reproduce the last case's crash."""
    cases = [unary("RELU", seed) for seed in range(4)] + [unary("SILU", 99)]
    early = cases[1].case_id

    class EarlyDeath(PredicateRunner):
        def replay(self, cases: list[OpCase]) -> Replay:
            ids = [c.case_id for c in cases]
            if early in ids[:-1]:  # the process dies at the early case and never reaches the last
                at = ids.index(early)
                return Replay(tuple(Step(i, Outcome.PASS, "") for i in ids[:at]) + (Step(early, Outcome.CRASH, ""),),
                              len(ids))
            return super().replay(cases)

    runner = EarlyDeath(lambda ids: cases[0].case_id in ids)
    assert [c.case_id for c in shrink(runner, cases, Outcome.CRASH)] == [cases[0].case_id, cases[-1].case_id]


@pytest.mark.parametrize(("args", "expect"), [
    (["--shrink", IDS[0]], "--shrink needs a sequence"),
    (["--sequence", "no-such-file"], "neither a case id nor a readable file"),
    (["--sequence", IDS[0], "--history", "x.jsonl"], "either --sequence or --history"),
    (["--history", "no-such.jsonl"], "cannot read the results file"),
    (["--sequence", "RELU(type=f32,ne=[4,x])"], "malformed case id"),
    (["--sequence", "GRAPH[add_chain](type=f32,ne=[4,1,1,1],n=99,b=full,data=uniform:0)"], "malformed graph case id"),
])
def test_bad_sequence_input_is_one_line(args: list[str], expect: str) -> None:
    code, out = conform("repro", "--device", DEVICE, *args)
    assert code == 2 and len(out.strip().splitlines()) == 1 and expect in out, out


def test_a_history_without_a_crash_is_one_line(crash_results: Path, tmp_path: Path) -> None:
    passing = tmp_path / "passing.jsonl"
    passing.write_text("\n".join(crash_results.read_text().splitlines()[:-1]) + "\n")
    code, out = conform("repro", "--history", str(passing))
    assert code == 2 and "no crash or timeout record" in out, out


def test_a_wrong_result_gets_the_next_case_a_fresh_process(tmp_path: Path) -> None:
    """A kernel that computed a wrong result may have written past its buffer too (on lavapipe, device
    memory is host heap), so the case after a FAIL runs in a new process: no record depends on it."""
    device = "tests.plugins.faulty_unary:elu_alpha_zero"  # ELU's negative side comes out 0
    with ResultsWriter(str(tmp_path / "results.jsonl")) as writer:
        harness = Harness(device, {}, writer=writer, out_dir=str(tmp_path), timeout=60, run_id="r1")
        try:
            before = harness.evaluate(unary("RELU", 1))
            wrong = harness.evaluate(unary("ELU", 2))
            assert isinstance(harness.runner, DeviceWorker) and harness.runner.restarts == 1
            after = harness.evaluate(unary("RELU", 3))
            assert harness.runner.history == [after.case_id]  # the fresh process ran only this case
        finally:
            harness.close()
    assert [before.outcome, wrong.outcome, after.outcome] == [Outcome.PASS, Outcome.FAIL, Outcome.PASS]


def test_a_sequence_replays_graph_cases_too() -> None:
    """A crash history holds graph case ids as well (the graph tier runs in the same workers)."""
    graph_ids = ["GRAPH[add_chain](type=f32,ne=[8,2,1,1],n=3,b=row,data=uniform:1)",
                 "GRAPH[rms_norm_mul](type=f32,ne=[8,3,1,1],w=row,order=xw,eps=1e-05,data=uniform:3)"]
    code, out = conform("repro", "--device", "ggml:CPU", "--sequence", graph_ids[0], IDS[0], graph_ids[1])
    assert code == 0 and "does not reproduce a crash" in out, out
    assert "3/3 PASS" in out and graph_ids[1] in out, out


def test_a_known_crash_replayed_from_its_history_names_the_entry(crash_results: Path, tmp_path: Path) -> None:
    """The suite counts this crash as known (an after-history entry lists it), and so does the replay:
    the entry that covers the last outcome is named, exit 0; --strict makes it 1."""
    entries = tmp_path / "history.toml"
    entries.write_text(AFTER_HISTORY_ENTRY.format(repro=IDS[-1]))
    code, out = conform("repro", IDS[-1], "--history", str(crash_results), "--shrink", "--expectations", str(entries))
    assert code == 0, out
    assert "shortest sequence that still ends in CRASH: 4 of 7 case(s)" in out
    assert "KNOWN: known bug plugin-state-left-by-scale" in out and "gives CRASH here" in out
    assert f"7/7 KNOWN       {IDS[-1]}  (known bug plugin-state-left-by-scale)" in out
    code, out = conform("repro", "--history", str(crash_results), "--expectations", str(entries), "--strict")
    assert code == 1 and "KNOWN: known bug plugin-state-left-by-scale" in out, out


def test_an_unknown_crash_replay_says_no_entry_covers_it(crash_results: Path) -> None:
    code, out = conform("repro", "--history", str(crash_results))
    assert code == 1 and f"UNEXPECTED: no listed entry gives CRASH for {IDS[-1]}" in out, out

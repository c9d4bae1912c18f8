"""A run SIGKILLed at any moment leaves a results file whose every complete line is a valid record.

The whole process group (pytest and its device worker) is killed, as a CI job timeout or the OOM
killer would. The file must then read as partial: a header first, valid case records, no footer.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from results.schema import OUTCOMES, SCHEMA, SCHEMA_VERSION

ROOT = Path(__file__).parent.parent
CASE_FIELDS = ("run_id", "worker", "test_id", "case_id", "device", "op", "dtypes", "shapes", "layout", "params",
               "distribution", "data_seed", "supported", "outcome", "tolerance", "duration_s", "repro", "message")


def start_run(results: Path, profile: str = "dev", stderr: Path | None = None) -> subprocess.Popen:
    """The run under test; with ``stderr``, its stderr goes there and faulthandler is on (a SIGABRT
    then writes every thread's stack: what a run that does not stop was doing)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("CONFORM_RUN_ID", None)
    if stderr is not None:
        env["PYTHONFAULTHANDLER"] = "1"
    with open(stderr if stderr is not None else os.devnull, "wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "-k", "tanh or relu",
             "--results", str(results), "--conform-profile", profile],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # Ctrl-C works even if we ignore it
        )


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def wait_group_gone(proc: subprocess.Popen) -> None:
    proc.wait(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the device worker child was in the group too
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    pytest.fail("processes of the killed run's group are still alive")


def complete_records(results: Path) -> list[dict]:
    """Every complete (newline-terminated) line, parsed; a trailing partial line is left out."""
    if not results.exists():
        return []
    text = results.read_bytes().decode()
    lines = text.split("\n")[:-1]  # the last piece has no newline: partial or empty
    return [json.loads(line) for line in lines]


def check_partial(records: list[dict]) -> None:
    if not records:
        return
    assert records[0]["type"] == "header"
    assert records[0]["schema"] == SCHEMA and records[0]["schema_version"] == SCHEMA_VERSION
    run_id = records[0]["run_id"]
    for r in records[1:]:
        assert r["type"] == "case", r  # one process: one header, and no footer since it was killed
        missing = [f for f in CASE_FIELDS if f not in r]
        assert not missing, (missing, r)
        assert r["outcome"] in OUTCOMES
        assert r["run_id"] == run_id
    assert not any(r["type"] == "footer" for r in records)


def case_lines(results: Path) -> int:
    try:
        return sum(1 for line in results.read_bytes().split(b"\n")[:-1] if b'"type":"case"' in line)
    except FileNotFoundError:
        return 0


def test_sigkill_after_three_cases_leaves_a_valid_partial_file(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    proc = start_run(results)
    try:
        deadline = time.monotonic() + 60
        while case_lines(results) < 3:
            assert proc.poll() is None, "the run ended before it wrote 3 cases"
            assert time.monotonic() < deadline, "no 3 case records within 60 s"
            time.sleep(0.02)
    finally:
        kill_group(proc)
    wait_group_gone(proc)
    records = complete_records(results)
    check_partial(records)
    assert sum(r["type"] == "case" for r in records) >= 3


def test_ctrl_c_leaves_a_partial_file(tmp_path: Path) -> None:
    """An interrupted run is not a complete one: pytest still runs its session end, but writes no footer."""
    results, stderr = tmp_path / "results.jsonl", tmp_path / "stderr.txt"
    proc = start_run(results, profile="nightly", stderr=stderr)  # long enough to be interrupted mid-run
    try:
        deadline = time.monotonic() + 60
        while case_lines(results) < 3:
            assert proc.poll() is None and time.monotonic() < deadline, "no 3 case records"
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGINT)
        try:
            code = proc.wait(30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGABRT)  # faulthandler writes where it is stuck
            proc.wait(10)
            pytest.fail("the interrupted run did not end within 30 s; its stacks:\n"
                        + stderr.read_text(errors="replace")[-6000:])
        assert code == 2, stderr.read_text(errors="replace")[-3000:]  # pytest's INTERRUPTED
    finally:
        kill_group(proc)
    wait_group_gone(proc)
    check_partial(complete_records(results))


def test_sigkill_at_random_moments(tmp_path: Path) -> None:
    """Three runs at once, each killed once it has written a random number (0-40) of case records.

    The 96-case run takes under a second after its header, so the moment is drawn as progress, not
    time; polling granularity puts the kill mid-case, mid-write or between cases.
    """
    seed = int(os.environ.get("CONFORM_KILL_SEED", "0")) or random.randrange(1, 2**31)
    rng = random.Random(seed)
    print(f"CONFORM_KILL_SEED={seed}")
    runs = []
    for i in range(3):
        results = tmp_path / f"results-{i}.jsonl"
        runs.append((results, start_run(results), rng.randrange(0, 41)))
    killed: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while len(killed) < len(runs):
            now = time.monotonic()
            assert now < deadline, "a run wrote no header within 60 s"
            for i, (results, proc, target) in enumerate(runs):
                if i in killed:
                    continue
                assert proc.poll() is None, f"run {i} ended before it was killed"
                if results.exists() and results.stat().st_size and case_lines(results) >= target:
                    kill_group(proc)
                    killed.add(i)
            time.sleep(0.01)
    finally:
        for i, (_, proc, _) in enumerate(runs):
            if i not in killed:
                kill_group(proc)
    for _, proc, _ in runs:
        wait_group_gone(proc)
    for i, (results, _, target) in enumerate(runs):
        records = complete_records(results)
        print(f"run {i}: killed at >= {target} case records: {len(records) - 1} complete")
        check_partial(records)
        assert records, "the header was written before the kill"

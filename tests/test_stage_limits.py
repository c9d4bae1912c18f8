"""The case timeout covers the harness's golden and verdict stages too, and a large case's stages
run in a child process under a memory cap as well: a stage that runs out of time or memory leaves an
ERROR record naming the stage, the resource and the limit, and the next case runs as usual."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conformance.harness import Harness
from conformance.limits import HOST_MEMORY, StageLimitExceeded, stage_limit
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
    with pytest.raises(StageLimitExceeded, match="golden ran past --case-timeout 0.2 s"):
        with stage_limit(0.2, "golden"):
            _slow(5.0)()
    handler = signal.getsignal(signal.SIGALRM)
    with stage_limit(5.0, "golden"):  # a stage that finishes in time is untouched, and no alarm is left
        pass
    # no timer armed and the handler given back: read directly instead of sleeping past the limit
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is handler


def test_a_golden_that_runs_out_of_time_is_recorded_and_the_run_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    harness = Harness("golden", {}, timeout=0.3, keep_artefacts=False)
    try:
        exact = catalogue.evaluate
        monkeypatch.setattr(catalogue, "evaluate", _slow(5.0))
        start = time.monotonic()
        record = harness.evaluate(CASE)
        assert time.monotonic() - start < 3.0
        assert record.outcome is Outcome.ERROR and record.failing
        assert record.extra == {"ran_out": {"stage": "golden", "resource": "time", "limit": "--case-timeout 0.3 s"}}
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
        limit = "--case-timeout 0.3 s" if resource == "time" else HOST_MEMORY  # a small case: no child, no cap
        assert record.extra == {"ran_out": {"stage": "verdict", "resource": resource, "limit": limit}}
        assert f"ran out of {resource} in the verdict stage" in record.message
        monkeypatch.undo()
        again = harness.evaluate(CASE)
        assert again.outcome is Outcome.PASS and np.isfinite(again.metrics["error_ratio"])  # type: ignore[index]
    finally:
        harness.close()


# ---- a large case: its stages run in a child process --------------------------------------------
BIG = OpCase("ABS", (TensorSpec("f32", (1024, 1024, 1, 1)),), data_seed=2)  # 2^20 elements: run in a child


def _asleep_in_c(*args: object, **kwargs: object) -> None:
    """One C call that no signal interrupts (SIGALRM blocked, as in a long BLAS or NumPy kernel)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    ctypes.CDLL(None).sleep(30)


def _greedy(*args: object, **kwargs: object) -> np.ndarray:
    return np.ones(2**30 // 8 * 3)  # 3 GiB of float64


def test_a_golden_asleep_in_one_c_call_is_cut_short() -> None:
    """The in-process timer could not stop this golden; the child process is killed at the limit."""
    harness = Harness("golden", {}, timeout=1.0, keep_artefacts=False)
    assert harness.stage_limits.isolate_from <= 1024 * 1024
    try:
        exact = catalogue.evaluate
        catalogue.evaluate = _asleep_in_c  # type: ignore[assignment]
        try:
            start = time.monotonic()
            record = harness.evaluate(BIG)
            took = time.monotonic() - start
        finally:
            catalogue.evaluate = exact
        assert took < 10.0, f"{took:.1f} s"
        assert record.outcome is Outcome.ERROR
        assert record.extra == {"ran_out": {"stage": "golden", "resource": "time", "limit": "--case-timeout 1 s"}}
        assert "ran out of time in the golden stage while computing the golden" in record.message
        assert harness.evaluate(BIG).outcome is Outcome.PASS  # the run goes on
    finally:
        harness.close()


@pytest.mark.parametrize("stage", ["golden", "verdict"])
def test_a_stage_over_its_memory_cap_is_recorded(monkeypatch: pytest.MonkeyPatch, stage: str) -> None:
    """3 GiB asked for under a 0.5 GiB cap: the child's MemoryError, not the host's OOM killer."""
    harness = Harness("golden", {}, timeout=60.0, keep_artefacts=False, stage_memory_gib=0.5)
    try:
        if stage == "golden":
            monkeypatch.setattr(catalogue, "evaluate", _greedy)
        else:
            monkeypatch.setattr(harness, "_judge", _greedy)
        record = harness.evaluate(BIG)
        assert record.outcome is Outcome.ERROR
        assert record.extra == {"ran_out": {"stage": stage, "resource": "memory", "limit": "--stage-memory 0.5 GiB"}}
        assert f"ran out of memory in the {stage} stage" in record.message
        monkeypatch.undo()
        assert harness.evaluate(BIG).outcome is Outcome.PASS
    finally:
        harness.close()


def test_a_stage_process_that_dies_is_an_error_and_the_run_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    def die(*args: object, **kwargs: object) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    harness = Harness("golden", {}, timeout=60.0, keep_artefacts=False)
    try:
        monkeypatch.setattr(catalogue, "evaluate", die)
        record = harness.evaluate(BIG)
        assert record.outcome is Outcome.ERROR and "ran_out" not in (record.extra or {})
        assert "child process ended without an answer (killed by SIGKILL)" in record.message
        monkeypatch.undo()
        assert harness.evaluate(BIG).outcome is Outcome.PASS
    finally:
        harness.close()


def test_ctrl_c_during_a_child_stage_is_an_interruption_not_a_record(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    """Ctrl-C reaches the whole process group: the child ignores it, the parent stops its child and
    the KeyboardInterrupt goes on up; no record is written."""
    pid_file = tmp_path / "child.pid"

    def interrupted(*args: object, **kwargs: object) -> None:
        pid_file.write_text(str(os.getpid()))
        time.sleep(0.5)  # the parent waits for the answer by now (not in fork's own handlers)
        os.kill(os.getppid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)  # as the terminal sends it to the child too: ignored
        time.sleep(30)

    written: list[dict[str, Any]] = []

    class Writer:
        def write(self, record: dict[str, Any]) -> None:
            written.append(record)

    harness = Harness("golden", {}, writer=Writer(), timeout=60.0, keep_artefacts=False)
    try:
        monkeypatch.setattr(catalogue, "evaluate", interrupted)
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            harness.evaluate(BIG)
        assert time.monotonic() - start < 10.0
        assert written == []
        child = int(pid_file.read_text())
        with pytest.raises(ChildProcessError):  # the child was stopped and collected
            os.waitpid(child, os.WNOHANG)
        assert not _alive(child)
    finally:
        harness.close()


def test_a_large_stage_gives_the_same_record_as_in_the_process() -> None:
    """The child's answer is the stage's own: the same metrics as running the stages in the process."""
    harness = Harness("golden", {}, timeout=60.0, keep_artefacts=False)
    try:
        isolated = harness.evaluate(BIG)
        harness.isolate_from = 1 << 62
        in_process = harness.evaluate(BIG)
    finally:
        harness.close()
    assert isolated.outcome is in_process.outcome is Outcome.PASS
    assert isolated.metrics == in_process.metrics


def test_a_child_stage_uses_one_blas_thread() -> None:
    """Spinning BLAS threads of every judging process oversubscribe a shared host (limits.py)."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from conformance.limits import STAGE_BLAS_THREADS, StageLimits, run_stage

    def blas_threads() -> list[int]:
        return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]

    with threadpool_limits(STAGE_BLAS_THREADS + 1, user_api="blas"):  # the parent's pool is larger
        assert set(blas_threads()) == {STAGE_BLAS_THREADS + 1}
        in_child = run_stage(blas_threads, "golden", StageLimits(60.0, isolate_from=0), 1)
    assert in_child and set(in_child) == {STAGE_BLAS_THREADS}


@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux's prctl")
def test_a_stage_child_dies_with_its_harness(tmp_path: Path) -> None:
    """A run killed outright (CI's timeout, the OOM killer) leaves no stage computing on."""
    pid_file = tmp_path / "child.pid"
    script = (
        "import os, time\n"
        "from conformance.limits import StageLimits, run_stage\n"
        "def work():\n"
        f"    open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "    time.sleep(60)\n"
        "run_stage(work, 'golden', StageLimits(120.0, isolate_from=0), 1)\n"
    )
    harness = subprocess.Popen([sys.executable, "-c", script], cwd=Path(__file__).parent.parent)
    try:
        deadline = time.monotonic() + 30
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline and harness.poll() is None, "the stage child never started"
            time.sleep(0.05)
        child = int(pid_file.read_text())
    finally:
        harness.kill()
        harness.wait()
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    """Running, not gone and not a zombie waiting for whoever adopted it."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False

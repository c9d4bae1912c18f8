"""Ctrl-C on ``conform run`` still leaves a report and JUnit XML of what was measured, marked partial."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _cases(results: Path) -> int:
    if not results.exists():
        return 0
    return sum('"type":"case"' in line for line in results.read_text().splitlines())


@pytest.mark.parametrize(("whom", "signum", "background"), [
    ("group", signal.SIGINT, False), ("conform", signal.SIGINT, False),
    ("group", signal.SIGINT, True), ("conform", signal.SIGINT, True), ("group", signal.SIGTERM, True),
], ids=["ctrl-c", "sigint-to-conform", "background-sigint", "background-sigint-to-conform", "background-sigterm"])
def test_a_stop_signal_writes_a_partial_report_and_no_device_failure(
        tmp_path: Path, whom: str, signum: signal.Signals, background: bool) -> None:
    """``group``: Ctrl-C in a terminal, or ``kill -- -PGID`` (every process of the job gets the signal);
    ``conform``: the signal sent to conform alone, which hands SIGINT on to pytest. ``background``: started
    as a script's background job, whose shell hands it SIGINT ignored; the device worker then must not die
    of the signal mid-case (that read as a CRASH of the op it ran)."""
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if background else None
    # its own process group, as a terminal's foreground job: Ctrl-C reaches conform, pytest and the workers
    proc = subprocess.Popen(
        [sys.executable, "-m", "conformance.cli", "run", "--device", "tests.plugins.contract_breakers:slow",
         "--op", "RELU", "--profile", "ci", "--out", str(out)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=ignore,
    )
    try:
        deadline = time.monotonic() + 120
        while _cases(out / "results.jsonl") < 3:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no case was recorded in time"
            time.sleep(0.2)
        if whom == "group":
            os.killpg(proc.pid, signum)
        else:
            os.kill(proc.pid, signum)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, stdout + stderr
    assert "Traceback" not in stderr and "interrupted" in stderr
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    cases = [r for r in lines if r["type"] == "case"]
    # what was measured is kept, and the interruption is no record: the slow device passes every case
    assert len(cases) >= 3 and all(r["outcome"] == "pass" for r in cases), [r["message"] for r in cases]
    assert not any(r["type"] == "footer" for r in lines)  # no footer: the file reads as partial
    junit = (out / "junit.xml").read_text()
    assert 'name="conform_partial"' in junit
    report = (out / "report.html").read_text()
    assert 'id="partial"' in report and "Partial run." in report
    assert f"conform: report  {out / 'report.html'}" in stdout

"""Ctrl-C on ``conform run`` still leaves a report and JUnit XML of what was measured, marked partial;
the JUnit XML counts the interruption as an error (CI dashboards read the run as failed), and every
line the run ends with is true of the files it names, after a second Ctrl-C too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conformance.junit import errors_and_failures
from tests.plugins.slow_finish import SLOW_FINISH_LINE

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
    _check_counts_the_interruption(out / "junit.xml", tests_that_ended=len(cases))
    assert f"conform: JUnit   {out / 'junit.xml'}\n" in stdout
    assert "the results, JUnit XML and report hold what was measured so far" in stderr
    report = (out / "report.html").read_text()
    assert 'id="partial"' in report and "Partial run." in report
    assert f"conform: report  {out / 'report.html'}" in stdout


def _check_counts_the_interruption(junit: Path, tests_that_ended: int = 0) -> None:
    """A whole JUnit file whose error count includes the ``conform.interrupted`` case; no temporary left."""
    errors, failures = errors_and_failures(junit)
    assert errors + failures >= 1, junit.read_text()
    cases = ET.parse(junit).getroot().iter("testcase")
    interrupted = [c for c in cases if (c.get("classname"), c.get("name")) == ("conform", "interrupted")]
    assert len(interrupted) == 1 and interrupted[0].find("error") is not None, junit.read_text()
    assert [p.name for p in junit.parent.iterdir() if p.name.startswith(".junit")] == []


def _wait_for_cases(proc: subprocess.Popen[str], results: Path, count: int) -> None:
    deadline = time.monotonic() + 120
    while _cases(results) < count:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no case was recorded in time"
        time.sleep(0.1)


def test_plain_pytest_interrupted_counts_an_error_in_its_junit_xml(tmp_path: Path) -> None:
    """The plug-in alone (pytest --junitxml, as a CI job may run it): Ctrl-C leaves a JUnit file whose
    suite counts the interruption as an error, next to the tests that ended."""
    results, junit = tmp_path / "results.jsonl", tmp_path / "junit.xml"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "--op", "RELU",
         "--device", "tests.plugins.contract_breakers:slow", "--conform-profile", "ci",
         "--results", str(results), "--junitxml", str(junit)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        _wait_for_cases(proc, results, 3)
        os.killpg(proc.pid, signal.SIGINT)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 2, output  # pytest's INTERRUPTED
    _check_counts_the_interruption(junit)
    assert f"generated xml file: {junit}" in output  # the real name, not the temporary one


def test_a_second_ctrl_c_leaves_a_junit_file_that_counts_the_interruption(tmp_path: Path) -> None:
    """Ctrl-C twice, the second while pytest is still finishing (here a plug-in that waits a minute before
    pytest writes its JUnit XML): conform stops pytest at once, and the JUnit file it names is there, whole,
    and counts the interruption as an error; the closing lines name only files that were written."""
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "conformance.cli", "run", "--device", "tests.plugins.contract_breakers:slow",
         "--op", "RELU", "--profile", "ci", "--out", str(out), "--no-report", "--",
         "-p", "tests.plugins.slow_finish"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: list[str] = []
    try:
        _wait_for_cases(proc, out / "results.jsonl", 3)
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.stdout is not None
        waiting_for = {SLOW_FINISH_LINE, "conform: interrupted; pytest is writing what it measured"}
        for line in proc.stdout:  # both: pytest is in its session end, and conform waits for it
            lines.append(line)
            waiting_for = {w for w in waiting_for if not line.startswith(w)}
            if not waiting_for:
                break
        assert not waiting_for, "".join(lines)
        os.killpg(proc.pid, signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    output = "".join(lines) + rest
    assert proc.returncode == 130, output
    assert "Traceback" not in output
    junit = out / "junit.xml"
    _check_counts_the_interruption(junit)
    closing = output.splitlines()[-3:]
    assert closing == [
        f"conform: results {out / 'results.jsonl'}",
        f"conform: JUnit   {junit} (written by conform: the run was stopped before pytest wrote its JUnit XML; "
        "see the results for the cases measured)",
        "conform: interrupted: the results and JUnit XML hold what was measured so far (marked partial)",
    ], output


def test_a_run_that_ends_normally_has_no_interruption_case(tmp_path: Path) -> None:
    """The same plug-in path on a run that ends: the JUnit file is renamed into place whole, with every
    test and no ``conform.interrupted`` case."""
    junit = tmp_path / "junit.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "--op", "RELU",
         "--device", "golden", "--conform-profile", "dev", "--junitxml", str(junit)],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert errors_and_failures(junit) == (0, 0)
    names = [c.get("name") for c in ET.parse(junit).getroot().iter("testcase")]
    assert names and "interrupted" not in names and None not in names
    assert [p.name for p in tmp_path.iterdir()] == ["junit.xml"]

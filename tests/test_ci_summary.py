""".ci/run and .ci/backends end with one summary line (.ci/steps.sh): each step's pass or fail and the
minutes taken, printed whichever way the script ends, with ``set -e``'s exit status kept."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS = ROOT / ".ci" / "steps.sh"


def _script(body: str) -> subprocess.CompletedProcess[str]:
    """A stub CI script: .ci/run's preamble, then ``body``'s steps."""
    preamble = f"set -euo pipefail\nsource {STEPS}\ntrap 'ci_summary ci' EXIT\n"
    return subprocess.run(["bash", "-c", preamble + body], capture_output=True, text=True, timeout=60)


def test_a_failing_step_stops_the_script_and_the_last_line_says_which() -> None:
    proc = _script("step lint true\nstep tests bash -c 'echo testing; exit 3'\nstep never echo ran\n")
    assert proc.returncode == 3  # set -e: the failing step's status, and nothing after it ran
    lines = proc.stdout.splitlines()
    assert "ran" not in lines and "testing" in lines
    assert re.fullmatch(r"ci: FAILED \(exit 3\) in \d+\.\d min: lint pass \(\d+\.\d min\), "
                        r"tests FAIL \(\d+\.\d min\)", lines[-1]), lines[-1]


def test_a_passing_run_ends_with_every_step_and_the_parts_a_step_recorded() -> None:
    proc = _script("step lint true\nci_part 'vulkan slice' 1 75\nci_part 'ggml 0.17.0' skip 0\nstep tests true\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == ("ci: passed in 0.0 min: lint pass (0.0 min), vulkan slice FAIL (1.2 min), "
                                            "ggml 0.17.0 skipped, tests pass (0.0 min)")


def test_a_command_that_fails_outside_any_step_still_gets_the_summary() -> None:
    proc = _script("step lint true\nfalse\n")
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[-1] == "ci: FAILED (exit 1) in 0.0 min: lint pass (0.0 min)"


def test_every_command_of_ci_run_is_a_named_step() -> None:
    """.ci/run sets the summary trap, and runs each tool through ``step`` (so the summary names it)."""
    text = (ROOT / ".ci" / "run").read_text()
    assert "source .ci/steps.sh" in text and "trap 'ci_summary ci' EXIT" in text
    bare = [line for line in text.splitlines() if re.match(r"(\.venv/bin/|bash |python)", line)]
    assert bare == []
    named = set(re.findall(r"^step (\S+)", text, re.M))
    for line in re.findall(r"^together (.+)$", text, re.M):
        named.update(line.split()[::2])
    assert named >= {"setup", "ruff", "mypy", "tests", "conformance", "backends"}
    backends = (ROOT / ".ci" / "backends").read_text()
    assert "trap 'ci_summary ci/backends' EXIT" in backends


def test_steps_run_together_end_in_the_time_of_the_longer_and_print_whole_in_order() -> None:
    body = ("slow() { echo slow-start; sleep 2; echo slow-end; }\n"
            "quick() { echo quick-start; sleep 1; echo quick-end; }\n"
            "together slow slow quick quick\n")
    proc = _script(body)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # each step's output whole, in the order given, though the quick one ended first
    assert lines.index("slow-end") < lines.index("quick-start")
    assert lines[lines.index("slow-start") + 1] == "slow-end"
    assert re.fullmatch(r"ci: passed in 0\.0 min: slow pass \(0\.0 min\), quick pass \(0\.0 min\)", lines[-1])


def test_a_failing_step_run_together_fails_the_script_after_both_ended() -> None:
    body = ("bad() { echo bad-ran; exit 4; }\n"
            "good() { sleep 1; echo good-ran; }\n"
            "together bad bad good good\n"
            "step never echo ran\n")
    proc = _script(body)
    assert proc.returncode == 4
    lines = proc.stdout.splitlines()
    assert "bad-ran" in lines and "good-ran" in lines and "ran" not in lines
    assert re.fullmatch(r"ci: FAILED \(exit 4\) in \d+\.\d min: bad FAIL \(\d+\.\d min\), "
                        r"good pass \(\d+\.\d min\)", lines[-1]), lines[-1]


def test_an_interrupted_run_stops_the_steps_run_together(tmp_path: Path) -> None:
    """Background jobs of a script ignore Ctrl-C; stopping .ci/run must not leave them running."""
    import os
    import signal
    import time

    marker = tmp_path / "alive"
    body = (f"a() {{ while true; do touch {marker}; sleep 0.1; done; }}\n"
            "b() { sleep 30; }\n"
            "together a a b b\n")
    preamble = f"set -euo pipefail\nsource {STEPS}\ntrap 'ci_summary ci' EXIT\n"
    proc = subprocess.Popen(["bash", "-c", preamble + body], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), "the step never started"
    os.kill(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 130
    assert re.fullmatch(r"ci: FAILED \(exit 130\) in \d+\.\d min: a b FAIL \(\d+\.\d min\)", out.splitlines()[-1])
    marker.unlink()
    time.sleep(0.5)
    assert not marker.exists(), "a step run together kept running after the script was stopped"

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
    assert {m for m in re.findall(r"^step (\S+)", text, re.M)} >= {"setup", "ruff", "mypy", "tests", "backends"}
    backends = (ROOT / ".ci" / "backends").read_text()
    assert "trap 'ci_summary ci/backends' EXIT" in backends

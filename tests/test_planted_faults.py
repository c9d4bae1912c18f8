"""Every planted fault in tests/plugins is caught by the ci profile of the tests that cover its op.

Each fault stands for a real backend bug (its ``bug`` text); a tolerance change that lets one pass
has widened a bound past what detection needs, and fails here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.plugins import PlantedFault, all_planted

ROOT = Path(__file__).resolve().parents[1]


# issue 28: the faults that stand for a hole must be caught *through* it: a tail dropped within every
# element's worst-case bound is failed by the aggregate criterion (a failing record with no element out
# of its bound), and a fault next to a known bug is failed on a companion case
HOLE_FAULTS = {
    "fa_drops_last_split": "within_worst_case", "mul_mat_drops_last_term": "within_worst_case",
    "sum_rows_drops_last": "within_worst_case", "cpu_with_hidden_fault": "companion",
}


def _name(fault: PlantedFault) -> str:
    return fault.spec.rsplit(":", 1)[-1]


def _run_selection(fault: PlantedFault, profile: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "--device", fault.spec,
         "-k", fault.select, "--conform-profile", profile, "-W", "ignore::DeprecationWarning", *extra],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("fault", [pytest.param(f, id=_name(f)) for f in all_planted()])
def test_planted_fault_is_caught_in_the_ci_profile(fault: PlantedFault, tmp_path: Path) -> None:
    """The ci profile's draws (ci-detect: the same draws, a failure reported as found rather than shrunk:
    shrinking took most of this check's time and decides nothing here). A hole fault runs its whole
    selection in the ci profile itself (no -x, failures shrunk: the shrunk draws are where a failure
    within every element's bound shows) and must be caught through its hole as well."""
    results = tmp_path / "results.jsonl"
    hole = HOLE_FAULTS.get(_name(fault))
    profile = "ci" if hole else "ci-detect"
    proc = _run_selection(fault, profile, "--results", str(results), *(() if hole else ("-x",)))
    tail = (proc.stdout + proc.stderr)[-1500:]
    assert proc.returncode == 1, f"{fault.spec} ({fault.bug}) was not caught by -k {fault.select!r}:\n{tail}"
    records = [json.loads(line) for line in results.read_text().splitlines()]
    # a wrong value is a fail record, an abort a crash record; an error record would be the plug-in itself
    failing = [r for r in records if r.get("type") == "case" and r["outcome"] in ("fail", "crash")]
    assert failing, f"{fault.spec}: pytest failed without a failing or crashing case record:\n{tail}"
    if hole is None:
        return
    failing = [r for r in failing if not r.get("expected")]
    if hole == "within_worst_case":
        hidden = [r for r in failing if r["metrics"]["n_bad"] == 0 and r["metrics"]["criterion"] == "aggregate"]
        assert hidden, f"{fault.spec}: no failure within every element's worst-case bound (the hole is not shown)"
    else:
        assert any(r.get("companion_of") for r in failing), f"{fault.spec}: not caught on a companion case"


# faults that show only on rows longer than 1,024: such rows are drawn often enough that the dev
# profile (12 examples, random seed) catches them whatever the seed
LONG_ROW_FAULTS = ("argsort_per_block", "sum_rows_one_block")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("fault", [pytest.param(f, id=_name(f)) for f in all_planted() if _name(f) in LONG_ROW_FAULTS])
def test_long_row_faults_are_caught_in_the_dev_profile_whatever_the_seed(fault: PlantedFault, seed: int) -> None:
    """dev-detect: the dev profile's draws at this seed, a failure not shrunk."""
    proc = _run_selection(fault, "dev-detect", "-x", "--hypothesis-seed", str(seed))
    assert proc.returncode == 1, f"{fault.spec} escaped the dev profile at seed {seed}:\n{proc.stdout[-1500:]}"

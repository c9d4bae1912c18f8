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


@pytest.mark.slow
@pytest.mark.parametrize("fault", [pytest.param(f, id=f.spec.rsplit(":", 1)[-1]) for f in all_planted()])
def test_planted_fault_is_caught_in_the_ci_profile(fault: PlantedFault, tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "-x",
         "--device", fault.spec, "-k", fault.select, "--conform-profile", "ci", "--results", str(results),
         "-W", "ignore::DeprecationWarning"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    tail = (proc.stdout + proc.stderr)[-1500:]
    assert proc.returncode == 1, f"{fault.spec} ({fault.bug}) was not caught by -k {fault.select!r}:\n{tail}"
    records = [json.loads(line) for line in results.read_text().splitlines()]
    # a wrong value is a fail record, an abort a crash record; an error record would be the plug-in itself
    failing = [r for r in records if r.get("type") == "case" and r["outcome"] in ("fail", "crash")]
    assert failing, f"{fault.spec}: pytest failed without a failing or crashing case record:\n{tail}"


# faults that show only on rows longer than 1,024: such rows are drawn often enough that the dev
# profile (12 examples, random seed) catches them whatever the seed
LONG_ROW_FAULTS = ("argsort_per_block", "sum_rows_one_block")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("fault", [pytest.param(f, id=f.spec.rsplit(":", 1)[-1]) for f in all_planted()
                                   if f.spec.rsplit(":", 1)[-1] in LONG_ROW_FAULTS])
def test_long_row_faults_are_caught_in_the_dev_profile_whatever_the_seed(fault: PlantedFault, seed: int) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "-x",
         "--device", fault.spec, "-k", fault.select, "--conform-profile", "dev", "--hypothesis-seed", str(seed),
         "-W", "ignore::DeprecationWarning"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, f"{fault.spec} escaped the dev profile at seed {seed}:\n{proc.stdout[-1500:]}"


# issue 28: the faults that stand for a hole must be caught *through* it: a tail dropped within every
# element's worst-case bound is failed by the aggregate criterion (a failing record with no element out
# of its bound), and a fault next to a known bug is failed on a companion case
HOLE_FAULTS = {
    "fa_drops_last_split": "within_worst_case", "mul_mat_drops_last_term": "within_worst_case",
    "sum_rows_drops_last": "within_worst_case", "cpu_with_hidden_fault": "companion",
}


@pytest.mark.slow
@pytest.mark.parametrize("fault", [pytest.param(f, id=f.spec.rsplit(":", 1)[-1]) for f in all_planted()
                                   if f.spec.rsplit(":", 1)[-1] in HOLE_FAULTS])
def test_hole_faults_are_caught_through_the_hole(fault: PlantedFault, tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider",
         "--device", fault.spec, "-k", fault.select, "--conform-profile", "ci", "--results", str(results),
         "-W", "ignore::DeprecationWarning"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout[-1500:]
    failing = [r for r in map(json.loads, results.read_text().splitlines())
               if r.get("type") == "case" and r["outcome"] in ("fail", "crash") and not r.get("expected")]
    if HOLE_FAULTS[fault.spec.rsplit(":", 1)[-1]] == "within_worst_case":
        hidden = [r for r in failing if r["metrics"]["n_bad"] == 0 and r["metrics"]["criterion"] == "aggregate"]
        assert hidden, f"{fault.spec}: no failure within every element's worst-case bound (the hole is not shown)"
    else:
        assert any(r.get("companion_of") for r in failing), f"{fault.spec}: not caught on a companion case"

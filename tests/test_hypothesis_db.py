"""Nightly memory: hypothesis' example database in a chosen directory replays failures first.

A nightly run with ``--hypothesis-db DIR`` saves each failing example there; the next run replays
it before generating anything, so a known failure is found again at once. The seed hypothesis ran
with (``--hypothesis-seed``) is recorded in the results header.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def run_suite(results: Path, device: str, k: str, *extra: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "-k", k, "--device", device,
         "--results", str(results), "--conform-profile", "dev", *extra],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=180,
    )
    return proc, [json.loads(line) for line in results.read_text().splitlines()]


def test_failing_example_is_saved_and_replayed_first(tmp_path: Path) -> None:
    db = tmp_path / "conform-db"
    device, k = "tests.plugins.faulty:erf_gelu_quick", "gelu_quick and f32"
    first, records1 = run_suite(tmp_path / "r1.jsonl", device, k, "--hypothesis-db", str(db), "-x")
    assert first.returncode == 1
    assert records1[0]["hypothesis_db"] == str(db)
    saved = [p for p in db.rglob("*") if p.is_file()]
    assert saved, "the failing example was saved in the example database"
    cases1 = [r for r in records1 if r["type"] == "case"]
    minimal = [r for r in cases1 if r["outcome"] == "fail"][-1]  # hypothesis reruns its shrunk example last

    second, records2 = run_suite(tmp_path / "r2.jsonl", device, k, "--hypothesis-db", str(db), "-x")
    assert second.returncode == 1
    cases2 = [r for r in records2 if r["type"] == "case"]
    # the very first case of the second run is the saved failure, and nothing new was generated
    assert cases2[0]["outcome"] == "fail" and cases2[0]["case_id"] == minimal["case_id"]
    assert len(cases2) < len(cases1)
    assert all(r["case_id"] == minimal["case_id"] for r in cases2)


def test_seed_is_recorded_in_the_header(tmp_path: Path) -> None:
    proc, records = run_suite(tmp_path / "r.jsonl", "golden", "relu and f32 and not leaky",
                              "--hypothesis-seed", "20261130", "--hypothesis-db", str(tmp_path / "db"))
    assert proc.returncode == 0, proc.stdout[-2000:]
    header = records[0]
    assert header["type"] == "header" and header["hypothesis_seed"] == 20261130
    # a forced seed turns hypothesis' database off: recorded, and said once as a warning
    assert header["hypothesis_db"] is None
    assert "--hypothesis-seed turns hypothesis' example database off" in proc.stdout
    assert not (tmp_path / "db").exists()


def test_ci_profile_has_no_seed_and_no_database(tmp_path: Path) -> None:
    _, records = run_suite(tmp_path / "r.jsonl", "golden", "sqr and f32", "--conform-profile", "ci")
    header = records[0]
    assert header["profile"] == "ci" and header["hypothesis_seed"] is None and header["hypothesis_db"] is None

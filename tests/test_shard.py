"""``--shard K/N``: the shards of a selection are disjoint, together are the whole selection, and the
same test lands in the same shard whatever devices run it; a bad value is one line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.shard import parse_shard, shard_key

ROOT = Path(__file__).parent.parent
SELECTION = "test_binary and (add or mul) and f32"


def _collected(*extra: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "--collect-only",
         "-k", SELECTION, *extra], capture_output=True, text=True, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=180)
    return proc, [line for line in proc.stdout.splitlines() if "::" in line]


def test_four_shards_partition_the_selection() -> None:
    _, whole = _collected("--device", "golden")
    assert whole
    parts = [_collected("--device", "golden", "--shard", f"{k}/4")[1] for k in range(1, 5)]
    assert sorted(t for part in parts for t in part) == sorted(whole)
    assert sum(map(len, parts)) == len(whole)


def test_shard_key_ignores_the_device_parameter() -> None:
    one = shard_key("conformance/test_ops.py::test_binary[add-f32_f32-golden]", None, ["golden"])
    two = shard_key("conformance/test_ops.py::test_binary[add-f32_f32-ggml_CPU]", None, ["ggml_CPU"])
    assert one == two == "conformance/test_ops.py::test_binary[add-f32_f32]"


@pytest.mark.parametrize("text", ["0/4", "5/4", "2", "a/b", "1/0"])
def test_bad_shard_values(text: str) -> None:
    with pytest.raises(ValueError, match="--shard"):
        parse_shard(text)
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--device", "golden", "--shard", text],
                          capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert re.search("--shard", proc.stderr)


def _run_shard(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--device", "golden", "-k", SELECTION,
                           "--out", str(out), *extra], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=600)


def _report(tmp_path: Path, *inputs: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance.cli", "report",
                           *[str(path / "results.jsonl") for path in inputs], "-o", str(tmp_path / "merged.html")],
                          capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          timeout=300)


def test_merged_shards_equal_the_unsharded_run_and_a_missing_one_is_named(tmp_path: Path) -> None:
    from results.load import load_results
    from results.shards import missing_shard_reasons, shard_sets

    whole = tmp_path / "whole"
    assert _run_shard(whole).returncode == 0
    parts = [tmp_path / f"shard{k}" for k in range(1, 5)]
    for k, part in enumerate(parts, start=1):
        proc = _run_shard(part, "--shard", f"{k}/4")
        assert proc.returncode == 0, proc.stderr[-2000:]

    def test_ids(*runs: Path) -> set[str]:
        return {case["test_id"] for run in runs for case in load_results(run / "results.jsonl").cases}

    assert test_ids(*parts) == test_ids(whole) and test_ids(whole)
    files = [load_results(part / "results.jsonl") for part in parts]
    (found,) = shard_sets(files)
    assert found.count == 4 and not found.missing and found.tests_present == found.selected
    assert missing_shard_reasons(files) == []
    merged = _report(tmp_path, *parts)
    assert merged.returncode == 0 and "PARTIAL" not in merged.stdout, merged.stdout + merged.stderr

    # a host that did not report: its shard is named, and the merge reads as partial
    gone = next(k for k in range(1, 5) if found.tests_by_shard[k] > 0)
    rest = [part for k, part in enumerate(parts, start=1) if k != gone]
    reasons = missing_shard_reasons(load_results(part / "results.jsonl") for part in rest)
    assert len(reasons) == 1 and f"shard {gone}/4 " in reasons[0], reasons
    short = _report(tmp_path, *rest)
    assert "(PARTIAL run)" in short.stdout and f"shard {gone}/4 " in short.stderr, short.stdout + short.stderr
    assert f"shard {gone}/4 " in (tmp_path / "merged.html").read_text()

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

"""Moving known-bug entries between Python and TOML (or any refactor of the lists) keeps their behaviour:
every entry is evaluated on the 14,286 cases drawn for the snapshot (scripts/known_bugs_snapshot.py, 60
derandomized draws per op × dtype signature; the matches were taken before any entry moved to
device/ggml/*.toml, and every entry's fields were dumped identical to that commit's after each move) for
Vulkan0 0.25.1 and CPU 0.20.2 / 0.25.1 / 0.17.0, and must match exactly the cases it matched then, with
the same outcomes, flags, reason, repro and bound. A deliberate change to a list rewrites the snapshot
(the script), in the same commit, with the reason."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "tests" / "data" / "known_bugs_snapshot.json.gz"
sys.path.insert(0, str(ROOT / "scripts"))

import known_bugs_snapshot  # noqa: E402


@pytest.fixture(scope="module")
def snapshot() -> dict[str, Any]:
    with gzip.open(SNAPSHOT, "rt", encoding="utf-8") as handle:
        data: dict[str, Any] = json.load(handle)
    return data


@pytest.fixture(scope="module")
def now(snapshot: dict[str, Any]) -> dict[str, Any]:
    return known_bugs_snapshot.evaluate(snapshot["case_ids"])


def test_the_snapshot_is_large_and_matches_every_entry(snapshot: dict[str, Any]) -> None:
    assert len(snapshot["case_ids"]) > 10_000
    matched = {bug for row in snapshot["matches"].values() for ids in row.values() for bug in ids}
    # entries no drawn case reaches are checked by their summary only (their repro is matched by its own entry:
    # tests/test_known_bugs_vulkan.py); most are reached
    assert len(matched) >= 0.75 * len(snapshot["entries"])


def test_every_entry_matches_the_same_cases(snapshot: dict[str, Any], now: dict[str, Any]) -> None:
    before, after = snapshot["matches"], now["matches"]
    changed = [case_id for case_id in set(before) | set(after) if before.get(case_id) != after.get(case_id)]
    assert not changed, f"{len(changed)} cases matched differently, e.g. {changed[0]}: " \
                        f"{before.get(changed[0])} then, {after.get(changed[0])} now"


def test_every_entry_keeps_what_it_does(snapshot: dict[str, Any], now: dict[str, Any]) -> None:
    assert set(now["entries"]) == set(snapshot["entries"])
    differ = {i: (snapshot["entries"][i], now["entries"][i]) for i in now["entries"]
              if now["entries"][i] != snapshot["entries"][i]}
    assert not differ

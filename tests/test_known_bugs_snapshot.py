"""Moving known-bug entries between files, merging them, or any refactor of the lists keeps their
behaviour: every op entry is evaluated on the op cases stored in the snapshot (scripts/known_bugs_snapshot.py:
60 derandomized draws per op × dtype signature, kept across rewrites) and every graph entry on the stored graph
cases, for each (device, release) a backend's list names (CPU 0.17.0 / 0.20.2 / 0.25.1, Vulkan0 0.9.7 / 0.25.1,
each with the build unknown and, where entries name llama.cpp builds, at the known builds around them:
Vulkan0@0.9.7+b8179; and
any backend added since), and must match exactly the cases it matched then, with the same outcomes, flags,
reason, repro and bound. A deliberate change to a list rewrites the snapshot (the command in each failure),
in the same commit, with the reason."""

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

REGENERATE = (f"if the change is deliberate, rewrite the snapshot with `{known_bugs_snapshot.COMMAND}` and commit it "
              "with the list change, saying why")


@pytest.fixture(scope="module")
def snapshot() -> dict[str, Any]:
    with gzip.open(SNAPSHOT, "rt", encoding="utf-8") as handle:
        data: dict[str, Any] = json.load(handle)
    return data


@pytest.fixture(scope="module")
def now(snapshot: dict[str, Any]) -> dict[str, Any]:
    return known_bugs_snapshot.evaluate(snapshot["case_ids"], snapshot["graph_case_ids"])


def test_the_snapshot_is_large_and_matches_most_entries(snapshot: dict[str, Any]) -> None:
    assert len(snapshot["case_ids"]) > 10_000 and len(snapshot["graph_case_ids"]) > 1_000
    matched = {bug for row in snapshot["matches"].values() for ids in row.values() for bug in ids}
    # entries no drawn case reaches are checked by their summary only (their repro is matched by its own entry:
    # tests/test_known_bugs_lists.py); most are reached
    assert len(matched) >= 0.75 * len({key.split("/")[0] for key in snapshot["entries"]})
    assert {bug for row in snapshot["graph_matches"].values() for ids in row.values() for bug in ids} == set(
        snapshot["graph_entries"])


def test_every_backend_is_evaluated(snapshot: dict[str, Any], now: dict[str, Any]) -> None:
    assert now["targets"] == snapshot["targets"], (
        f"the lists now name {now['targets']}, the snapshot was taken for {snapshot['targets']}: {REGENERATE}")


def _changed(before: dict[str, Any], after: dict[str, Any], what: str) -> str:
    changed = [case_id for case_id in {**before, **after} if before.get(case_id) != after.get(case_id)]
    if not changed:
        return ""
    first = changed[0]
    return (f"{len(changed)} {what} matched differently, e.g. {first}: {before.get(first)} in the snapshot, "
            f"{after.get(first)} now; {REGENERATE}")


def test_every_entry_matches_the_same_cases(snapshot: dict[str, Any], now: dict[str, Any]) -> None:
    problem = _changed(snapshot["matches"], now["matches"], "op cases")
    assert not problem, problem


def test_every_graph_entry_matches_the_same_cases(snapshot: dict[str, Any], now: dict[str, Any]) -> None:
    problem = _changed(snapshot["graph_matches"], now["graph_matches"], "graph cases")
    assert not problem, problem


@pytest.mark.parametrize("kind", ["entries", "graph_entries"])
def test_every_entry_keeps_what_it_does(snapshot: dict[str, Any], now: dict[str, Any], kind: str) -> None:
    gone, new = sorted(set(snapshot[kind]) - set(now[kind])), sorted(set(now[kind]) - set(snapshot[kind]))
    assert not gone and not new, f"entries gone: {gone}; entries new: {new}; {REGENERATE}"
    differ = {key: (snapshot[kind][key], now[kind][key]) for key in now[kind] if now[kind][key] != snapshot[kind][key]}
    assert not differ, f"{len(differ)} entries changed, e.g. {next(iter(differ.items()))}; {REGENERATE}"


def test_the_diff_script_applies_renames_and_sees_a_reorder() -> None:
    """scripts/known_bugs_snapshot_diff.py: a fold renames ids on purpose; another order of the same entries is
    a change (the first covering entry with the outcome explains a case)."""
    import known_bugs_snapshot_diff as diff

    def snap(ids: list[str]) -> dict[str, Any]:
        return {"matches": {"c": {"T": ids}}, "entries": {f"{i}/X": {} for i in ids}, "graph_matches": {},
                "graph_entries": {}}

    assert diff.compare(snap(["a", "b"]), snap(["n", "b"]), {"a": "n"}) == []
    assert diff.compare(snap(["a", "b"]), snap(["n", "b"]), {})
    assert diff.compare(snap(["a", "b"]), snap(["b", "n"]), {"a": "n"})

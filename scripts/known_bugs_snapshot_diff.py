"""What a change to the known-bug lists changes in the snapshot, before it is rewritten: the lists as they are
now are evaluated on the snapshot's stored cases and compared per target (device@release[+build]), with ids
renamed where entries were folded or moved on purpose.

    python scripts/known_bugs_snapshot_diff.py tests/data/known_bugs_snapshot.json.gz \\
        --rename vulkan-argsort-misaligned-view=vulkan-misaligned-view ...

Prints, per target, the (case, entry) matches before and after and how many cases differ (in the entries
or their order); then the op entries
(``id/op``) whose summary differs. Exit 0 where, renames applied, nothing differs.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import known_bugs_snapshot  # noqa: E402


def _renamed(matches: dict[str, dict[str, list[str]]], rename: dict[str, str]) -> dict[str, dict[str, list[str]]]:
    return {case: {target: [rename.get(i, i) for i in ids] for target, ids in row.items()}
            for case, row in matches.items()}


def _pairs(matches: dict[str, dict[str, list[str]]]) -> dict[str, set[tuple[str, str]]]:
    out: dict[str, set[tuple[str, str]]] = {}
    for case, row in matches.items():
        for target, ids in row.items():
            out.setdefault(target, set()).update((case, i) for i in ids)
    return out


def _reordered(before: dict[str, dict[str, list[str]]], after: dict[str, dict[str, list[str]]],
               target: str) -> set[str]:
    """Cases matched by the same entries in another order (the first match is the one a record carries)."""
    return {case for case, row in before.items() if target in row and target in after.get(case, {})
            and row[target] != after[case][target] and set(row[target]) == set(after[case][target])}


def compare(old: dict[str, Any], now: dict[str, Any], rename: dict[str, str]) -> list[str]:
    """The differences (empty: none), after printing the per-target figures."""
    problems: list[str] = []
    for kind, entries in (("matches", "entries"), ("graph_matches", "graph_entries")):
        old_renamed = _renamed(old[kind], rename)
        before, after = _pairs(old_renamed), _pairs(now[kind])
        for target in sorted({*before, *after}):
            b, a = before.get(target, set()), after.get(target, set())
            cases = {c for c, _ in b ^ a} | _reordered(old_renamed, now[kind], target)
            print(f"{kind} {target}: {len(b)} (case, entry) before, {len(a)} after, {len(cases)} cases differ")
            if cases:
                problems.append(f"{kind} {target}: {len(cases)} cases differ, e.g. {sorted(cases)[0]}")
        renamed_entries = {_rename_key(k, rename): v for k, v in old[entries].items()}
        gone, new = set(renamed_entries) - set(now[entries]), set(now[entries]) - set(renamed_entries)
        differ = [k for k in set(renamed_entries) & set(now[entries]) if renamed_entries[k] != now[entries][k]]
        print(f"{entries}: {len(old[entries])} before, {len(now[entries])} after; gone {sorted(gone)}, "
              f"new {sorted(new)}, differ {sorted(differ)}")
        if gone or new or differ:
            problems.append(f"{entries}: gone {len(gone)}, new {len(new)}, differ {len(differ)}")
    return problems


def _rename_key(key: str, rename: dict[str, str]) -> str:
    bug_id, slash, op = key.partition("/")
    return rename.get(bug_id, bug_id) + slash + op


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("snapshot")
    parser.add_argument("--rename", action="append", default=[], metavar="OLD=NEW")
    args = parser.parse_args(argv)
    rename = dict(item.split("=", 1) for item in args.rename)
    with gzip.open(args.snapshot, "rt", encoding="utf-8") as handle:
        old = json.load(handle)
    now = known_bugs_snapshot.evaluate(old["case_ids"], old["graph_case_ids"])
    if now["targets"] != old["targets"]:
        print(f"targets: {old['targets']} before, {now['targets']} after")
    problems = compare(old, now, rename)
    for problem in problems:
        print(f"DIFFERS: {problem}")
    return 1 if problems or now["targets"] != old["targets"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

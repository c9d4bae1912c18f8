"""Which known-bug entries match which drawn cases: a snapshot to compare the lists against after a change
that must not change behaviour (moving entries between files, merging entries, renaming a helper).

    python scripts/known_bugs_snapshot.py tests/data/known_bugs_snapshot.json.gz   # write
    python scripts/known_bugs_snapshot.py --keep-cases tests/data/known_bugs_snapshot.json.gz  # the stored cases only
    pytest tests/test_known_bugs_snapshot.py                                      # compare

Op cases are drawn from the suite's own strategies, derandomized, PER_SIGNATURE per op × dtype signature,
and graph cases GRAPH_PER_SIGNATURE per pattern × signature (× variant); each is evaluated against every
entry of its tier for each (device, release) of every backend's list with the build unknown, and, where a
backend's entries name llama.cpp builds, for the known builds around them (``device.known_bugs.build_targets``:
``Vulkan0@0.9.7+b8179``).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PER_SIGNATURE = 60
GRAPH_PER_SIGNATURE = 40
COMMAND = "python scripts/known_bugs_snapshot.py tests/data/known_bugs_snapshot.json.gz"


def _draw(strategy: Any, count: int) -> list[str]:
    from hypothesis import HealthCheck, Phase, given, settings

    drawn: list[str] = []

    @settings(max_examples=count, derandomize=True, phases=[Phase.generate], database=None,
              deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(case: Any) -> None:
        drawn.append(case.case_id)

    collect()
    return drawn


def draw_case_ids(per_signature: int = PER_SIGNATURE) -> list[str]:
    from conformance import cases
    from golden import catalogue

    cases.load_all()
    found: dict[str, None] = {}
    for spec in catalogue.OPS.values():
        for signature in spec.all_signatures:
            found.update(dict.fromkeys(_draw(cases.strategy_for(spec.name, signature), per_signature)))
    return list(found)


def draw_graph_case_ids(per_signature: int = GRAPH_PER_SIGNATURE) -> list[str]:
    from conformance.graph_strategies import VARIANTS, graph_strategy
    from golden.graphs.registry import patterns

    found: dict[str, None] = {}
    for name, pattern in patterns().items():
        for signature in pattern.signatures:
            variants = VARIANTS[name][1] if name in VARIANTS else (None,)
            for variant in variants:
                found.update(dict.fromkeys(_draw(graph_strategy(name, signature, variant), per_signature)))
    return list(found)


def targets() -> list[tuple[str, str, str | None]]:
    """Every (device name, release, build) some backend's list names (build None: unknown)."""
    from device import known_bugs

    return list(known_bugs.build_targets())


def entry_summary(bug: Any) -> dict[str, Any]:
    """What an op entry does besides matching: identical behaviour means these are identical too."""
    return {"op": bug.op, "devices": bug.devices, "releases": list(bug.releases), "outcomes": list(bug.outcomes),
            "corrupts_process": bug.corrupts_process, "may_hang": bug.may_hang, "repro": bug.repro,
            "reason": bug.reason, "tolerance": bug.tolerance.describe() if bug.tolerance is not None else None,
            "after_history": bug.after_history, "tags": list(bug.tags),
            "release_range": list(bug.release_range) if bug.release_range is not None else None} | _builds(bug)


def _builds(bug: Any) -> dict[str, Any]:
    """The build conditions, for an entry that names any (an entry without keeps the summary it had)."""
    if not bug.names_builds:
        return {}
    return {"builds": list(bug.builds), "build_range": list(bug.build_range) if bug.build_range else None}


def graph_entry_summary(bug: Any) -> dict[str, Any]:
    return {"devices": bug.devices, "releases": list(bug.releases), "outcomes": list(bug.outcomes),
            "corrupts_process": bug.corrupts_process, "isolated": bug.isolated, "repro": bug.repro,
            "reason": bug.reason} | _builds(bug)


def evaluate(case_ids: list[str], graph_case_ids: list[str] | None = None) -> dict[str, Any]:
    from device import known_bugs
    from golden.case import parse_case_id
    from golden.graphs.case import parse_graph_id

    where = targets()
    bugs = known_bugs.all_known_bugs()
    matches: dict[str, dict[str, list[str]]] = {}
    for case_id in case_ids:
        case = parse_case_id(case_id)
        row = {known_bugs.target_label(*w): [b.id for b in bugs if b.matches(case, *w)] for w in where}
        row = {k: v for k, v in row.items() if v}
        if row:
            matches[case_id] = row
    graph_bugs = known_bugs.all_graph_bugs()
    graph_matches: dict[str, dict[str, list[str]]] = {}
    for case_id in graph_case_ids or []:
        graph = parse_graph_id(case_id)
        row = {known_bugs.target_label(*w): [b.id for b in graph_bugs if b.matches(graph, *w)] for w in where}
        row = {k: v for k, v in row.items() if v}
        if row:
            graph_matches[case_id] = row
    return {"targets": [known_bugs.target_label(*w) for w in where],
            "entries": {f"{b.id}/{b.op}": entry_summary(b) for b in bugs}, "matches": matches,
            "graph_entries": {b.id: graph_entry_summary(b) for b in graph_bugs}, "graph_matches": graph_matches}


def main(argv: list[str]) -> int:
    # --keep-cases: re-evaluate the stored cases without drawing more (a rename or a fold, where the figures
    # before and after should be over the same cases; scripts/known_bugs_snapshot_diff.py compares them)
    keep = "--keep-cases" in argv
    argv = [a for a in argv if a != "--keep-cases"]
    if len(argv) != 1 or (keep and not Path(argv[0]).exists()):
        print("usage: known_bugs_snapshot.py [--keep-cases] OUT.json.gz (--keep-cases: OUT must exist)",
              file=sys.stderr)
        return 2
    case_ids, graph_case_ids = ([], []) if keep else (draw_case_ids(), draw_graph_case_ids())
    if Path(argv[0]).exists():  # the cases of the snapshot being rewritten stay, first: a rewrite only adds
        with gzip.open(argv[0], "rt", encoding="utf-8") as old:
            kept = json.load(old)
        case_ids = list(dict.fromkeys([*kept.get("case_ids", []), *case_ids]))
        graph_case_ids = list(dict.fromkeys([*kept.get("graph_case_ids", []), *graph_case_ids]))
    snapshot = {"case_ids": case_ids, "graph_case_ids": graph_case_ids, **evaluate(case_ids, graph_case_ids)}
    with gzip.open(argv[0], "wt", encoding="utf-8") as out:
        json.dump(snapshot, out, sort_keys=True)
    print(f"{len(case_ids)} op cases, {len(snapshot['entries'])} op entries, {len(snapshot['matches'])} matched; "
          f"{len(graph_case_ids)} graph cases, {len(snapshot['graph_entries'])} graph entries, "
          f"{len(snapshot['graph_matches'])} matched; targets {', '.join(snapshot['targets'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

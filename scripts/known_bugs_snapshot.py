"""Which known-bug entries match which drawn cases: a snapshot to compare the lists against after a change
that must not change behaviour (moving entries from Python to TOML, reordering, renaming a helper).

    python scripts/known_bugs_snapshot.py tests/data/known_bugs_snapshot.json.gz   # write
    tests/test_known_bugs_snapshot.py                                           # compare

Cases are drawn from the suite's own strategies, derandomized, PER_SIGNATURE per op × dtype signature;
each is evaluated against every entry for each (device, release) below.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PER_SIGNATURE = 60
TARGETS = (("Vulkan0", "0.25.1"), ("CPU", "0.20.2"), ("CPU", "0.25.1"), ("CPU", "0.17.0"))


def draw_case_ids(per_signature: int = PER_SIGNATURE) -> list[str]:
    from hypothesis import HealthCheck, Phase, given, settings

    from conformance import cases
    from golden import catalogue

    cases.load_all()
    found: dict[str, None] = {}
    for spec in catalogue.OPS.values():
        for signature in spec.all_signatures:
            drawn: list[str] = []

            @settings(max_examples=per_signature, derandomize=True, phases=[Phase.generate], database=None,
                      deadline=None, suppress_health_check=list(HealthCheck))
            @given(cases.strategy_for(spec.name, signature))
            def collect(case: Any) -> None:
                drawn.append(case.case_id)  # noqa: B023 (collected at once)

            collect()
            found.update(dict.fromkeys(drawn))
    return list(found)


def entry_summary(bug: Any) -> dict[str, Any]:
    """What an entry does besides matching: identical behaviour means these are identical too."""
    return {"op": bug.op, "devices": bug.devices, "releases": list(bug.releases), "outcomes": list(bug.outcomes),
            "corrupts_process": bug.corrupts_process, "may_hang": bug.may_hang, "repro": bug.repro,
            "reason": bug.reason, "tolerance": bug.tolerance.describe() if bug.tolerance is not None else None}


def evaluate(case_ids: list[str]) -> dict[str, Any]:
    from device import known_bugs
    from golden.case import parse_case_id

    bugs = known_bugs.all_known_bugs()
    matches: dict[str, dict[str, list[str]]] = {}
    for case_id in case_ids:
        case = parse_case_id(case_id)
        row = {f"{name}@{release}": [b.id for b in bugs if b.matches(case, name, release)]
               for name, release in TARGETS}
        row = {k: v for k, v in row.items() if v}
        if row:
            matches[case_id] = row
    return {"entries": {f"{b.id}/{b.op}": entry_summary(b) for b in bugs}, "matches": matches}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: known_bugs_snapshot.py OUT.json.gz", file=sys.stderr)
        return 2
    case_ids = draw_case_ids()
    snapshot = {"case_ids": case_ids, **evaluate(case_ids)}
    with gzip.open(argv[0], "wt", encoding="utf-8") as out:
        json.dump(snapshot, out, sort_keys=True)
    print(f"{len(case_ids)} cases, {len(snapshot['entries'])} entries, {len(snapshot['matches'])} cases matched")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

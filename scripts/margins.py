"""Worst error_ratio (and aggregate_ratio) per op × dtype signature × prec over results files: the
margins the tolerance rows leave on a device. Usage: python scripts/margins.py RESULTS.jsonl..."""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def main(paths: list[str]) -> None:
    rows: dict[tuple[str, str, str], dict[str, float]] = defaultdict(
        lambda: {"judged": 0, "expected": 0, "fail": 0, "element": 0.0, "aggregate": 0.0})
    for path in paths:
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r.get("type") != "case":
                    continue
                sig = "_".join(str(v) for v in r["dtypes"].values())
                key = (r["op"], sig, str(r["params"].get("prec", "")))
                row = rows[key]
                if r.get("expected"):
                    row["expected"] += 1
                    continue
                row["judged"] += 1
                if r["outcome"] != "pass":
                    row["fail"] += 1
                m = r.get("metrics") or {}
                row["element"] = max(row["element"], float(m.get("error_ratio", 0.0)))
                row["aggregate"] = max(row["aggregate"], float(m.get("aggregate_ratio", 0.0)))
    print(f"{'op':16} {'signature':24} {'prec':8} {'judged':>6} {'known':>6} {'fail':>5} "
          f"{'elem max':>9} {'aggr max':>9}")
    for (op, sig, prec), row in sorted(rows.items()):
        print(f"{op:16} {sig:24} {prec:8} {row['judged']:6d} {row['expected']:6d} {row['fail']:5d} "
              f"{row['element']:9.3g} {row['aggregate']:9.3g}")


if __name__ == "__main__":
    main(sys.argv[1:])

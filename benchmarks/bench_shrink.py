"""How far Hypothesis shrinks each faulty plug-in's failure, and in how many steps.

For each planted fault in tests/plugins (or those named), runs the ci profile of the tests that must
catch it (``-x``: the first failing test) and prints, per plug-in: the first failing case, the case
pytest reports (the shrunk one), their element counts, and the shrink steps (case records after the
first failure). A fault that shows at any size should end at one element per tensor.

Run: python benchmarks/bench_shrink.py [--profile ci] [FACTORY ...]   (e.g. erf_gelu_quick sub_swapped)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout, not installed

from tests.plugins import all_planted  # noqa: E402

REPRO = re.compile(r"reproduce: conform repro '([^']+)'")
SHAPE = re.compile(r"ne\d*=\[([\d,]+)\]")


def elements(case_id: str) -> int:
    return sum(math.prod(int(n) for n in shape.split(",")) for shape in SHAPE.findall(case_id))


def measure(spec: str, select: str, profile: str) -> tuple[str, str, int, float]:
    """(first failing case, reported case, shrink steps, seconds) for one plug-in."""
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "r.jsonl"
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "conformance", "-q", "-x", "-p", "no:cacheprovider", "--device", spec,
             "-k", select, "--conform-profile", profile, "--results", str(results), "-W", "ignore::DeprecationWarning"],
            cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=1800)
        seconds = time.perf_counter() - start
        reported = REPRO.findall(proc.stdout)
        records = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    cases = [r for r in records if r.get("type") == "case"]
    first = next((i for i, r in enumerate(cases) if r["outcome"] in ("fail", "crash", "timeout", "error")
                  and not r.get("expected")), None)
    if first is None or not reported:
        return "", "", 0, seconds
    failing_test = cases[first]["test_id"]
    steps = sum(1 for r in cases[first + 1:] if r["test_id"] == failing_test)
    return cases[first]["case_id"], reported[0], steps, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("factories", nargs="*", help="only these plug-in factories (default: every planted fault)")
    parser.add_argument("--profile", default="ci", help="hypothesis profile (default ci)")
    args = parser.parse_args()
    faults = [f for f in all_planted() if not args.factories or f.spec.rsplit(":", 1)[-1] in args.factories]
    print(f"{'plug-in':<34} {'steps':>5} {'first':>7} {'shrunk':>7} {'s':>6}  reported case")
    for fault in faults:
        first, reported, steps, seconds = measure(fault.spec, fault.select, args.profile)
        name = fault.spec.rsplit(":", 1)[-1]
        if not reported:
            print(f"{name:<34} {'-':>5} {'-':>7} {'-':>7} {seconds:6.1f}  (not caught)")
            continue
        print(f"{name:<34} {steps:5d} {elements(first):7d} {elements(reported):7d} {seconds:6.1f}  {reported}",
              flush=True)


if __name__ == "__main__":
    main()

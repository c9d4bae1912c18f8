"""Where CI's time goes: per step, per test module, and the slowest tests, with their share.

Subcommands (each prints a table; nothing here asserts a time):
  junit FILE...   pytest --junitxml output (one or more files, e.g. the harness tests and the
                  conformance suite): the tests' summed time, each module's share, the 30 slowest tests;
                  --marked IDS (a file of test ids, e.g. from `pytest -m slow --collect-only -q`): their
                  summed time and share beside the rest's (the fast default's)
  durations LOG   pytest --durations=0 output (setup, call and teardown lines): the same tables, with
                  setup and teardown counted into their test
  steps LOG...    .ci/run and .ci/backends output: each step's (part's) minutes and share, from the
                  closing summary lines ("ci: passed in 12.3 min: ruff pass (0.1 min), ...")
  time LABEL -- COMMAND...
                  runs COMMAND and prints its wall seconds, the CPU seconds of it and all the children it
                  waited for, and the 1-minute load average before and after (others' work on a shared
                  machine inflates wall time, not CPU time: compare CPU seconds across runs)
A pytest run under xdist (-n 2) reports each test's wall time in its worker, so the summed test time is
about the workers' busy time, not the step's wall time.
Run: python benchmarks/bench_ci.py junit /tmp/junit.xml [--top 30]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

DURATION_LINE = re.compile(r"^\s*([0-9.]+)s\s+(setup|call|teardown)\s+(\S.*?)\s*$")
SUMMARY_LINE = re.compile(r"^(ci(?:/backends)?): (passed|FAILED \(exit \d+\)) in ([0-9.]+) min: (.*)$")
PART = re.compile(r"^(.*?) (pass|FAIL) \(([0-9.]+) min\)$|^(.*?) skipped$")


def junit_times(paths: list[Path]) -> dict[str, float]:
    """Test id (file::name) -> seconds, summed over the junit files."""
    times: dict[str, float] = defaultdict(float)
    for path in paths:
        for case in ET.parse(path).getroot().iter("testcase"):
            classname = case.get("classname", "")
            # junit's classname is the dotted module (and class); make it a path again
            module = classname.replace(".", "/") + ".py" if classname else "?"
            times[f"{module}::{case.get('name', '?')}"] += float(case.get("time", "0") or 0)
    return times


def duration_times(path: Path) -> dict[str, float]:
    times: dict[str, float] = defaultdict(float)
    for line in path.read_text(errors="replace").splitlines():
        match = DURATION_LINE.match(line)
        if match:
            times[match.group(3)] += float(match.group(1))
    return times


def module_of(test_id: str) -> str:
    return test_id.split("::", 1)[0]


def print_tests(times: dict[str, float], top: int, marked: Path | None = None) -> None:
    total = sum(times.values())
    if not times or total <= 0:
        print("no test times found", file=sys.stderr)
        raise SystemExit(2)
    print(f"{len(times)} tests, {total:.0f} s summed test time")
    if marked is not None:
        ids = {line.strip() for line in marked.read_text().splitlines() if "::" in line}
        in_marked = {test_id: seconds for test_id, seconds in times.items() if test_id in ids}
        seconds = sum(in_marked.values())
        print(f"marked ({marked.name}): {len(in_marked)} tests, {seconds:.0f} s ({seconds / total:.1%}); "
              f"the rest: {len(times) - len(in_marked)} tests, {total - seconds:.0f} s ({1 - seconds / total:.1%})")
    per_module: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for test_id, seconds in times.items():
        per_module[module_of(test_id)] += seconds
        counts[module_of(test_id)] += 1
    print(f"\n{'module':<48} {'tests':>5} {'seconds':>8} {'share':>6}")
    for module, seconds in sorted(per_module.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{module:<48} {counts[module]:>5} {seconds:>8.1f} {seconds / total:>6.1%}")
    print(f"\n{'slowest tests':<88} {'seconds':>8} {'share':>6} {'cum.':>6}")
    cumulative = 0.0
    for test_id, seconds in sorted(times.items(), key=lambda kv: -kv[1])[:top]:
        cumulative += seconds
        print(f"{test_id[:88]:<88} {seconds:>8.1f} {seconds / total:>6.1%} {cumulative / total:>6.1%}")


def print_steps(paths: list[Path]) -> None:
    found = False
    for path in paths:
        for line in path.read_text(errors="replace").splitlines():
            match = SUMMARY_LINE.match(line.strip())
            if not match:
                continue
            found = True
            label, verdict, minutes, parts = match.group(1), match.group(2), float(match.group(3)), match.group(4)
            print(f"{label}: {verdict}, {minutes:.1f} min")
            for part in parts.split(", "):
                part_match = PART.match(part)
                if not part_match:
                    continue
                if part_match.group(4) is not None:
                    print(f"  {part_match.group(4):<32} skipped")
                    continue
                name, state, part_minutes = part_match.group(1), part_match.group(2), float(part_match.group(3))
                share = part_minutes / minutes if minutes else 0.0
                print(f"  {name:<32} {state:<4} {part_minutes:>6.1f} min {share:>6.1%}")
    if not found:
        print("no ci summary line found (the last line of .ci/run or .ci/backends)", file=sys.stderr)
        raise SystemExit(2)


def time_command(label: str, command: list[str]) -> int:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    rc = subprocess.call(command)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"{label}: exit {rc}, {wall:.0f} s wall, {cpu:.0f} CPU s, load {load_before:.1f} -> "
          f"{os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)", file=sys.stderr)
    return rc


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p_junit = sub.add_parser("junit")
    p_junit.add_argument("files", nargs="+", type=Path)
    p_junit.add_argument("--top", type=int, default=30)
    p_junit.add_argument("--marked", type=Path)
    p_dur = sub.add_parser("durations")
    p_dur.add_argument("log", type=Path)
    p_dur.add_argument("--top", type=int, default=30)
    p_steps = sub.add_parser("steps")
    p_steps.add_argument("logs", nargs="+", type=Path)
    p_time = sub.add_parser("time")
    p_time.add_argument("label")
    p_time.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    inputs = [*getattr(args, "files", []), *getattr(args, "logs", []), *([args.log] if "log" in args else []),
              *([args.marked] if getattr(args, "marked", None) else [])]
    for path in inputs:
        if not path.is_file():
            print(f"bench_ci: no such file: {path}", file=sys.stderr)
            return 2
    try:
        if args.what == "junit":
            print_tests(junit_times(args.files), args.top, args.marked)
        elif args.what == "durations":
            print_tests(duration_times(args.log), args.top)
        elif args.what == "steps":
            print_steps(args.logs)
        else:
            command = args.command[1:] if args.command[:1] == ["--"] else args.command
            if not command:
                print("bench_ci: time needs a command after --", file=sys.stderr)
                return 2
            return time_command(args.label, command)
    except ET.ParseError as exc:
        print(f"bench_ci: not a junit XML file: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

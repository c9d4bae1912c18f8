"""Cases per second of the conformance suite end to end, and where the time goes.

Runs a fixed selection of the suite in this process (pytest, the conform plug-in, a fixed number of
Hypothesis examples per test from a fixed seed) on one device, with a stage clock attached to the
harness (``conformance/stages.py``), and prints the cases per second and each stage's share:
generation (Hypothesis), inputs, golden, device round trip, verdict, record, plus pytest's own time
and the start-up (imports, collection, opening the device).

Run: python benchmarks/bench_throughput.py [--examples 100] [--seed 1] [-k SELECTION] [--device ggml:CPU]
     python benchmarks/bench_throughput.py --crashes     # a crash-heavy selection (-k "add and f32")
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402
from hypothesis import HealthCheck, Phase, settings  # noqa: E402

from conformance.stages import Stage, StageClock  # noqa: E402

NIGHTLY_LIKE = "add or gelu or soft_max or rms_norm or mul_mat or get_rows or cpy"
CRASH_HEAVY = "add and f32"  # ggml:CPU aborts on some layouts of ADD's F32 signatures (known bugs)


class ClockPlugin:
    """Attaches the stage clock to the harness of each test and laps around the test bodies."""

    def __init__(self, clock: StageClock) -> None:
        self.clock = clock
        self.started = False
        self.harnesses: dict[int, Any] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        harness = getattr(item, "funcargs", {}).get("conform")
        if harness is not None:
            harness.clock = self.clock
            self.harnesses[id(harness)] = harness
        # before the first test body: imports, collection, the device opening (fixture set-up)
        self.clock.lap(Stage.PYTEST if self.started else Stage.STARTUP)
        self.started = True
        yield
        self.clock.lap(Stage.GENERATION)  # what the test did after its last case: Hypothesis' engine


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100, help="Hypothesis examples per test (default 100)")
    parser.add_argument("--seed", type=int, default=1, help="Hypothesis seed (default 1)")
    parser.add_argument("-k", dest="select", default=None, help=f"test selection (default {NIGHTLY_LIKE!r})")
    parser.add_argument("--crashes", action="store_true", help=f"the crash-heavy selection -k {CRASH_HEAVY!r}")
    parser.add_argument("--device", default="ggml:CPU")
    parser.add_argument("--quiet", action="store_true", help="no pytest output")
    args = parser.parse_args()
    select = args.select or (CRASH_HEAVY if args.crashes else NIGHTLY_LIKE)

    settings.register_profile(
        "bench", max_examples=args.examples, deadline=None, database=None, print_blob=False,
        suppress_health_check=list(HealthCheck), phases=list(Phase),
    )
    clock = StageClock(keep_laps=True)
    plugin = ClockPlugin(clock)
    out = tempfile.mkdtemp(prefix="bench-throughput-")
    results = os.path.join(out, "results.jsonl")
    argv = ["conformance", "-p", "no:cacheprovider", "-q" if not args.quiet else "-qq", "--tb=line",
            "-k", select, "--device", args.device, "--hypothesis-profile", "bench",
            f"--hypothesis-seed={args.seed}", "--results", results, "-W", "ignore::DeprecationWarning",
            "-W", "ignore::pytest.PytestAssertRewriteWarning"]
    os.chdir(ROOT)
    start = time.perf_counter()
    exit_code = pytest.main(argv, plugins=[plugin])
    clock.lap(Stage.PYTEST)  # teardown, closing the device, the summary
    wall = time.perf_counter() - start
    try:  # the workers are the fork server's children: its CPU time includes theirs once it has ended
        from device.worker import close_fork_server
    except ImportError:  # a tree from before the fork server
        pass
    else:
        close_fork_server()
    usage_self = resource.getrusage(resource.RUSAGE_SELF)
    usage_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    restarts = sum(getattr(getattr(h, "runner", None), "restarts", 0) for h in plugin.harnesses.values())
    counts: dict[str, int] = {}
    for h in plugin.harnesses.values():
        for k, v in h.counts.items():
            counts[k] = counts.get(k, 0) + v

    with open(results) as fh:  # counted from the results: also right for a tree whose harness has no clock
        cases = sum('"type":"case"' in line for line in fh)
    print()
    print(f"selection -k {select!r} on {args.device}: {args.examples} examples per test, seed {args.seed}")
    print(f"{cases} cases in {wall:.2f} s wall: {cases / wall:.1f} cases/s "
          f"({cases / max(wall - clock.seconds[Stage.STARTUP], 1e-9):.1f} cases/s after start-up)")
    print(f"outcomes {dict(sorted(counts.items()))}; worker restarts {restarts}; pytest exit code {exit_code}")
    print(f"CPU: this process {usage_self.ru_utime + usage_self.ru_stime:.2f} s, "
          f"device workers {usage_children.ru_utime + usage_children.ru_stime:.2f} s")
    if not clock.cases:
        print("(this tree's harness has no stage clock: no split by stage)")
        return 0 if exit_code in (0, 1) else int(exit_code)
    print(f"{'stage':<12}{'seconds':>9}{'share':>8}{'ms/case':>9}{'p50 ms':>9}{'p99 ms':>9}{'top 1% s':>10}")
    for stage in Stage:
        seconds = clock.seconds[stage]
        laps = sorted(clock.laps[stage]) if clock.laps else []
        p50 = laps[len(laps) // 2] * 1e3 if laps else 0.0
        p99 = laps[min(len(laps) - 1, len(laps) * 99 // 100)] * 1e3 if laps else 0.0
        top = sum(laps[len(laps) * 99 // 100:]) if laps else 0.0
        print(f"{stage.value:<12}{seconds:>9.2f}{seconds / wall:>8.1%}{seconds / max(cases, 1) * 1e3:>9.2f}"
              f"{p50:>9.2f}{p99:>9.2f}{top:>10.2f}")
    return 0 if exit_code in (0, 1) else int(exit_code)


if __name__ == "__main__":
    raise SystemExit(main())

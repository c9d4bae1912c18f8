"""What drawing a case with Hypothesis costs, and how far that is from Hypothesis' own floor.

Prints, on the CPU clock (best and median of ``--repeat`` runs of ``--examples`` examples each):

* Hypothesis' engine alone: a test that draws N integers in one composite (N = 1, 5, 10, 20), from
  which a fixed cost per example and a cost per choice follow (least squares);
* each op's case strategy (the first signature of ADD, GELU, SOFT_MAX, RMS_NORM, MUL_MAT, GET_ROWS
  and CPY, the throughput benchmark's selection): its time per example, its choices per case, and the
  floor for that many choices (fixed cost + choices × cost per choice);
* several cases per example: K draws of GELU's strategy in one example, as a batching harness would
  make them, with the share of drawn cases that are new to the test (Hypothesis' mutations rerun an
  example with one part changed, so K - 1 of its cases repeat) and the time per new case.

Run: python benchmarks/bench_generation.py [--examples 400] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, not installed

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from conformance import cases  # noqa: E402
from golden import catalogue  # noqa: E402

OPS = ("ADD", "GELU", "SOFT_MAX", "RMS_NORM", "MUL_MAT", "GET_ROWS", "CPY")
ONE_TO_HUNDRED = st.integers(1, 100)


@st.composite
def integers_drawn(draw: st.DrawFn, n: int) -> list[int]:
    return [draw(ONE_TO_HUNDRED) for _ in range(n)]


def time_test(body: Callable[[Any], None], examples: int, repeat: int) -> tuple[float, float, int]:
    """(best, median) CPU ms per example of a Hypothesis test running ``body(data)``, and its examples."""
    ran = [0]

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def test(data: st.DataObject) -> None:
        ran[0] += 1
        body(data)

    times = []
    for _ in range(repeat):
        ran[0] = 0
        start = time.process_time()
        test()
        times.append((time.process_time() - start) / ran[0] * 1e3)
    return min(times), statistics.median(times), ran[0]


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares intercept and slope."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return my - slope * mx, slope


def drawing(strategy: st.SearchStrategy[Any]) -> Callable[[st.DataObject], None]:
    def body(data: st.DataObject) -> None:
        data.draw(strategy)

    return body


def choices_per_case(strategy: st.SearchStrategy[Any], examples: int) -> float:
    counts: list[int] = []

    def body(data: st.DataObject) -> None:
        before = len(data.conjecture_data.nodes)
        data.draw(strategy)
        counts.append(len(data.conjecture_data.nodes) - before)

    time_test(body, examples, 1)
    return sum(counts) / len(counts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=400, help="examples per timed test (default 400)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs of each test (default 5)")
    args = parser.parse_args()
    if args.examples < 1 or args.repeat < 1:
        print("bench_generation: --examples and --repeat must be at least 1", file=sys.stderr)
        return 2

    print(f"CPU ms per Hypothesis example, best (median) of {args.repeat} runs of {args.examples} examples")
    print("\nHypothesis' engine alone: N integers drawn in one composite")
    points = []
    for n in (1, 5, 10, 20):
        best, median, _ = time_test(drawing(integers_drawn(n)), args.examples, args.repeat)
        points.append((n, best))
        print(f"  N = {n:<3} {best:7.3f} ({median:.3f})")
    fixed, per_choice = fit(points)
    print(f"  fixed cost {fixed:.3f} ms per example, {per_choice * 1e3:.1f} µs per choice")

    print("\ncase strategies (first signature)")
    print(f"  {'op':<10}{'signature':<12}{'ms/example':>12}{'choices':>9}{'floor ms':>10}{'over floor':>11}")
    for op in OPS:
        signature = catalogue.get(op).all_signatures[0]
        case_strategy = cases.strategy_for(op, signature)
        best, median, _ = time_test(drawing(case_strategy), args.examples, args.repeat)
        choices = choices_per_case(case_strategy, args.examples)
        floor = fixed + choices * per_choice
        print(f"  {op:<10}{signature.label():<12}{best:>12.3f}{choices:>9.1f}{floor:>10.3f}{best / floor:>10.2f}x")

    print(f"\nK GELU cases per example, {args.examples} / K examples ('new': not drawn before in the test)")
    signature = catalogue.get("GELU").all_signatures[0]
    gelu = cases.strategy_for("GELU", signature)
    for k in (1, 2, 4, 8):
        seen: set[str] = set()
        drawn = [0]

        def body(data: st.DataObject, k: int = k, seen: set[str] = seen, drawn: list[int] = drawn) -> None:
            for _ in range(k):
                seen.add(data.draw(gelu).case_id)
                drawn[0] += 1

        best, median, examples = time_test(body, max(1, args.examples // k), args.repeat)
        per_run_drawn = drawn[0] // args.repeat  # derandomized: every run draws the same cases
        new = len(seen)
        print(f"  K = {k}: {per_run_drawn} cases drawn, {new} new ({new / per_run_drawn:.0%}); "
              f"{best * examples / per_run_drawn:.3f} ms per drawn case, {best * examples / new:.3f} ms per new case")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Time ``build_report`` on a nightly-sized run: 100,000 synthetic case records on two devices.

    python benchmarks/bench_report.py [--cases N] [--keep DIR] [--screenshot PNG]

Prints the results-file size, the build time (read + analyse + render), the HTML size and, when
Chromium is installed, how long headless Chromium takes to load the report (next to an empty page,
so the browser's own start-up can be told apart).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, uninstalled

from reports.html import build_report  # noqa: E402
from tests.reports.browser import dump_dom, find_chromium, screenshot  # noqa: E402
from tests.reports.synth import make_cases, write_results  # noqa: E402


def _median_seconds(action, repeats: int = 3) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--ops", type=int, default=80, help="distinct ops (a real run has ~80)")
    parser.add_argument("--keep", type=Path, default=None, help="write the files here instead of a temp dir")
    parser.add_argument("--screenshot", type=Path, default=None, help="also save a PNG of the report")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        workdir = args.keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        extra_ops = max(0, args.ops - 8)  # the generator's 8 named ops, then SYNTH_NN
        results = write_results(workdir / "results.jsonl", make_cases(args.cases, extra_ops=extra_ops))
        baseline = write_results(workdir / "baseline.jsonl",
                                 make_cases(args.cases, seed=1, extra_ops=extra_ops))
        expectations = workdir / "expected.toml"
        expectations.write_text(
            '[[expectation]]\npattern = "FLASH_ATTN_EXT(*"\nreason = "synthetic known bug"\n'
            'category = "backend-bug"\ndevice = "ggml:CANN0"\n'
        )
        out = workdir / "report.html"
        print(f"results: {args.cases:,} case records over {args.ops} ops and 2 devices, "
              f"{results.stat().st_size / 2**20:.1f} MiB")

        start = time.perf_counter()
        data = build_report([results], out)
        plain = time.perf_counter() - start
        print(f"build_report: {plain:.2f} s -> {out.stat().st_size / 2**20:.2f} MiB HTML")

        start = time.perf_counter()
        build_report([results], out, baseline_paths=[baseline], expectations_path=expectations)
        full = time.perf_counter() - start
        listed = sum(len(cluster.shown) for cluster in data.clusters)
        size = out.stat().st_size / 2**20
        print(f"build_report with baseline + expectations: {full:.2f} s -> {size:.2f} MiB HTML")
        print(f"  {data.unexpected_failures:,} failures in {len(data.clusters):,} clusters (every cluster listed), "
              f"{listed:,} cases listed individually; {len(data.matrix)} matrix rows")

        chromium = find_chromium()
        if chromium is None:
            print("chromium: not installed, load time not measured")
            return 0
        empty = workdir / "empty.html"
        empty.write_text("<!DOCTYPE html><title>empty</title>")
        empty_s = _median_seconds(lambda: dump_dom(chromium, empty))
        report_s = _median_seconds(lambda: dump_dom(chromium, out))
        print(f"chromium --headless --dump-dom: report {report_s:.2f} s, empty page {empty_s:.2f} s "
              f"(difference {report_s - empty_s:.2f} s)")
        if args.screenshot:
            screenshot(chromium, out, args.screenshot, height=6000)
            print(f"screenshot: {args.screenshot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

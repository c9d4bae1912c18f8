"""``conform report``: results files in, one HTML report (and optionally a support CSV) out.

Bad input ends with one line on stderr and exit status 1 (argparse usage errors: 2), never a
traceback: the people running this read the message, not the stack.
"""

from __future__ import annotations

import argparse
import sys

from reports.csv_export import write_support_csv
from reports.html import build_report
from reports.load import ReportInputError

PROG = "conform report"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Build a self-contained HTML report (support matrix, per-op error, failures) "
        "from one or more results files (JSON Lines).",
    )
    parser.add_argument("results", nargs="+", metavar="RESULTS", help="results files (.jsonl); several merge")
    parser.add_argument("-o", "--output", required=True, metavar="HTML", help="the report file to write")
    parser.add_argument("--baseline", nargs="+", metavar="OLD", default=None,
                        help="results files of an earlier run to diff against")
    parser.add_argument("--expectations", metavar="FILE", default=None,
                        help="TOML file of known failures (see reports/README.md)")
    parser.add_argument("--csv", metavar="CSV", default=None,
                        help="also write llama.cpp's test-backend-ops support CSV")
    parser.add_argument("--max-failures", type=int, default=25, metavar="N",
                        help="failures listed per op and device before the rest is counted (default 25)")
    return parser


def report_main(argv: list[str] | None = None) -> int:
    """Run ``conform report``; ``argv`` is what follows ``report`` (default: ``sys.argv[1:]``)."""
    args = _parser().parse_args(argv)
    if args.max_failures < 1:
        print(f"{PROG}: error: --max-failures must be at least 1", file=sys.stderr)
        return 2
    try:
        data = build_report(args.results, args.output, baseline_paths=args.baseline,
                            expectations_path=args.expectations, max_failures_per_group=args.max_failures)
        for run in data.runs:
            for reason in run.results.partial_reasons():
                print(f"{PROG}: warning: {run.path}: partial run: {reason}", file=sys.stderr)
        csv_rows = write_support_csv(data.files, args.csv) if args.csv else None
    except ReportInputError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # e.g. the output directory is not writable
        target = exc.filename or ""
        print(f"{PROG}: error: {target}: {exc.strerror or exc}", file=sys.stderr)
        return 1

    failing = sum(group.total for group in data.failures)
    known = sum(group.total for group in data.known_failures)
    summary = f"wrote {args.output}: {data.total_cases} cases, {failing} unexpected failures, {known} known"
    if data.is_partial:
        summary += " (PARTIAL run)"
    print(summary)
    if csv_rows is not None:
        print(f"wrote {args.csv}: {csv_rows} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(report_main())

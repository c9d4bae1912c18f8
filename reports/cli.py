"""``conform report``: results files in, one HTML report (and optionally a support CSV) out.

Bad input (a missing, malformed or foreign file; an output that would overwrite an input) ends
with one line on stderr and exit status 2, as everywhere in ``conform``, never a traceback: the
people running this read the message, not the stack. Inputs given twice are read once, with a
warning.
"""

from __future__ import annotations

import argparse
import os
import sys

from reports.analysis import ReportData
from reports.csv_export import write_support_csv
from reports.html import build_report
from reports.model_html import is_model_input, load_model_results
from results.load import ReportInputError

PROG = "conform report"
EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    """A usage mistake is one line on stderr (not the usage block), exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Build a self-contained HTML report (support matrix, per-op error, failure clusters, "
        "known failures, changes since baseline runs) from one or more results files (JSON Lines).",
    )
    parser.add_argument("results", nargs="+", metavar="RESULTS",
                        help="results files (.jsonl); several merge. A conform model result (its model.json or "
                        "output folder) adds the Models section")
    parser.add_argument("-o", "--output", required=True, metavar="HTML",
                        help="the report file to write: never one of the inputs, and an existing file only if it is a "
                        "conform report")
    parser.add_argument("--baseline", action="append", metavar="OLD", default=None,
                        help="a results file of an earlier run to compare with (clusters, per-op pass rate and "
                        "error); repeat it for several")
    parser.add_argument("--known-failures", metavar="FILE", default=None,
                        help="TOML file of [[expectation]] patterns marking failures as known (see reports/README.md)")
    # the old name of --known-failures: conform run's --expectations reads [[bug]] entries, a different format
    parser.add_argument("--expectations", dest="old_expectations", metavar="FILE", default=None,
                        help=argparse.SUPPRESS)
    parser.add_argument("--csv", metavar="CSV", default=None,
                        help="also write llama.cpp's test-backend-ops support CSV")
    parser.add_argument("--max-failures", type=int, default=5, metavar="N",
                        help="cases listed per failure cluster after its smallest one (default 5); every "
                        "cluster is listed")
    return parser


def _warn_about_inputs(data: ReportData) -> None:
    """One stderr line per input problem: duplicates, missing shards, partial or failed runs, memory growth."""
    for warning in data.input_warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    for gap in data.missing_shards:
        print(f"{PROG}: warning: partial merge: {gap}", file=sys.stderr)
    for run in data.runs:
        for reason in run.results.partial_reasons():
            print(f"{PROG}: warning: {run.path}: partial run: {reason}", file=sys.stderr)
        for problem in [*run.status.problems(), *run.status.memory_warnings]:
            print(f"{PROG}: warning: {run.path}: {problem}", file=sys.stderr)


def report_main(argv: list[str] | None = None) -> int:
    """Run ``conform report``; ``argv`` is what follows ``report`` (default: ``sys.argv[1:]``)."""
    args = build_parser().parse_args(argv)
    if args.old_expectations is not None:
        print(f"{PROG}: warning: --expectations is deprecated here, use --known-failures ([[expectation]] patterns; "
              "conform run's --expectations takes [[bug]] entries)", file=sys.stderr)
        args.known_failures = args.known_failures or args.old_expectations
    if args.max_failures < 0:
        print(f"{PROG}: error: --max-failures must be 0 or more", file=sys.stderr)
        return EXIT_BAD_INPUT
    if os.path.isdir(args.output) or args.output.endswith(os.sep):
        print(f"{PROG}: error: -o {args.output}: is a directory; give the report file's name "
              f"(e.g. {os.path.join(args.output, 'report.html')})", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        results = [path for path in args.results if not is_model_input(path)]
        models = [path for path in args.results if is_model_input(path)]
        data = build_report(results, args.output, model_paths=models, baseline_paths=args.baseline,
                            expectations_path=args.known_failures, max_examples_per_cluster=args.max_failures,
                            other_outputs=[args.csv] if args.csv else [])
        _warn_about_inputs(data)
        csv_rows = write_support_csv(data.files, args.csv) if args.csv else None
    except ReportInputError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:  # e.g. the output directory is not writable
        target = exc.filename or ""
        if target.endswith(".tmp") and os.path.abspath(target[:-4]) == os.path.abspath(args.output):
            # the report is written beside itself first: name the user's file, not the temporary one
            target = args.output
        print(f"{PROG}: error: {target}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT

    summary = (f"wrote {args.output}: {data.total_cases} cases, {data.unexpected_failures} unexpected failures "
               f"in {len(data.clusters)} clusters, {data.known_failures} known")
    if models:
        records = load_model_results(models)
        failing = sum(not str(m["verdict"]).startswith("pass") for m in records)
        summary += f", {len(records)} model run{'s' if len(records) != 1 else ''} ({failing} failing)"
    if data.unrecorded_failures:
        summary += f", {data.unrecorded_failures} failing tests without a case record (RUN FAILED)"
    elif data.failed_runs:
        summary += " (RUN FAILED)"
    if data.is_partial:
        summary += " (PARTIAL run)"
    print(summary)
    if csv_rows is not None:
        print(f"wrote {args.csv}: {csv_rows} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(report_main())

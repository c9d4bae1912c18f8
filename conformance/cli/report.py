"""``conform report``: the report builder (``reports/``) behind ``conform``'s one-line errors."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

from conformance.cli.common import Output, UsageError, check_outputs, is_conform_html, is_support_csv


def write_report(results: list[str], html: str, baseline: list[str] | None = None) -> int:
    """The report step of ``conform run``: never a traceback (bad input is the report's one line, exit 2)."""
    try:
        from reports.cli import report_main
    except ImportError:
        print("conform: report module not available; results kept", file=sys.stderr)
        return 0
    try:
        code = report_main([*results, "-o", html, *(["--baseline", *baseline] if baseline else [])])
    except SystemExit as exc:  # argparse inside report_main
        code = exc.code if isinstance(exc.code, int) else 2
    if code == 0:
        print(f"conform: report  {html}")
    return code


def cmd_report(argv: list[str]) -> int:
    try:
        from reports.cli import build_parser, report_main
    except ImportError:
        raise UsageError("the report builder is not installed in this checkout") from None
    args = build_parser().parse_args(argv)  # a usage mistake: the report's own one line, exit 2
    check_outputs([Output("-o", args.output, "a conform HTML report", is_conform_html),
                   Output("--csv", args.csv, "a support CSV", is_support_csv)],
                  [*args.results, *(args.baseline or []), args.known_failures or args.old_expectations])
    return report_main(argv)

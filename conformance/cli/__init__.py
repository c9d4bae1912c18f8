"""The ``conform`` command.

  conform run      run the conformance suite on device(s), write results, JUnit XML and the report
  conform devices  list ggml devices (and ACL devices where a CANN runtime is present)
  conform ops      list the op catalogue: implemented ops, dtype signatures, tolerance reasons
  conform repro    rerun one case from its case id (the line every failure prints), or replay and
                   shrink the sequence of cases that led to a crash
  conform report   build the HTML report / CSV from results files
  conform perf     judge and time model-shaped cases (a 7B llama layer) on device(s) and ggml:CPU
  conform model    run a model's forward pass on a device and judge every node against the golden model
  conform bisect   replay a case, a sequence or a model on many builds and name the first bad (or fixed) one

Bad input gets one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import os
import sys

from conformance.cli import bisect, listing, perf, repro, run, triage
from conformance.cli.common import DefaultsFormatter, OneLineParser, UsageError
from conformance.cli.report import cmd_report
from conformance.cli.repro import check_case

__all__ = ["build_parser", "check_case", "main"]


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="conform", description="ggml/CANN conformance harness",
                           formatter_class=DefaultsFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run.declare_parser(sub)
    listing.declare_parser(sub)
    repro.declare_parser(sub)
    perf.declare_parser(sub)
    triage.declare_parser(sub)
    bisect.declare_parser(sub)
    sub.add_parser("report", help="build reports from results files (see conform report --help)", add_help=False)
    sub.add_parser("model", help="judge every node of a model's forward pass (conform model --help)", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "model":
        from conformance.cli.model import main as model_main

        return model_main(argv[1:])
    if argv and argv[0] == "report":
        try:
            return cmd_report(argv[1:])
        except UsageError as exc:
            print(f"conform: {exc}", file=sys.stderr)
            return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = argv  # as typed, for the results header
    if getattr(args, "ggml_lib", None):  # absolute: workers restarted later may not share the cwd
        args.ggml_lib = os.path.abspath(os.path.expanduser(args.ggml_lib))
    from device.base import DeviceError
    from device.interrupt import stop_on_signals

    stop_on_signals()  # Ctrl-C or SIGTERM: a partial report, also in a script's background job

    try:
        if args.command == "run":
            return run.cmd_run(args)
        if args.command == "devices":
            return listing.cmd_devices(args)
        if args.command == "ops":
            return listing.cmd_ops(args)
        if args.command == "repro":
            return repro.cmd_repro(args)
        if args.command == "perf":
            return perf.cmd_perf(args)
        if args.command == "triage":
            return triage.cmd_triage(args)
        if args.command == "bisect":
            return bisect.cmd_bisect(args)
    except (UsageError, DeviceError) as exc:
        print(f"conform: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `conform ops | head`
        return 0
    return 2



"""``conform perf``: judge and time model-shaped cases on device(s), next to ggml:CPU."""

from __future__ import annotations

import argparse
import datetime as dt
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

from conformance.cli.common import (
    OUTPUT_RULE,
    Output,
    UsageError,
    check_numbers,
    check_outputs,
    common,
    device_options,
    is_conform_html,
)
from conformance.cli.report import write_report


def cmd_perf(args: argparse.Namespace) -> int:
    from conformance.perf import SHAPE_SETS, PerfSettings, Roofline, perf_main
    from device.base import DeviceError
    from device.registry import check_spec, expand_specs
    from golden import catalogue

    check_numbers(args)
    if args.shapes not in SHAPE_SETS:
        raise UsageError(f"unknown shape set {args.shapes!r} (known: {', '.join(SHAPE_SETS)})")
    ops = [op.strip().upper() for op in (args.ops or "").split(",") if op.strip()]
    for op in ops:
        try:
            catalogue.get(op)
        except KeyError:
            raise UsageError(f"unknown op {op!r} in --ops (see conform ops)") from None
    if args.warmup < 0 or args.repeats < 1 or not args.target > 0:
        raise UsageError("--warmup must be 0 or more, --repeats at least 1 and --target positive")
    roofline = None
    if args.roofline is not None:
        try:
            gbs, tflops = (float(v) for v in args.roofline.split(","))
        except ValueError:
            raise UsageError(f"--roofline wants two numbers GBS,TFLOPS (got {args.roofline!r})") from None
        if not (gbs > 0 and tflops > 0):
            raise UsageError(f"--roofline peaks must be positive (got {args.roofline!r})")
        roofline = Roofline(gbs, tflops, "--roofline")
    for path in args.baseline:
        if not os.path.isfile(path):
            raise UsageError(f"baseline results {path!r} not found")
    try:
        devices = expand_specs(args.device or ["ggml:CPU"], device_options(args))
        for spec in devices:
            check_spec(spec, device_options(args))
    except DeviceError as exc:
        raise UsageError(str(exc)) from None
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out or f"conform-out/perf-{stamp}")
    results = out / "results.jsonl"
    # perf results are never appended to, nor replaced; the report is replaced only where it is one
    check_outputs([Output("--out", out, folder=True),
                   Output("--out", results, "perf results are never appended to: give another --out"),
                   Output("--out", out / "report.html", "a conform HTML report", is_conform_html)], args.baseline)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the output folder {str(out)!r}: {exc.strerror or exc}") from None
    settings = PerfSettings(warmup=args.warmup, min_repeats=min(5, args.repeats), max_repeats=args.repeats,
                            target_s=args.target)
    names = ", ".join(d.text for d in devices)
    reference = "" if any(d.text == "ggml:CPU" for d in devices) else " (and ggml:CPU, the reference)"
    print(f"conform: perf on {names}{reference} -> {out}", flush=True)
    code = perf_main(devices, device_options(args), str(results), settings, roofline, args.shapes, ops,
                     args.case_timeout, run_id=os.environ.get("CONFORM_RUN_ID") or f"perf-{stamp}",
                     progress=lambda line: print(line, flush=True))
    if not args.no_report:
        write_report([str(results)], str(out / "report.html"), args.baseline)
    print(f"conform: results {results}")
    return code


def declare_parser(sub: Any) -> None:
    """This subcommand's arguments on ``conform``'s parser."""
    perf = sub.add_parser("perf", help="judge and time model-shaped cases on device(s), next to ggml:CPU",
                          description="Judge and time model-shaped cases on device(s), next to ggml:CPU. Outputs: "
                                      + OUTPUT_RULE + ".")
    common(perf)
    perf.add_argument("--device", action="append", default=[], metavar="SPEC",
                      help="device to time (repeatable; ggml:CPU, the reference, always runs)")
    perf.add_argument("--out", default=None,
                      help="output folder, without a results.jsonl (default conform-out/perf-<time>)")
    perf.add_argument("--shapes", default="llama-7b", help="shape set: llama-7b (default) or llama-tiny")
    perf.add_argument("--ops", default=None, metavar="OP,...", help="only these ops (e.g. MUL_MAT,SOFT_MAX)")
    perf.add_argument("--warmup", type=int, default=2, help="untimed runs before timing (default 2)")
    perf.add_argument("--repeats", type=int, default=200, help="most timed runs per case (default 200)")
    perf.add_argument("--target", type=float, default=0.5, metavar="S",
                      help="timed seconds aimed for per case (at least 5 runs; default 0.5)")
    perf.add_argument("--roofline", default=None, metavar="GBS,TFLOPS",
                      help="the device's peak bandwidth (GB/s) and FLOP rate (TFLOP/s), where not in the table")
    perf.add_argument("--baseline", action="append", default=[], metavar="RESULTS",
                      help="earlier results: a case more than 1.2x slower at the same shape is flagged")
    perf.add_argument("--case-timeout", type=float, default=600.0, help="seconds per device call (default 600)")
    perf.add_argument("--threads", type=int, default=1, help="CPU backend threads (default 1)")
    perf.add_argument("--no-report", action="store_true", help="skip the HTML report")

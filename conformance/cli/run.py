"""``conform run``: the suite in pytest on device(s), then its results, JUnit XML and report."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from device.spec import DeviceSpec

from conformance.cli.common import UsageError, add_parser, check_numbers, device_options
from conformance.cli.report import write_report
from conformance.options import COMMAND_ENV, RUN_OPTIONS


def _check_selection(args: argparse.Namespace) -> None:
    """-k, --op and --from-model, checked before pytest starts: a bad expression is one line, not pytest's
    usage error."""
    from conformance.model_cases import check_from_model
    from conformance.options import parse_ops

    try:
        parse_ops(args.op)
        check_from_model(args.from_model)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.k is None:
        return
    try:
        from _pytest.mark.expression import Expression
    except ImportError:  # a pytest without it: pytest itself will say so
        return
    try:
        Expression.compile(args.k)
    except Exception as exc:  # ParseError in older pytest, SyntaxError in newer ones
        reason = getattr(exc, "msg", None) or str(exc)
        column = getattr(exc, "offset", None) or getattr(exc, "column", None)
        where = f" at column {column}" if column else ""
        raise UsageError(f"-k {args.k!r} is not a valid selection{where}: {reason}") from None


def _open_devices(args: argparse.Namespace) -> tuple[list[DeviceSpec], int]:
    """The devices (globs expanded), each checked and opened once, and the xdist workers for them."""
    from device.base import DeviceError
    from device.registry import check_spec, expand_specs
    from device.worker import open_each

    try:
        devices = expand_specs(args.device or ["ggml:CPU"], device_options(args))
        workers = args.workers if args.workers is not None else (len(devices) if len(devices) > 1 else 0)
        if 0 < workers < len(devices):
            raise UsageError(f"{len(devices)} devices need at least {len(devices)} workers (each worker is pinned "
                             f"to one device); got --workers {workers}")
        for spec in devices:  # every device opens, or one line now rather than a failed session later
            check_spec(spec, device_options(args))
        open_each(devices, device_options(args), args.case_timeout)
    except DeviceError as exc:
        raise UsageError(str(exc)) from None
    return devices, workers


def _output_folder(out: Path) -> tuple[Path, Path, Path]:
    """The output folder with no earlier run's results.jsonl or junit.xml in it: its results and JUnit paths."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the output folder {str(out)!r}: {exc.strerror or exc}") from None
    results = out / "results.jsonl"
    junit = out / "junit.xml"
    if results.exists():
        # one results file per run: an earlier run's file in the same folder is kept under its time
        kept = out / f"results-{dt.datetime.fromtimestamp(results.stat().st_mtime):%Y%m%d-%H%M%S}.jsonl"
        results.rename(kept)
        print(f"conform: kept the previous run's results as {kept}", flush=True)
    junit.unlink(missing_ok=True)  # a JUnit file or report in the folder is this run's, or none
    (out / "report.html").unlink(missing_ok=True)
    return out, results, junit


def _pytest_command(args: argparse.Namespace, devices: list[DeviceSpec], workers: int, results: Path,
                    junit: Path) -> list[str]:
    suite = Path(__file__).parent.parent  # the conformance package: the suite pytest collects
    cmd = [sys.executable, "-m", "pytest", str(suite), "-p", "no:cacheprovider", "-q", "-rN",
           "--results", str(results), "--junitxml", str(junit), "-o", "junit_family=xunit1",
           "-o", "console_output_style=count", "--tb=line",
           "-W", "ignore::DeprecationWarning"]
    for option in RUN_OPTIONS:  # the devices as expanded above; every other option as given
        value = [d.text for d in devices] if option.flag == "--device" else getattr(args, option.dest)
        cmd += option.pytest_args(value)
    if args.k:
        cmd += ["-k", args.k]
    if args.hypothesis_seed is not None:
        cmd += ["--hypothesis-seed", args.hypothesis_seed]
    if workers:
        cmd += ["-n", str(workers)]
    return cmd + args.pytest_args


def _check_expectations(args: argparse.Namespace) -> None:
    """Expectations files and known-bug timeout, checked before pytest starts: one line, not pytest's usage error."""
    from conformance.options import OPTIONS_BY_FLAG

    for flag in ("--expectations", "--known-bug-timeout", "--shard"):
        option = OPTIONS_BY_FLAG[flag]
        try:
            if option.check is not None:
                option.check(getattr(args, option.dest))
        except ValueError as exc:
            raise UsageError(str(exc)) from None


def cmd_run(args: argparse.Namespace) -> int:
    check_numbers(args)
    _check_selection(args)
    _check_expectations(args)
    if args.perf:
        from conformance.perf import SHAPE_SETS

        if args.perf_shapes not in SHAPE_SETS:
            raise UsageError(f"unknown shape set {args.perf_shapes!r} (known: {', '.join(SHAPE_SETS)})")
    devices, workers = _open_devices(args)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out, results, junit = _output_folder(Path(args.out or f"conform-out/{stamp}"))
    cmd = _pytest_command(args, devices, workers, results, junit)
    print(f"conform: running {len(devices)} device(s) {', '.join(d.text for d in devices)} -> {out}", flush=True)
    env = dict(os.environ)
    env.setdefault("CONFORM_RUN_ID", stamp)
    env[COMMAND_ENV] = shlex.join(["conform", *args.argv])
    code, interrupted = _run_pytest(cmd, env)
    interrupted = interrupted or code == PYTEST_INTERRUPTED  # the signal reached pytest alone
    if not interrupted and code == PYTEST_NO_TESTS:
        chosen = " ".join(f"{flag} {value!r}" for flag, value in (("-k", args.k), ("--op", ",".join(args.op)))
                          if value)
        raise UsageError(f"no test matches the selection{' ' + chosen if chosen else ''} (nothing ran)")
    if not interrupted and code == PYTEST_USAGE_ERROR:
        raise UsageError("pytest refused its arguments (its message is above)")
    if args.perf and not interrupted and code in (0, 1):
        from conformance.perf import perf_main

        print("conform: perf cases", flush=True)
        perf_code = perf_main(devices, device_options(args), str(results), shapes=args.perf_shapes,
                              run_id=env["CONFORM_RUN_ID"], timeout=max(args.case_timeout, 600.0),
                              progress=lambda line: print(line, flush=True))
        code = max(code, perf_code)
    report_code = 0
    report = out / "report.html"
    if not args.no_report:
        if results.exists():
            report_code = write_report([str(results)], str(report))
        else:
            print("conform: no case was recorded, so there is no report", file=sys.stderr)
    junit_note = _complete_junit(junit, code, interrupted)
    if results.exists():
        print(f"conform: results {results}")
    print(f"conform: JUnit   {junit}{junit_note}")
    if interrupted:
        kept = [name for name, there in (("results", results.exists()), ("JUnit XML", True),
                                         ("report", report.exists() and report_code == 0)) if there]
        print(f"conform: interrupted: the {_listed(kept)} {'hold' if len(kept) > 1 else 'holds'} what was "
              "measured so far (marked partial)", file=sys.stderr)
        return 130
    if code in (0, 1):
        return code or report_code
    return code


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _complete_junit(junit: Path, code: int, interrupted: bool) -> str:
    """Make ``junit`` a whole JUnit file that counts a partial run as an error; the note its line ends with.

    pytest writes it at its end (the plug-in renames it into place whole, an interrupted one with the
    interruption as an error case). A pytest stopped before that (a second Ctrl-C) or dead of a signal
    left none: conform writes one error case in its place, so CI still reads the run as failed."""
    from conformance.junit import is_complete, write_interrupted_only

    if is_complete(junit):
        return ""
    if interrupted:
        reason = "the run was stopped before pytest wrote its JUnit XML"
    elif code < 0:
        reason = f"pytest was killed by signal {-code} before it wrote its JUnit XML"
    else:
        reason = f"pytest ended with exit status {code} before it wrote its JUnit XML"
    write_interrupted_only(junit, reason)
    return f" (written by conform: {reason}; see the results for the cases measured)"


PYTEST_INTERRUPTED = 2
PYTEST_USAGE_ERROR = 4
PYTEST_NO_TESTS = 5
# After Ctrl-C: how long pytest may take to write its JUnit XML and close its devices
INTERRUPT_GRACE_S = 5.0
INTERRUPT_FINISH_S = 60.0


class _StopAtOnce(Exception):
    """The second Ctrl-C: stop pytest now."""


def _stop_at_once(signum: int, frame: object) -> None:
    raise _StopAtOnce


def _run_pytest(cmd: list[str], env: dict[str, str]) -> tuple[int, bool]:
    """Run pytest; on Ctrl-C let it finish writing (it gets the terminal's SIGINT too; forwarded when
    only conform got it). Returns pytest's exit code and whether the run was interrupted. From the first
    Ctrl-C on, a second one stops pytest at once, and any later one is ignored while conform writes the
    JUnit file and report of what was measured (a KeyboardInterrupt there would leave a traceback and a
    closing line that is not true)."""
    import signal

    child = subprocess.Popen(cmd, env=env)
    try:
        return child.wait(), False
    except KeyboardInterrupt:
        pass
    signal.signal(signal.SIGINT, _stop_at_once)  # before the line below: the user answers it with Ctrl-C
    try:
        try:
            print("\nconform: interrupted; pytest is writing what it measured (Ctrl-C again to stop at once)",
                  file=sys.stderr, flush=True)
            code = child.wait(timeout=INTERRUPT_GRACE_S)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGINT)
            code = child.wait(timeout=INTERRUPT_FINISH_S)
    except (_StopAtOnce, KeyboardInterrupt, subprocess.TimeoutExpired):
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a third Ctrl-C must not cut the kill short
        child.kill()
        code = child.wait()
        # killed mid-write, pytest can leave its last line without its newline: conform's closing lines
        # must not run on from it
        print(flush=True)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    return code, True


def declare_parser(sub: Any) -> None:
    """This subcommand's arguments on ``conform``'s parser."""
    run = add_parser(sub, "run", help="run the conformance suite and write results + report",
              description="Run the conformance suite (pytest) on one or more devices and write results.jsonl, "
                          "junit.xml and report.html into the output folder. Ctrl-C stops the run and still "
                          "writes the report and JUnit XML of what was measured, marked partial.")
    for option in RUN_OPTIONS:  # the options the pytest plug-in takes too, from the one table
        run.add_argument(option.flag, **option.declaration())
    run.add_argument("--out", default=None, metavar="DIR", help="output folder (default: conform-out/<time>)")
    run.add_argument("-k", default=None, metavar="EXPR",
                     help='pytest -k selection, e.g. soft_max or "add and f16" (substring: mul also selects mul_mat; '
                          'use --op for one op)')
    run.add_argument("--workers", "-n", type=int, default=None, metavar="N",
                     help="pytest-xdist workers (default: one per device when several, else none)")
    run.add_argument("--hypothesis-seed", default=None, metavar="SEED",
                     help="force hypothesis' seed (recorded in the results header; turns the example database off)")
    run.add_argument("--no-report", action="store_true", help="skip the HTML report")
    run.add_argument("--perf", action="store_true",
                     help="after the suite, judge and time the perf cases (as conform perf) into the same results")
    run.add_argument("--perf-shapes", default="llama-7b", help="with --perf: llama-7b (default) or llama-tiny")
    run.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")

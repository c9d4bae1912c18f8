"""The ``conform`` command.

  conform run      run the conformance suite on device(s), write results, JUnit XML and the report
  conform devices  list ggml devices (and ACL devices where a CANN runtime is present)
  conform ops      list the op catalogue: implemented ops, dtype signatures, tolerance reasons
  conform repro    rerun one case from its case id (the line every failure prints), or replay and
                   shrink the sequence of cases that led to a crash
  conform report   build the HTML report / CSV from results files

Bad input gets one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from conformance.record import CaseRecord
    from conformance.set_get import SetGetCase
    from device.spec import DeviceSpec
    from golden.case import OpCase

PROFILES = ("dev", "ci", "nightly")


class UsageError(Exception):
    """A user mistake: printed as one line, exit code 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line on stderr (not the usage block), exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def check_case(case_id: str) -> OpCase | SetGetCase:
    """Parse a case id and check it names a case the harness can build; UsageError otherwise."""
    from conformance.data import DISTRIBUTIONS
    from conformance.set_get import SetGetCase, is_set_get_id
    from golden import catalogue, dtypes
    from golden.case import parse_case_id

    def bad(reason: str) -> UsageError:
        return UsageError(f"malformed case id {case_id!r}: {reason}")

    if is_set_get_id(case_id):
        try:
            return SetGetCase.parse(case_id)
        except KeyError as exc:
            raise bad(f"the tensor lacks its {exc.args[0]} field") from None
        except (ValueError, TypeError, IndexError) as exc:
            raise bad(str(exc)) from None
    try:
        case = parse_case_id(case_id)
    except KeyError as exc:
        raise bad(f"an input lacks its {exc.args[0]} field") from None
    except (ValueError, TypeError, IndexError) as exc:
        raise bad(str(exc)) from None
    try:
        spec = catalogue.get(case.op)
    except KeyError:
        raise UsageError(f"unknown op {case.op!r} in case id (see conform ops)") from None
    if not spec.implemented:
        raise UsageError(f"op {case.op} has no golden model yet, so its cases cannot be judged (see conform ops)")
    if not case.inputs:
        raise bad("no input tensors (type=...,ne=[...])")
    for i, t in enumerate(case.inputs):
        if t.dtype not in dtypes.ALL_TYPES:
            raise bad(f"input {i} has unknown dtype {t.dtype!r} (known: {', '.join(dtypes.ALL_TYPES)})")
        if len(t.ne) != 4 or any(n < 1 for n in t.ne):
            raise bad(f"input {i} shape ne={list(t.ne)} is not 4 positive sizes")
    if case.out_dtype not in dtypes.ALL_TYPES:
        raise bad(f"unknown destination dtype {case.out_dtype!r}")
    srcs = tuple(t.dtype for t in case.inputs)
    # a signature names the leading inputs; optional ones (sinks) may follow, the validator counts them
    accepted = spec.all_signatures
    if accepted and not any(srcs[: len(s.srcs)] == s.srcs and s.dst == case.out_dtype for s in accepted):
        raise bad(f"{case.op} does not take {','.join(srcs)} -> {case.out_dtype} "
                  f"(accepted: {' '.join(s.label() for s in accepted)})")
    if case.distribution not in DISTRIBUTIONS:
        raise bad(f"unknown data distribution {case.distribution!r} (known: {', '.join(DISTRIBUTIONS)})")
    try:  # parameters and shapes, before any device work (data-dependent checks come with the data)
        spec.check_params(case)
        if spec.validate is not None:
            spec.validate(case, [])
    except ValueError as exc:
        raise bad(str(exc)) from None
    return case


def _device_options(args: argparse.Namespace) -> dict[str, Any]:
    return {"ggml_lib": args.ggml_lib, "threads": getattr(args, "threads", 1)}


def cmd_devices(args: argparse.Namespace) -> int:
    from device.ggml.device import list_ggml_devices
    from device.inventory import acl_devices

    devices = list_ggml_devices(args.ggml_lib)
    acl = acl_devices()
    if args.json:
        print(json.dumps({"ggml": devices, "acl": acl}, indent=2))
        return 0
    first = devices[0] if devices else {}
    print(f"ggml {first.get('ggml_version', '?')} from {first.get('library_path', '?')}")
    print(f"{'device':<14} {'backend':<8} {'type':<6} {'free MiB':>10} {'total MiB':>10}  description")
    for d in devices:
        print(f"{d['spec']:<14} {d['backend']:<8} {d['type']:<6} {d['memory_free'] // 2**20:>10} "
              f"{d['memory_total'] // 2**20:>10}  {d['description']}")
    if acl:
        print("\nACL devices (CANN runtime)")
        for a in acl:
            hbm = f"{a.get('hbm_free', 0) // 2**20}/{a.get('hbm_total', 0) // 2**20} MiB"
            print(f"  acl:{a.get('index')}  {a.get('soc_name', '?')}  HBM free/total {hbm}  "
                  f"CANN {a.get('cann_version', '?')}")
    else:
        print("\nACL devices: none (no CANN runtime libascendcl found)")
    return 0


def cmd_ops(args: argparse.Namespace) -> int:
    from golden import catalogue

    rows: list[dict[str, Any]] = []
    for spec in catalogue.OPS.values():
        rows.append({
            "op": spec.name, "family": spec.family, "implemented": spec.implemented,
            "signatures": [s.label() for s in spec.signatures],
            "tolerance": {k: v.describe() for k, v in spec.tolerance.items()},
            "notes": spec.notes,
        })
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return 0
    done = sum(r["implemented"] for r in rows)
    print(f"{done}/{len(rows)} ops of the CANN seed's supports_op have a golden model\n")
    for r in rows:
        mark = "yes" if r["implemented"] else "NOT IMPLEMENTED"
        print(f"{r['op']:<20} {r['family']:<10} {mark:<16} {' '.join(r['signatures'])}")
    return 0


def cmd_repro(args: argparse.Namespace) -> int:
    from conformance.harness import Harness
    from conformance.set_get import SetGetCase
    from device.registry import check_spec

    if args.sequence or args.history:
        return _repro_sequence(args)
    if args.shrink:
        raise UsageError("--shrink needs a sequence to shrink: --sequence FILE|ID... or --history RESULTS")
    if not args.case_id:
        raise UsageError("repro needs a case id (or --sequence / --history)")
    case = check_case(args.case_id)
    _check_numbers(args)
    device = _repro_device(args, None)
    check_spec(device, _device_options(args))
    harness = Harness(device, _device_options(args), out_dir=args.out, timeout=args.case_timeout)
    try:
        record = harness.evaluate_set_get(case) if isinstance(case, SetGetCase) else harness.evaluate(case)
    finally:
        harness.close()
    print(f"{record.outcome.value.upper()}  {case.case_id}  on {device}")
    m = record.metrics
    if m and "max_abs" in m:
        print(f"  error_ratio {m['error_ratio']:.3g}  max_abs {m['max_abs']:.3g}  max_ulp {m['max_ulp']:.3g}  "
              f"nmse {m['nmse']:.3g}  bad {m['n_bad']}/{m['n']}")
    if record.message:
        print(f"  {record.message}")
    if record.crash is not None:
        print("  stderr tail:\n" + "\n".join("    " + ln for ln in record.crash.stderr_tail.splitlines()[-10:]))
    if record.artefact:
        print(f"  artefact: {os.path.join(args.out, record.artefact)}")
    if record.expected:
        print(f"  known bug {record.expected.id} of this device and release: {record.expected.reason}")
    return 1 if record.failing else 0


def _repro_device(args: argparse.Namespace, recorded: str | None) -> DeviceSpec:
    """--device, else the device a record names, else ggml:CPU."""
    from device.spec import DeviceSpec

    return DeviceSpec.parse(args.device or recorded or "ggml:CPU")


def _sequence_ids(items: list[str]) -> list[str]:
    """--sequence arguments: each a case id, or a file of case ids (one per line; # comments)."""
    ids: list[str] = []
    for item in items:
        path = Path(item)
        if "(" not in item and path.is_file():
            try:
                lines = path.read_text().splitlines()
            except (OSError, UnicodeDecodeError) as exc:
                raise UsageError(f"cannot read the sequence file {item!r}: {exc}") from None
            ids += [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
        elif "(" not in item:
            raise UsageError(f"--sequence {item!r} is neither a case id nor a readable file")
        else:
            ids.append(item)
    if not ids:
        raise UsageError("--sequence names no cases")
    return ids


def _history_record(results: str, case_id: str | None) -> CaseRecord:
    """The crash/timeout record with a history in ``results`` (the one for ``case_id``, or the only one)."""
    from conformance.record import CaseRecord
    from device.outcome import Outcome

    DIED = {o.value for o in Outcome if o.process_died}
    try:
        lines = Path(results).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the results file {results!r}: {exc}") from None
    found: list[CaseRecord] = []
    for line in lines:
        try:
            data = json.loads(line)
        except ValueError:
            continue  # a cut-off last line, or not a results line
        if not isinstance(data, dict) or data.get("type") != "case" or data.get("outcome") not in DIED:
            continue
        if case_id and data.get("case_id") != case_id:
            continue
        try:
            found.append(CaseRecord.from_json(data))
        except (KeyError, ValueError, TypeError, AttributeError):
            continue
    which = f"for {case_id!r} " if case_id else ""
    if not found:
        raise UsageError(f"{results} has no crash or timeout record {which}to replay")
    with_history = [r for r in found if r.history]
    if not with_history:
        raise UsageError(f"the crash record {which}in {results} carries no history (an older results file?)")
    if len(with_history) > 1 and not case_id:
        raise UsageError(f"{results} has {len(with_history)} crash/timeout records with a history; "
                         "name one by its case id (conform repro CASE_ID --history RESULTS)")
    return with_history[-1]


def _repro_sequence(args: argparse.Namespace) -> int:
    from conformance.sequence import SequenceRunner, Step, shrink
    from device.outcome import Outcome
    from device.registry import check_spec

    if args.sequence and args.history:
        raise UsageError("give either --sequence or --history, not both")
    _check_numbers(args)
    target: Outcome | None = None
    if args.history:
        record = _history_record(args.history, args.case_id)
        ids, target = list(record.history), record.outcome
        device = _repro_device(args, record.device)
        if record.history_dropped:
            print(f"conform: note: the record kept the last {len(ids)} cases; {record.history_dropped} earlier "
                  "ones were not recorded", file=sys.stderr)
    else:
        if args.case_id:
            raise UsageError("with --sequence, give every case id (the crashing one last) after --sequence")
        ids = _sequence_ids(args.sequence)
        device = _repro_device(args, None)
    cases = [check_case(case_id) for case_id in ids]
    check_spec(device, _device_options(args))

    def show(index: int, total: int, step: Step) -> None:
        note = f"  {step.message}"[:200] if step.outcome.failing and step.message else ""
        print(f"  {index}/{total} {step.outcome.value.upper():<11} {step.case_id}{note}", flush=True)

    runner = SequenceRunner(device, _device_options(args), args.case_timeout, on_step=show)
    print(f"replaying {len(cases)} case(s) on {device}, in order, in a fresh device process", flush=True)
    replay = runner.replay(cases)
    died = replay.died_at
    if died is None:
        print("no case crashed or timed out: the sequence does not reproduce a crash")
        return 1 if any(step.outcome.failing for step in replay.steps) else 0
    outcome = replay.steps[died].outcome
    if died < len(cases) - 1:
        print(f"{outcome.value.upper()} at case {died + 1}/{len(cases)}, before the last case of the sequence")
    else:
        print(f"{outcome.value.upper()} at case {died + 1}/{len(cases)}: the sequence reproduces it")
    if target is not None and outcome is not target:
        print(f"(the record says {target.value.upper()})")
    if not args.shrink:
        return 1
    cases = cases[: died + 1]
    print(f"shrinking {len(cases)} case(s) (delta debugging; every try replays in a fresh device process)...",
          flush=True)
    runner.on_step = None
    shortest = shrink(runner, cases, outcome)
    print(f"shortest sequence that still ends in {outcome.value.upper()}: {len(shortest)} of {len(cases)} case(s), "
          f"{runner.replays} replays")
    for case in shortest:
        print(f"  {case.case_id}")
    parts = ["conform", "repro", "--device", device.text]
    if args.ggml_lib:
        parts += ["--ggml-lib", args.ggml_lib]
    print("reproduce: " + " ".join(shlex.quote(p) for p in [*parts, "--sequence", *(c.case_id for c in shortest)]))
    return 1


def _check_numbers(args: argparse.Namespace) -> None:
    if not args.case_timeout > 0:
        raise UsageError(f"--case-timeout must be a positive number of seconds (got {args.case_timeout:g})")
    if args.threads < 1:
        raise UsageError(f"--threads must be at least 1 (got {args.threads})")
    if getattr(args, "workers", None) is not None and args.workers < 0:
        raise UsageError(f"--workers must be 0 or more (got {args.workers})")


def _open_each(devices: list[DeviceSpec], options: dict[str, Any], timeout: float) -> None:
    """Open every device once in a worker process (all at once) and close it again.

    What check_spec cannot see without opening (a CANN runtime that is missing or will not start,
    a backend that fails to initialise, a plug-in factory that raises) is then one line here, not
    an aborted pytest session. A crash while opening stays in the worker.
    """
    from concurrent.futures import ThreadPoolExecutor

    from device.registry import runs_in_process
    from device.worker import DeviceWorker

    def probe(spec: DeviceSpec) -> None:
        worker = DeviceWorker(spec, options, timeout=timeout)
        try:
            worker.start()
        finally:
            worker.close()

    remote = [d for d in devices if not runs_in_process(d)]
    if remote:
        with ThreadPoolExecutor(max_workers=min(8, len(remote))) as pool:
            for done in [pool.submit(probe, spec) for spec in remote]:
                done.result()


def cmd_run(args: argparse.Namespace) -> int:
    from device.base import DeviceError
    from device.registry import check_spec, expand_specs

    _check_numbers(args)
    try:
        devices = expand_specs(args.device or ["ggml:CPU"], _device_options(args))
        for spec in devices:  # every device opens, or one line now rather than a failed session later
            check_spec(spec, _device_options(args))
        _open_each(devices, _device_options(args), args.case_timeout)
    except DeviceError as exc:
        raise UsageError(str(exc)) from None
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out or f"conform-out/{stamp}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the output folder {str(out)!r}: {exc.strerror or exc}") from None
    results = out / "results.jsonl"
    if results.exists():
        # one results file per run: an earlier run's file in the same folder is kept under its time
        kept = out / f"results-{dt.datetime.fromtimestamp(results.stat().st_mtime):%Y%m%d-%H%M%S}.jsonl"
        results.rename(kept)
        print(f"conform: kept the previous run's results as {kept}", flush=True)
    suite = Path(__file__).parent
    cmd = [sys.executable, "-m", "pytest", str(suite), "-p", "no:cacheprovider", "-q", "-rN",
           "--results", str(results), "--junitxml", str(out / "junit.xml"), "-o", "junit_family=xunit1",
           "--conform-profile", args.profile, "--case-timeout", str(args.case_timeout),
           "--threads", str(args.threads), "-o", "console_output_style=count", "--tb=line",
           "-W", "ignore::DeprecationWarning"]
    for d in devices:
        cmd += ["--device", d.text]
    if args.ggml_lib:
        cmd += ["--ggml-lib", args.ggml_lib]
    if args.k:
        cmd += ["-k", args.k]
    if args.hypothesis_db:
        cmd += ["--hypothesis-db", args.hypothesis_db]
    if args.hypothesis_seed is not None:
        cmd += ["--hypothesis-seed", args.hypothesis_seed]
    workers = args.workers if args.workers is not None else (len(devices) if len(devices) > 1 else 0)
    if 0 < workers < len(devices):
        raise UsageError(f"{len(devices)} devices need at least {len(devices)} workers (each worker is pinned "
                         f"to one device); got --workers {workers}")
    if workers:
        cmd += ["-n", str(workers)]
    cmd += args.pytest_args
    print(f"conform: running {len(devices)} device(s) {', '.join(d.text for d in devices)} -> {out}", flush=True)
    env = dict(os.environ)
    env.setdefault("CONFORM_RUN_ID", stamp)
    code = subprocess.call(cmd, env=env)
    report_code = 0
    if not args.no_report:
        report_code = _write_report([str(results)], str(out / "report.html"))
    print(f"conform: results {results}\nconform: JUnit   {out / 'junit.xml'}")
    if code in (0, 1):
        return code or report_code
    return code


def _write_report(results: list[str], html: str) -> int:
    try:
        from reports.html import build_report
    except ImportError:
        print("conform: report module not available; results kept", file=sys.stderr)
        return 0
    build_report(results, html)
    print(f"conform: report  {html}")
    return 0


def cmd_report(argv: list[str]) -> int:
    try:
        from reports.cli import report_main
    except ImportError:
        raise UsageError("the report builder is not installed in this checkout") from None
    return report_main(argv)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="conform", description="ggml/CANN conformance harness")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--ggml-lib", default=None, metavar="DIR",
                       help="ggml build directory (default $GGML_LIB_DIR, else the libggml-python wheel)")

    run = sub.add_parser("run", help="run the conformance suite and write results + report")
    common(run)
    run.add_argument("--device", action="append", default=[], metavar="SPEC",
                     help="golden, ggml:NAME, ggml:PATTERN*, acl:N or module:factory (repeatable; default ggml:CPU)")
    run.add_argument("--out", default=None, help="output folder (default conform-out/<time>)")
    run.add_argument("--profile", default="ci", choices=PROFILES, help="hypothesis profile (default ci)")
    run.add_argument("-k", default=None, metavar="EXPR", help="pytest -k selection, e.g. soft_max")
    run.add_argument("--workers", "-n", type=int, default=None,
                     help="pytest-xdist workers (default: one per device when several)")
    run.add_argument("--case-timeout", type=float, default=120.0, help="seconds per case before TIMEOUT")
    run.add_argument("--threads", type=int, default=1, help="CPU backend threads per worker")
    run.add_argument("--hypothesis-db", default=None, metavar="DIR",
                     help="keep hypothesis' example database here (failures replay first next time)")
    run.add_argument("--hypothesis-seed", default=None, metavar="SEED",
                     help="force hypothesis' seed (recorded in the results header; turns the example database off)")
    run.add_argument("--no-report", action="store_true", help="skip the HTML report")
    run.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")

    dev = sub.add_parser("devices", help="list devices")
    common(dev)
    dev.add_argument("--json", action="store_true")

    ops = sub.add_parser("ops", help="list the op catalogue")
    ops.add_argument("--json", action="store_true")

    rep = sub.add_parser("repro", help="rerun one case by its case id, or replay a sequence of cases")
    common(rep)
    rep.add_argument("case_id", nargs="?", default=None,
                     help="the case id a failure printed (with --history: which crash record to replay)")
    rep.add_argument("--device", default=None, metavar="SPEC",
                     help="device (default: the record's with --history, else ggml:CPU)")
    rep.add_argument("--sequence", nargs="+", default=None, metavar="FILE|ID",
                     help="replay these cases in order in one fresh device process: case ids, or files of one "
                          "case id per line (a crash that needs the cases before it)")
    rep.add_argument("--history", default=None, metavar="RESULTS",
                     help="replay the history a crash or timeout record carries (the one for CASE_ID, or the "
                          "only one in the results file)")
    rep.add_argument("--shrink", action="store_true",
                     help="with --sequence or --history: reduce the sequence to the shortest one whose last "
                          "case still crashes, and print it")
    rep.add_argument("--out", default=".", help="where a failing case's .npz goes")
    rep.add_argument("--case-timeout", type=float, default=120.0)
    rep.add_argument("--threads", type=int, default=1)

    sub.add_parser("report", help="build reports from results files (see conform report --help)", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "report":
        try:
            return cmd_report(argv[1:])
        except UsageError as exc:
            print(f"conform: {exc}", file=sys.stderr)
            return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    from device.base import DeviceError

    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "devices":
            return cmd_devices(args)
        if args.command == "ops":
            return cmd_ops(args)
        if args.command == "repro":
            return cmd_repro(args)
    except (UsageError, DeviceError) as exc:
        print(f"conform: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `conform ops | head`
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())

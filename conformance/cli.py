"""The ``conform`` command.

  conform run      run the conformance suite on device(s), write results, JUnit XML and the report
  conform devices  list ggml devices (and ACL devices where a CANN runtime is present)
  conform ops      list the op catalogue: implemented ops, dtype signatures, tolerance reasons
  conform repro    rerun one case from its case id (the line every failure prints), or replay and
                   shrink the sequence of cases that led to a crash
  conform report   build the HTML report / CSV from results files
  conform perf     judge and time model-shaped cases (a 7B llama layer) on device(s) and ggml:CPU

Bad input gets one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
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
    if not case.inputs and all(s.srcs for s in spec.all_signatures):  # ARANGE takes none
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
    if not 0 <= case.data_seed < 2**63:
        raise bad(f"the data seed must be an integer from 0 to 2**63-1 (got {case.data_seed})")
    try:  # parameters and shapes, before any device work (data-dependent checks come with the data)
        spec.check_params(case)  # unknown, missing or mistyped params
        if spec.validate is not None:
            spec.validate(case, [])
    except (ValueError, IndexError, TypeError) as exc:  # a validator's complaint about the case, one line
        raise bad(str(exc)) from None
    _check_size(case, bad)
    return case


# The largest case conform repro builds: its inputs' elements, padding included. Inputs are held as
# stored, as float64 for the golden, and again in the device process, so this is a few GiB.
MAX_REPRO_ELEMENTS = 2**27


def _check_size(case: OpCase, bad: Any) -> None:
    """Refuse a case too big to build before anything is allocated (``ne=[100000000000,1,1,1]``)."""
    from golden.geometry import storage_of

    total = 0
    for i, t in enumerate(case.inputs):
        try:
            base = storage_of(t)
        except ValueError as exc:
            raise bad(f"input {i}: {exc}") from None
        elements = 1
        for n in base.base_ne:
            elements *= n
        total += elements
    if total > MAX_REPRO_ELEMENTS:
        gib = total * 8 / 2**30
        raise bad(f"the inputs hold {total:,} elements (about {gib:,.0f} GiB as float64); conform repro builds "
                  f"cases of at most {MAX_REPRO_ELEMENTS:,} elements")


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
    print(f"{done}/{len(rows)} ops of the CANN seed's supports_op have a golden model; under each op, its "
          "tolerance rows (destination dtype: bounds, and why)\n")
    print(f"{'OP':<20} {'FAMILY':<10} {'GOLDEN':<16} SIGNATURES (sources→destination)")
    for r in rows:
        mark = "yes" if r["implemented"] else "NOT IMPLEMENTED"
        print(f"{r['op']:<20} {r['family']:<10} {mark:<16} {' '.join(r['signatures'])}")
        for dst, row in r["tolerance"].items():
            bounds = " ".join(f"{k}={v}" for k, v in row.items() if k != "reason")
            print(f"    {dst:<6} {bounds}  ({row.get('reason', 'no reason given')})")
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
        failing = [i for i, step in enumerate(replay.steps) if step.outcome.failing]
        if not failing:
            print("every case passed: the sequence does not reproduce a crash or a wrong result")
            return 0
        first = failing[0]
        where = ("the sequence reproduces it" if first == len(cases) - 1
                 else "before the last case of the sequence")
        print(f"{replay.steps[first].outcome.value.upper()} at case {first + 1}/{len(cases)}: {where}")
        if args.shrink:
            print("(--shrink reduces sequences that end in a crash or timeout; this one ends in a wrong result)")
        return 1
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
    from conformance.harness import sequence_repro_line

    print("reproduce: " + sequence_repro_line([c.case_id for c in shortest], device, _device_options(args)))
    return 1


def _check_numbers(args: argparse.Namespace) -> None:
    from conformance.options import check_case_timeout, check_known_bug_timeout, check_threads

    try:
        check_case_timeout(args.case_timeout)
        check_known_bug_timeout(getattr(args, "known_bug_timeout", None))
        check_threads(args.threads)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if getattr(args, "workers", None) is not None and args.workers < 0:
        raise UsageError(f"--workers must be 0 or more (got {args.workers})")


def _check_expectations(paths: list[str]) -> None:
    """Expectations files load (with $CONFORM_EXPECTATIONS), or one line now rather than in pytest."""
    from device.expectation_file import ExpectationFileError, load, paths_from_env

    try:
        load([*paths, *paths_from_env()])
    except ExpectationFileError as exc:
        raise UsageError(str(exc)) from None


def _check_selection(args: argparse.Namespace) -> None:
    """-k and --op, checked before pytest starts: a bad expression is one line, not pytest's usage error."""
    from conformance.options import parse_ops

    try:
        parse_ops(args.op)
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
    _check_selection(args)
    _check_expectations(args.expectations)
    if args.perf:
        from conformance.perf import SHAPE_SETS

        if args.perf_shapes not in SHAPE_SETS:
            raise UsageError(f"unknown shape set {args.perf_shapes!r} (known: {', '.join(SHAPE_SETS)})")
    try:
        devices = expand_specs(args.device or ["ggml:CPU"], _device_options(args))
        workers = args.workers if args.workers is not None else (len(devices) if len(devices) > 1 else 0)
        if 0 < workers < len(devices):
            raise UsageError(f"{len(devices)} devices need at least {len(devices)} workers (each worker is pinned "
                             f"to one device); got --workers {workers}")
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
    junit = out / "junit.xml"
    if results.exists():
        # one results file per run: an earlier run's file in the same folder is kept under its time
        kept = out / f"results-{dt.datetime.fromtimestamp(results.stat().st_mtime):%Y%m%d-%H%M%S}.jsonl"
        results.rename(kept)
        print(f"conform: kept the previous run's results as {kept}", flush=True)
    junit.unlink(missing_ok=True)  # a JUnit file in the folder is this run's, or none
    suite = Path(__file__).parent
    cmd = [sys.executable, "-m", "pytest", str(suite), "-p", "no:cacheprovider", "-q", "-rN",
           "--results", str(results), "--junitxml", str(junit), "-o", "junit_family=xunit1",
           "--conform-profile", args.profile, "--case-timeout", str(args.case_timeout),
           "--threads", str(args.threads), "-o", "console_output_style=count", "--tb=line",
           "-W", "ignore::DeprecationWarning"]
    for d in devices:
        cmd += ["--device", d.text]
    if args.ggml_lib:
        cmd += ["--ggml-lib", args.ggml_lib]
    if args.k:
        cmd += ["-k", args.k]
    for op in args.op:
        cmd += ["--op", op]
    if args.hypothesis_db:
        cmd += ["--hypothesis-db", args.hypothesis_db]
    if args.hypothesis_seed is not None:
        cmd += ["--hypothesis-seed", args.hypothesis_seed]
    if args.known_bug_timeout is not None:
        cmd += ["--known-bug-timeout", str(args.known_bug_timeout)]
    for path in args.expectations:
        cmd += ["--expectations", str(Path(path).resolve())]
    if workers:
        cmd += ["-n", str(workers)]
    cmd += args.pytest_args
    print(f"conform: running {len(devices)} device(s) {', '.join(d.text for d in devices)} -> {out}", flush=True)
    env = dict(os.environ)
    env.setdefault("CONFORM_RUN_ID", stamp)
    code, interrupted = _run_pytest(cmd, env)
    if not interrupted and code == PYTEST_NO_TESTS:
        chosen = " ".join(f"{flag} {value!r}" for flag, value in (("-k", args.k), ("--op", ",".join(args.op)))
                          if value)
        raise UsageError(f"no test matches the selection{' ' + chosen if chosen else ''} (nothing ran)")
    if not interrupted and code == PYTEST_USAGE_ERROR:
        raise UsageError("pytest refused its arguments (its message is above)")
    if args.perf and not interrupted and code in (0, 1):
        from conformance.perf import perf_main

        print("conform: perf cases", flush=True)
        perf_code = perf_main(devices, _device_options(args), str(results), shapes=args.perf_shapes,
                              run_id=env["CONFORM_RUN_ID"], timeout=max(args.case_timeout, 600.0),
                              progress=lambda line: print(line, flush=True))
        code = max(code, perf_code)
    report_code = 0
    if not args.no_report:
        if results.exists():
            report_code = _write_report([str(results)], str(out / "report.html"))
        else:
            print("conform: no case was recorded, so there is no report", file=sys.stderr)
    if results.exists():
        print(f"conform: results {results}")
    if junit.exists():
        print(f"conform: JUnit   {junit}")
    if interrupted:
        print("conform: interrupted: the results, JUnit XML and report hold what was measured so far "
              "(marked partial)", file=sys.stderr)
        return 130
    if code in (0, 1):
        return code or report_code
    return code


PYTEST_USAGE_ERROR = 4
PYTEST_NO_TESTS = 5
# After Ctrl-C: how long pytest may take to write its JUnit XML and close its devices
INTERRUPT_GRACE_S = 5.0
INTERRUPT_FINISH_S = 60.0


def _run_pytest(cmd: list[str], env: dict[str, str]) -> tuple[int, bool]:
    """Run pytest; on Ctrl-C let it finish writing (it gets the terminal's SIGINT too; forwarded when
    only conform got it). Returns pytest's exit code and whether the run was interrupted."""
    import signal

    child = subprocess.Popen(cmd, env=env)
    try:
        return child.wait(), False
    except KeyboardInterrupt:
        pass
    print("\nconform: interrupted; pytest is writing what it measured (Ctrl-C again to stop at once)",
          file=sys.stderr, flush=True)
    try:
        try:
            code = child.wait(timeout=INTERRUPT_GRACE_S)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGINT)
            code = child.wait(timeout=INTERRUPT_FINISH_S)
    except (KeyboardInterrupt, subprocess.TimeoutExpired):
        child.kill()
        code = child.wait()
    return code, True


def cmd_perf(args: argparse.Namespace) -> int:
    from conformance.perf import SHAPE_SETS, PerfSettings, Roofline, perf_main
    from device.base import DeviceError
    from device.registry import check_spec, expand_specs
    from golden import catalogue

    _check_numbers(args)
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
        devices = expand_specs(args.device or ["ggml:CPU"], _device_options(args))
        for spec in devices:
            check_spec(spec, _device_options(args))
    except DeviceError as exc:
        raise UsageError(str(exc)) from None
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out or f"conform-out/perf-{stamp}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the output folder {str(out)!r}: {exc.strerror or exc}") from None
    results = out / "results.jsonl"
    if results.exists():
        raise UsageError(f"{results} exists: give another --out (perf results are never appended to)")
    settings = PerfSettings(warmup=args.warmup, min_repeats=min(5, args.repeats), max_repeats=args.repeats,
                            target_s=args.target)
    names = ", ".join(d.text for d in devices)
    reference = "" if any(d.text == "ggml:CPU" for d in devices) else " (and ggml:CPU, the reference)"
    print(f"conform: perf on {names}{reference} -> {out}", flush=True)
    code = perf_main(devices, _device_options(args), str(results), settings, roofline, args.shapes, ops,
                     args.case_timeout, run_id=os.environ.get("CONFORM_RUN_ID") or f"perf-{stamp}",
                     progress=lambda line: print(line, flush=True))
    if not args.no_report:
        _write_report([str(results)], str(out / "report.html"), args.baseline)
    print(f"conform: results {results}")
    return code


def _write_report(results: list[str], html: str, baseline: list[str] | None = None) -> int:
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
        from reports.cli import report_main
    except ImportError:
        raise UsageError("the report builder is not installed in this checkout") from None
    return report_main(argv)


class DefaultsFormatter(argparse.HelpFormatter):
    """Help that shows each option's default where it has a meaningful one and does not say it already."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (default in (None, False, [], argparse.SUPPRESS) or "default" in text
                or action.option_strings == [] and action.nargs in ("?", "*")):
            return text
        return f"{text} (default: %(default)s)"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="conform", description="ggml/CANN conformance harness",
                           formatter_class=DefaultsFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return sub.add_parser(name, formatter_class=DefaultsFormatter, **kwargs)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--ggml-lib", default=None, metavar="DIR",
                       help="ggml build directory (default: $GGML_LIB_DIR, else the libggml-python wheel)")

    def limits(p: argparse.ArgumentParser, threads_help: str) -> None:
        from conformance.options import MAX_CASE_TIMEOUT_S, THREADS_PER_CORE

        p.add_argument("--case-timeout", type=float, default=120.0, metavar="S",
                       help=f"seconds a device call may take before the case is a TIMEOUT and its worker is "
                            f"replaced (above 0, at most {MAX_CASE_TIMEOUT_S:g})")
        p.add_argument("--threads", type=int, default=1, metavar="N",
                       help=f"{threads_help} (1 to {THREADS_PER_CORE} per CPU core; results do not depend on it)")

    run = add("run", help="run the conformance suite and write results + report",
              description="Run the conformance suite (pytest) on one or more devices and write results.jsonl, "
                          "junit.xml and report.html into the output folder. Ctrl-C stops the run and still "
                          "writes the report and JUnit XML of what was measured, marked partial.")
    common(run)
    run.add_argument("--device", action="append", default=[], metavar="SPEC",
                     help="golden, ggml:NAME, ggml:PATTERN*, acl:N or module:factory (repeatable; default: ggml:CPU)")
    run.add_argument("--out", default=None, metavar="DIR", help="output folder (default: conform-out/<time>)")
    run.add_argument("--profile", default="ci", choices=PROFILES,
                     help="hypothesis profile: dev 12 examples per test, ci 30 (derandomized), nightly 400")
    run.add_argument("-k", default=None, metavar="EXPR",
                     help='pytest -k selection, e.g. soft_max or "add and f16" (substring: mul also selects mul_mat; '
                          'use --op for one op)')
    run.add_argument("--op", action="append", default=[], metavar="OP",
                     help="only the tests of these ops, exactly (MUL, not MUL_MAT; repeatable or comma-separated)")
    run.add_argument("--workers", "-n", type=int, default=None, metavar="N",
                     help="pytest-xdist workers (default: one per device when several, else none)")
    limits(run, "CPU backend threads per worker")
    run.add_argument("--known-bug-timeout", type=float, default=None, metavar="S",
                     help="a shorter limit for cases a known bug says may corrupt the process and hang "
                          "(default: --case-timeout; each record's time_limit says which applied)")
    run.add_argument("--expectations", action="append", default=[], metavar="FILE_OR_DIR",
                     help="known-bug entries in TOML (a file, or a folder of *.toml) to load besides the in-repo "
                          "lists, e.g. a vendor's list kept in its own repository; repeatable")
    run.add_argument("--hypothesis-db", default=None, metavar="DIR",
                     help="keep hypothesis' example database here (failures replay first next time)")
    run.add_argument("--hypothesis-seed", default=None, metavar="SEED",
                     help="force hypothesis' seed (recorded in the results header; turns the example database off)")
    run.add_argument("--no-report", action="store_true", help="skip the HTML report")
    run.add_argument("--perf", action="store_true",
                     help="after the suite, judge and time the perf cases (as conform perf) into the same results")
    run.add_argument("--perf-shapes", default="llama-7b", help="with --perf: llama-7b (default) or llama-tiny")
    run.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")

    dev = add("devices", help="list devices", description="List ggml devices (and ACL devices where CANN is "
                                                           "installed) with their free and total memory.")
    common(dev)
    dev.add_argument("--json", action="store_true", help="print JSON instead of a table")

    ops = add("ops", help="list the op catalogue",
              description="List the op catalogue: family, golden model, dtype signatures and each tolerance row "
                          "with its error-model reason.")
    ops.add_argument("--json", action="store_true", help="print JSON instead of a table")

    rep = add("repro", help="rerun one case by its case id, or replay a sequence of cases",
              description="Rerun one case from the case id a failure printed and print its verdict, or replay "
                          "a sequence of cases in order in one fresh device process (--sequence, --history), "
                          "optionally shrinking it to the shortest sequence that still crashes (--shrink). "
                          "Exit status: 0 pass, 1 the case (or sequence) fails, 2 bad input.")
    common(rep)
    rep.add_argument("case_id", nargs="?", default=None,
                     help="the case id a failure printed (with --history: which crash record to replay)")
    rep.add_argument("--device", default=None, metavar="SPEC",
                     help="device (default: the record's with --history, else ggml:CPU)")
    rep.add_argument("--sequence", nargs="+", default=None, metavar="FILE|ID",
                     help="replay these cases in order in one fresh device process: case ids, or files of one "
                          "case id per line (a crash or a wrong result that needs the cases before it)")
    rep.add_argument("--history", default=None, metavar="RESULTS",
                     help="replay the history a crash or timeout record carries (the one for CASE_ID, or the "
                          "only one in the results file)")
    rep.add_argument("--shrink", action="store_true",
                     help="with --sequence or --history: reduce the sequence to the shortest one whose last "
                          "case still crashes or times out, and print it")
    rep.add_argument("--out", default=".", metavar="DIR", help="where a failing case's .npz goes (artefacts/)")
    limits(rep, "CPU backend threads")

    perf = sub.add_parser("perf", help="judge and time model-shaped cases on device(s), next to ggml:CPU")
    common(perf)
    perf.add_argument("--device", action="append", default=[], metavar="SPEC",
                      help="device to time (repeatable; ggml:CPU, the reference, always runs)")
    perf.add_argument("--out", default=None, help="output folder (default conform-out/perf-<time>)")
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

    from conformance.triage import add_parser as add_triage

    add_triage(sub, DefaultsFormatter)
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
        if args.command == "perf":
            return cmd_perf(args)
        if args.command == "triage":
            from conformance.triage import cmd_triage

            return cmd_triage(args, UsageError)
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

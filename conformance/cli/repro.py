"""``conform repro``: rerun one case from its id, or replay (and shrink) a sequence of cases."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from conformance.harness import Harness
    from conformance.sequence import SequenceCase, Step
    from conformance.set_get import SetGetCase
    from device.spec import DeviceSpec
    from golden.case import OpCase
    from golden.graphs.case import GraphCase
    from results.record import CaseRecord

from conformance.cli.common import (
    OUTPUT_RULE,
    Output,
    UsageError,
    add_parser,
    check_numbers,
    check_outputs,
    common,
    declare,
    device_options,
    limits,
)


def check_case(case_id: str) -> OpCase | SetGetCase | GraphCase:
    """Parse a case id and check it names a case the harness can build; UsageError otherwise."""
    from conformance.data import DISTRIBUTIONS
    from conformance.set_get import SetGetCase, is_set_get_id
    from golden.case_check import CaseIdError, check_case_id
    from golden.graphs.case import is_graph_id, parse_graph_id

    if is_graph_id(case_id):  # a sequence may hold graph cases (the state tier's sequences)
        try:
            return parse_graph_id(case_id)
        except ValueError as exc:
            raise UsageError(f"malformed graph case id {case_id!r}: {exc}") from None

    if is_set_get_id(case_id):
        try:
            return SetGetCase.parse(case_id)
        except KeyError as exc:
            raise UsageError(f"malformed case id {case_id!r}: the tensor lacks its {exc.args[0]} field") from None
        except (ValueError, TypeError, IndexError) as exc:
            raise UsageError(f"malformed case id {case_id!r}: {exc}") from None
    try:
        return check_case_id(case_id, DISTRIBUTIONS)
    except CaseIdError as exc:
        raise UsageError(str(exc)) from None


def cmd_repro(args: argparse.Namespace) -> int:
    sequence_files = [item for item in args.sequence or [] if "(" not in item]
    check_outputs([Output("--out", args.out, folder=True), Output("--emit-c", args.emit_c, folder=True)],
                  [args.history, args.inputs, *sequence_files, *(args.expectations or [])])
    if args.emit_c is None:
        return _repro(args)
    if args.shrink:
        raise UsageError("--emit-c records one replay; shrink first, then --emit-c the shortest sequence")
    folder = _trace_folder(args.emit_c)
    from device.ggml.trace import TRACE_ENV

    os.environ[TRACE_ENV] = str(folder)  # the device worker started below inherits it and records its calls
    try:
        status = _repro(args)
    finally:
        os.environ.pop(TRACE_ENV, None)
    _write_c(args, folder)
    return status


def _trace_folder(given: str) -> Path:
    """--emit-c DIR: a new or empty folder (a trace appends, so an old one would mix in)."""
    folder = Path(given).expanduser().resolve()
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise UsageError(f"--emit-c {given}: not an empty folder (the C program needs one of its own)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--emit-c {given}: cannot create it ({exc})") from None
    return folder


def _write_c(args: argparse.Namespace, folder: Path) -> None:
    from device.ggml.lib import wheel_lib_dir
    from device.ggml.trace import META_FILE, write_program

    if not (folder / META_FILE).exists():
        print(f"--emit-c: no ggml call was recorded in {folder} (is --device a ggml device?)", file=sys.stderr)
        return
    wheel = wheel_lib_dir()
    include = wheel.parent / "include" if wheel is not None and (wheel.parent / "include").is_dir() else None
    what = ("cases: " + " ".join(args.sequence or []) if args.sequence else
            f"history of {args.history}" if args.history else f"case {args.case_id}")
    device = args.device or ("the record's device" if args.history else "ggml:CPU")  # --history's default
    program, build = write_program(folder, f"{what} on {device}", include)
    print(f"C program: {program}  (build: sh {build}; run: cd {folder} && ./repro)")
    if include is None:
        print("  (no libggml-python wheel here: edit build.sh's -I to a folder with ggml.h)")


def _repro(args: argparse.Namespace) -> int:
    from conformance.set_get import SetGetCase

    if args.sequence or args.history:
        return _repro_sequence(args)
    if args.shrink:
        raise UsageError("--shrink needs a sequence to shrink: --sequence FILE|ID... or --history RESULTS")
    given, node = None, None
    if args.inputs:
        args.case_id, given, node = _node_inputs(args.inputs, args.case_id)
    if not args.case_id:
        raise UsageError("repro needs a case id (or --inputs NODE.npz, --sequence, --history)")
    from golden.graphs.case import GraphCase, is_graph_id

    if is_graph_id(args.case_id):
        return _repro_graph(args)
    case = check_case(args.case_id)
    if isinstance(case, GraphCase):  # is_graph_id said no: cannot happen, but keeps the types honest
        return _repro_graph(args)
    if given is not None:
        if isinstance(case, SetGetCase):
            raise UsageError(f"--inputs {args.inputs}: a set/get case takes no node inputs")
        _check_node_inputs(args.inputs, case, given)
    device, harness = _repro_harness(args)
    try:
        if isinstance(case, SetGetCase):
            record = harness.evaluate_set_get(case)
        else:
            record = harness.evaluate(case, given_inputs=given)
        bound = _deviation_bound(harness, case, record)
    finally:
        harness.close()
    print(f"{_verdict_word(record)}  {case.case_id}  on {device}")
    if given is not None:
        print(f"  on the node's own inputs from {args.inputs}" + (f" (node {node})" if node else ""))
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
    _print_entry(record, bound)
    return _exit_status(record, args.strict)


def _node_inputs(path: str, case_id: str | None) -> tuple[str, list[np.ndarray], str | None]:
    """A model node's .npz (``conform model`` writes one per failing node): its case id, input tensors
    and node name; one line (UsageError) when the file is not one."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            names = sorted((k for k in npz.files if k.startswith("input")), key=lambda k: int(k[5:] or -1))
            if "case_id" not in npz.files or not names:
                raise UsageError(f"--inputs {path}: not a node file of conform model (no case_id and input0...)")
            recorded = str(npz["case_id"])
            inputs = [np.asarray(npz[k]) for k in names]
            node = str(npz["node"]) if "node" in npz.files else None
    except UsageError:
        raise
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(f"--inputs {path}: cannot read it as an .npz ({_first_line(exc)})") from None
    if case_id and case_id != recorded:
        raise UsageError(f"--inputs {path} holds the inputs of {recorded}, not of the case id given")
    return recorded, inputs, node


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _check_node_inputs(path: str, case: object, inputs: list[np.ndarray]) -> None:
    """Each tensor has the size its input spec needs (raw bytes for a block format)."""
    from golden import dtypes
    from golden.case import OpCase

    assert isinstance(case, OpCase)
    if len(inputs) != len(case.inputs):
        raise UsageError(f"--inputs {path}: {len(inputs)} tensors for a case of {len(case.inputs)} inputs")
    for i, (x, spec) in enumerate(zip(inputs, case.inputs, strict=True)):
        need = (spec.nelements // dtypes.block_size(spec.dtype) * dtypes.type_size(spec.dtype)
                if dtypes.is_quantized(spec.dtype) else spec.nelements)
        if x.size != need:
            raise UsageError(f"--inputs {path}: input{i} has {x.size} values, the case's {spec.dtype} "
                             f"input {i} needs {need}")


def _verdict_word(record: CaseRecord) -> str:
    """PASS, KNOWN (a failure a listed entry gives, as the suite counts it), or the unexpected outcome."""
    return "KNOWN" if _is_known(record) else record.outcome.value.upper()


def _is_known(record: CaseRecord) -> bool:
    # the harness sets ``expected`` only where an entry covering the case lists this very outcome (a
    # crash-only entry does not explain a wrong value), the rule the suite's verdict uses
    return record.failing and record.expected is not None


def _exit_status(record: CaseRecord, strict: bool) -> int:
    """0 pass or known (the suite's count), 1 an unexpected failure, or a known one under --strict."""
    if not record.failing:
        return 0
    return 1 if record.expected is None or strict else 0


def _deviation_bound(harness: Harness, case: object, record: CaseRecord) -> str | None:
    """The documented deviation's own bound the case was judged against (an entry with a tolerance), if any."""
    from golden.case import OpCase

    if record.expected is None or not isinstance(case, OpCase):
        return None
    bug = next((b for b in harness.known_bugs_of(case) if b.id == record.expected.id), None)
    if bug is None or bug.tolerance is None:
        return None
    ratio = (record.extra or {}).get("known_deviation_error_ratio")
    within = f"error ratio {ratio:.3g} of it" if isinstance(ratio, (int, float)) else "within it"
    return f"{bug.tolerance.reason} ({within})"


def _print_entry(record: CaseRecord, bound: str | None = None) -> None:
    """The listed entry that covers the record: its id, where it is written, what it says, its bound."""
    entry = record.expected
    if entry is None:
        if record.failing:
            print(f"  no listed entry gives {record.outcome.value.upper()} for this case: unexpected (exit status 1)")
        return
    where = f" ({entry.source})" if entry.source else ""
    if not record.failing:  # an entry covers the case, yet it passed: the report lists it as stale
        print(f"  known bug {entry.id}{where} covers this case, yet it passed: a stale entry for this release?")
        return
    gives = "/".join(o.upper() for o in entry.outcomes)
    print(f"  known bug {entry.id}{where}, which gives {gives}: {entry.reason}")
    if bound is not None:
        print(f"  judged against the entry's own bound: {bound}")
    print("  exit status 0 as the suite counts it (--strict: 1)")


def _repro_graph(args: argparse.Namespace) -> int:
    """``conform repro 'GRAPH[pattern](...)'``: one graph case, its three runs and the localisation."""
    from conformance.graphs import evaluate_graph_case
    from golden.graphs.case import parse_graph_id

    try:
        case = parse_graph_id(args.case_id)
    except (ValueError, TypeError, IndexError) as exc:
        raise UsageError(f"malformed graph case id {args.case_id!r}: {exc}") from None
    device, harness = _repro_harness(args)
    try:
        record = evaluate_graph_case(harness, case)
    finally:
        harness.close()
    print(f"{_verdict_word(record)}  {case.case_id}  on {device}")
    extra = record.extra or {}
    for verdict in extra.get("outputs", []) + extra.get("nodes", []):
        kind = "output" if verdict in extra.get("outputs", []) else "node  "
        print(f"  {verdict['run']:<8} {kind} {verdict['node']:<14} error_ratio {verdict['error_ratio']:.3g}  "
              f"nmse {verdict['nmse']:.3g}  {'ok' if verdict['passed'] else 'FAIL'}")
    for run, why in extra.get("not_run", {}).items():
        print(f"  {run} run not made: {why}")
    if record.message:
        print(f"  {record.message}")
    if record.crash is not None:
        print("  stderr tail:\n" + "\n".join("    " + ln for ln in record.crash.stderr_tail.splitlines()[-10:]))
    _print_entry(record)
    return _exit_status(record, args.strict)


def _sequence_case(case_id: str) -> SequenceCase:
    """A sequence's case: a graph case id (its crash history holds graph cases too) or an op's."""
    from golden.graphs.case import is_graph_id, parse_graph_id

    if not is_graph_id(case_id):
        return check_case(case_id)
    try:
        return parse_graph_id(case_id)
    except (ValueError, TypeError, IndexError) as exc:
        raise UsageError(f"malformed graph case id {case_id!r}: {exc}") from None


def _repro_harness(args: argparse.Namespace) -> tuple[DeviceSpec, Harness]:
    """The device --device names (else ggml:CPU), checked, and a harness on it that writes artefacts
    only where --out says."""
    from conformance.harness import Harness
    from device.registry import check_spec

    check_numbers(args)
    device = _repro_device(args, None)
    check_spec(device, device_options(args))
    harness = Harness(device, device_options(args), out_dir=args.out or ".", timeout=args.case_timeout,
                      keep_artefacts=args.out is not None, stage_memory_gib=args.stage_memory,
                      expectations=_expectations(args))
    return device, harness


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
    from results.outcome import Outcome
    from results.record import CaseRecord

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
    from conformance.sequence import SequenceRunner, shrink
    from device.registry import check_spec
    from results.outcome import Outcome

    if args.sequence and args.history:
        raise UsageError("give either --sequence or --history, not both")
    check_numbers(args)
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
    cases = [_sequence_case(case_id) for case_id in ids]
    check_spec(device, device_options(args))

    def show(index: int, total: int, step: Step) -> None:
        note = f"  {step.message}"[:200] if step.outcome.failing and step.message else ""
        word = "KNOWN" if step.outcome.failing and not step.unexpected else step.outcome.value.upper()
        known = f"  (known bug {step.expected.id})" if step.expected is not None and step.outcome.failing else ""
        print(f"  {index}/{total} {word:<11} {step.case_id}{known}{note}", flush=True)

    runner = SequenceRunner(device, device_options(args), args.case_timeout, on_step=show,
                            expectations=_expectations(args))
    print(f"replaying {len(cases)} case(s) on {device}, in order, in a fresh device process", flush=True)
    replay = runner.replay(cases)
    died = replay.died_at
    if died is None:
        failing = [i for i, step in enumerate(replay.steps) if step.outcome.failing]
        if not failing:
            print("every case passed: the sequence does not reproduce a crash or a wrong result")
            return 0
        unexpected = [i for i in failing if replay.steps[i].unexpected]
        first = (unexpected or failing)[0]  # the first failure no entry explains, else the first known one
        where = ("the sequence reproduces it" if first == len(cases) - 1
                 else "before the last case of the sequence")
        print(f"{replay.steps[first].outcome.value.upper()} at case {first + 1}/{len(cases)}: {where}")
        if args.shrink:
            print("(--shrink reduces sequences that end in a crash or timeout; this one ends in a wrong result)")
        return _sequence_status(replay.steps[first] if unexpected else replay.steps[failing[-1]], args.strict)
    outcome = replay.steps[died].outcome
    if died < len(cases) - 1:
        print(f"{outcome.value.upper()} at case {died + 1}/{len(cases)}, before the last case of the sequence")
    else:
        print(f"{outcome.value.upper()} at case {died + 1}/{len(cases)}: the sequence reproduces it")
    if target is not None and outcome is not target:
        print(f"(the record says {target.value.upper()})")
    earlier = [step for step in replay.steps[:died] if step.unexpected]
    last = earlier[0] if earlier else replay.steps[died]  # an unexpected wrong result before the crash counts
    if not args.shrink:
        return _sequence_status(last, args.strict)
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

    print("reproduce: " + sequence_repro_line([c.case_id for c in shortest], device, device_options(args)))
    return _sequence_status(last, args.strict)


def _sequence_status(step: Step, strict: bool) -> int:
    """A replay's verdict on the step it ends with: the entry that covers its outcome, by id, or UNEXPECTED."""
    entry = step.expected
    if step.unexpected or entry is None:
        print(f"UNEXPECTED: no listed entry gives {step.outcome.value.upper()} for {step.case_id}")
        return 1
    where = f" ({entry.source})" if entry.source else ""
    print(f"KNOWN: known bug {entry.id}{where} gives {step.outcome.value.upper()} here: {entry.reason}")
    print("  exit status 0 as the suite counts it (--strict: 1)")
    return 1 if strict else 0


def _expectations(args: argparse.Namespace) -> tuple[str, ...]:
    """--expectations files and $CONFORM_EXPECTATIONS, as the suite reads them (checked: one line if bad)."""
    from conformance.cli.common import expectation_paths

    return expectation_paths(args.expectations)


def declare_parser(sub: Any) -> None:
    """This subcommand's arguments on ``conform``'s parser."""
    rep = add_parser(sub, "repro", help="rerun one case by its case id, or replay a sequence of cases",
              description="Rerun one case from the case id a failure printed and print its verdict, or replay "
                          "a sequence of cases in order in one fresh device process (--sequence, --history), "
                          "optionally shrinking it to the shortest sequence that still crashes (--shrink). "
                          "A failure a listed known bug gives (the entry lists that outcome) prints KNOWN with "
                          "the entry, as the suite counts it. Exit status: 0 pass or known, 1 a failure no entry "
                          "explains (or, with --strict, any failure), 2 bad input. Outputs: " + OUTPUT_RULE + ".")
    common(rep)
    rep.add_argument("case_id", nargs="?", default=None,
                     help="the case id a failure printed (with --history: which crash record to replay)")
    rep.add_argument("--device", default=None, metavar="SPEC",
                     help="device (default: the record's with --history, else ggml:CPU)")
    rep.add_argument("--inputs", default=None, metavar="NODE.npz",
                     help="judge the device on exactly these tensors: a node file conform model wrote for a "
                          "failing node (its case id comes from the file)")
    rep.add_argument("--sequence", nargs="+", default=None, metavar="FILE|ID",
                     help="replay these cases in order in one fresh device process: case ids, or files of one "
                          "case id per line (a crash or a wrong result that needs the cases before it)")
    rep.add_argument("--history", default=None, metavar="RESULTS",
                     help="replay the history a crash or timeout record carries (the one for CASE_ID, or the "
                          "only one in the results file)")
    rep.add_argument("--shrink", action="store_true",
                     help="with --sequence or --history: reduce the sequence to the shortest one whose last "
                          "case still crashes or times out, and print it")
    rep.add_argument("--out", default=None, metavar="DIR",
                     help="save a failing case's inputs, golden and device output as an .npz under DIR/artefacts/, "
                          "a folder new or existing (default: nothing is written)")
    rep.add_argument("--emit-c", default=None, metavar="DIR",
                     help="record every ggml call the device worker makes and write DIR/repro.c (a standalone C "
                          "program replaying them, inputs in DIR/blobs) and DIR/build.sh (ggml devices only)")
    rep.add_argument("--strict", action="store_true",
                     help="exit 1 on a known failure too (default: a known bug's failure exits 0, as in the suite)")
    declare(rep, "--expectations")
    limits(rep)

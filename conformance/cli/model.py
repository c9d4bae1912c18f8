"""``conform model``: run a GGUF (a user's, or a synthetic tiny model of a named architecture) through
libllama on a ggml device, judge every node it computes against the golden, and its logits end to end.

Exit status: 0 pass, 1 a node or the logits fail, 2 bad input (one line on stderr), 3 incomplete: a node the
device computed, or the logits, could not be judged (the summary says why, one line per reason); with
``--allow-unjudged`` such a run passes and says what was left out.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import pickle
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from conformance.model import ModelVerdict

GGUF_MAGIC = b"GGUF"
DEFAULT_PREFILL = "1,5,9,17,33,65"  # a model without a tokenizer (no_vocab): ids
DEFAULT_PROMPT = "The capital of France is"  # a model with one: text, through its tokenizer
MAX_DECODE = 2048
FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}  # enum llama_flash_attn_type


class ModelUsageError(Exception):
    """Bad input to conform model: one line, exit 2."""


def build_parser() -> argparse.ArgumentParser:
    from conformance.cli.common import OUTPUT_RULE, DefaultsFormatter, OneLineParser, declare
    from conformance.model_synthetic import ARCHITECTURES, WEIGHT_TYPES
    from device.llama.capture import CACHE_TYPES

    p = OneLineParser(prog="conform model", formatter_class=DefaultsFormatter,
                      description="Run a model through libllama on a device, judge every node it computes against "
                                  "the golden (first failing node with a conform repro line and an .npz), then "
                                  "its logits end to end next to ggml:CPU. Exit status: 0 pass, 1 fail, 2 bad input, "
                                  "3 incomplete (a node the device computed, or the logits, not judged; see "
                                  "--allow-unjudged). Outputs: " + OUTPUT_RULE + ".")
    p.add_argument("gguf", nargs="?", default=None, help="a GGUF model file (or use --arch for a synthetic one)")
    p.add_argument("--arch", default=None, choices=ARCHITECTURES,
                   help="a synthetic tiny model of this architecture (2 layers, gemma3 6, 128-token vocabulary, "
                        "seeded weights)")
    p.add_argument("--weights", default="q8_0", choices=WEIGHT_TYPES,
                   help="with --arch: the matrices' type, or a llama-quantize mix (q4_k_m, q5_k_m, q3_k_m, q2_k; "
                        "mxfp4: gpt-oss's MXFP4 experts, for a MoE --arch)")
    p.add_argument("--seed", type=int, default=0, help="with --arch: the weights' seed")
    p.add_argument("--vocab", action="store_true",
                   help="with --arch: a real byte-level BPE tokenizer with a ChatML template (271 tokens) in place "
                        "of no_vocab, so prompts are text")
    p.add_argument("--device", action="append", default=[], metavar="ggml:NAME",
                   help="the ggml device: ggml:CPU (the default), ggml:Vulkan0, ggml:CANN0; repeatable (one section "
                        "each in model.html)")
    p.add_argument("--ggml-lib", default=None, metavar="DIR",
                   help="the llama.cpp build folder with libllama and ggml (default: $GGML_LIB_DIR)")
    p.add_argument("--prompt", default=None, metavar="TEXT",
                   help="the prefill as text, tokenized by the model's own tokenizer through libllama (default: "
                        f"{DEFAULT_PROMPT!r} where the model has a tokenizer)")
    p.add_argument("--prompt-file", default=None, metavar="FILE", help="the prompt's text from a file")
    p.add_argument("--chat", action="store_true",
                   help="lay the prompt out as a user message by the model's chat template (llama_chat_apply_template)")
    p.add_argument("--tokens", default=None, metavar="ID,...",
                   help=f"the prefill's token ids (default for a model without a tokenizer: {DEFAULT_PREFILL})")
    p.add_argument("--decode", type=int, default=2, metavar="N",
                   help=f"greedy decode steps after the prefill (KV cache), up to {MAX_DECODE}: each feeds the "
                        "golden's greedy token to the device and the golden; the device's own choice is reported "
                        "beside it")
    p.add_argument("--threads", type=int, default=1, metavar="N", help="CPU threads")
    p.add_argument("--flash-attn", default="off", choices=tuple(FLASH_ATTN),
                   help="llama.cpp's flash attention: off (MUL_MAT, SOFT_MAX, MUL_MAT nodes), on (FLASH_ATTN_EXT "
                        "nodes), auto (as llama.cpp decides for the device, as users run it)")
    p.add_argument("--cache-type-k", default="f16", choices=CACHE_TYPES,
                   help="the K cache's type (llama.cpp's --cache-type-k): its writes and the K views the attention "
                        "reads are judged")
    p.add_argument("--cache-type-v", default="f16", choices=CACHE_TYPES,
                   help="the V cache's type (a quantized V cache needs --flash-attn on in llama.cpp)")
    p.add_argument("--ctx", type=int, default=0, metavar="N",
                   help="the context size; where prompt + decode do not fit, llama.cpp's context shift (seq_rm + "
                        "seq_add: the K cache roped in place) keeps the run going (default: room for the whole run)")
    p.add_argument("--parallel", type=int, default=1, metavar="N",
                   help="sequences decoded in one batch (prompts of different lengths, one unified cache); midway the "
                        "last is removed and a new one reuses its cells")
    p.add_argument("--no-cpu", action="store_true", help="skip ggml:CPU's logits beside the device's")
    p.add_argument("--allow-unjudged", action="store_true",
                   help="accept nodes (and logits) the golden cannot judge: exit 0 with the gap stated, not 3 "
                        "(incomplete)")
    p.add_argument("--out", default=None, metavar="DIR", help="output folder (default: conform-out/model-<time>)")
    declare(p, "--expectations")
    return p


def _token_ids(text: str) -> list[int]:
    try:
        prefill = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise ModelUsageError(f"--tokens {text!r}: not a comma-separated list of token ids") from None
    if len(prefill) < 2 or any(t < 0 for t in prefill):
        raise ModelUsageError(f"--tokens {text!r}: a prefill needs at least two non-negative token ids")
    return prefill


def _check_prompt_args(args: argparse.Namespace) -> None:
    """The prompt options that contradict each other, before anything loads."""
    if args.decode < 0 or args.decode > MAX_DECODE:
        raise ModelUsageError(f"--decode {args.decode}: between 0 and {MAX_DECODE} steps")
    if args.prompt is not None and args.prompt_file is not None:
        raise ModelUsageError("give --prompt or --prompt-file, not both")
    if args.tokens is not None and (args.prompt is not None or args.prompt_file is not None or args.chat):
        raise ModelUsageError("--tokens gives ids: it takes no --prompt, --prompt-file or --chat")
    if args.tokens is not None:
        _token_ids(args.tokens)
    if args.parallel < 1 or args.parallel > 16:
        raise ModelUsageError(f"--parallel {args.parallel}: between 1 and 16 sequences")
    if args.ctx < 0:
        raise ModelUsageError(f"--ctx {args.ctx}: a positive context size (0: room for the whole run)")


def _prefill(args: argparse.Namespace, path: Path, lib_dir: str | None) -> tuple[list[int], str]:
    """The prefill's ids and the text they came from (empty for ids): --tokens as given, else the prompt
    through the model's tokenizer (the default prompt where it has one, the default ids where it has none);
    every id inside the vocabulary (one line naming the first outside it)."""
    from device.llama.tokenizer import read_vocabulary

    text: str | None = args.prompt
    if args.prompt_file is not None:
        try:
            text = Path(args.prompt_file).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelUsageError(f"--prompt-file {args.prompt_file}: cannot read it ({exc.__class__.__name__})") \
                from None
    if text is not None and not text.strip():
        raise ModelUsageError("the prompt is empty")
    # one vocabulary load where the text is known; the default prompt needs to know first whether there is a
    # tokenizer to take it
    vocab = read_vocabulary(lib_dir, path, text, chat=args.chat)
    if args.tokens is None and text is None:
        if vocab.has_tokenizer:
            text = DEFAULT_PROMPT
            vocab = read_vocabulary(lib_dir, path, text, chat=args.chat)
        elif args.chat:
            raise ModelUsageError(f"{path} has no tokenizer (no_vocab): --chat needs a prompt it can tokenize")
    if text is not None:
        ids, shown = vocab.prompt_ids, vocab.prompt_text
        if len(ids) < 2:
            raise ModelUsageError(f"the prompt {text[:60]!r} is {len(ids)} token(s): a prefill needs at least two")
    else:
        ids, shown = _token_ids(args.tokens or DEFAULT_PREFILL), ""
    outside = next((t for t in ids if t >= vocab.n_vocab), None)
    if outside is not None:
        raise ModelUsageError(f"token id {outside} is outside the vocabulary of {path} ({vocab.n_vocab} tokens: "
                              f"ids 0..{vocab.n_vocab - 1})")
    return ids, shown


def _check_gguf(path: Path) -> None:
    if not path.is_file():
        raise ModelUsageError(f"{path}: no such file")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise ModelUsageError(f"{path}: not a GGUF file (it starts with {magic!r}, not b'GGUF')")


def _check_fits(path: Path, device: str, lib_dir: str | None) -> None:
    import ctypes as C

    from device.llama.lib import load

    ggml = load(lib_dir).ggml
    for dev in ggml.devices():
        if ggml.ggml_backend_dev_name(dev).decode() == device:
            free, total = C.c_size_t(), C.c_size_t()
            ggml.ggml_backend_dev_memory(dev, C.byref(free), C.byref(total))
            need = path.stat().st_size
            if free.value and need > free.value:
                raise ModelUsageError(f"{path}: {need / 2**20:.0f} MiB of weights do not fit in {device}'s "
                                      f"{free.value / 2**20:.0f} MiB free memory")
            return
    raise ModelUsageError(f"no ggml device {device!r} here (have: {', '.join(ggml.device_names())})")


def _print_findings(verdict: ModelVerdict) -> None:
    """The nodes that did not pass: the device's own first, then those other backends computed, apart."""
    others = verdict.computed_elsewhere
    if others:
        mine = len(verdict.nodes) - sum(others.values())
        print(f"computed by {verdict.device}: {mine} nodes; by "
              + ", ".join(f"{backend}: {count}" for backend, count in sorted(others.items()))
              + " (ggml's scheduler put them in host memory: the device declined them, or llama.cpp keeps them "
                "there; judged, listed apart)")
    for apart in (False, True):  # the device's own findings first, then the other backends' apart
        listed = [n for n in verdict.nodes if n.status not in ("pass", "not judged") and verdict.elsewhere(n) == apart]
        if apart and listed:
            print("  on other backends (not the device under test):")
        for n in listed:
            print(f"  node {n.index} step {n.step} {n.name} {n.op} [{n.shapes}]: {n.status}"
                  + (f" on {n.computed_by}" if apart else "")
                  + (f" ({n.error_ratio:.3g}x)" if n.error_ratio is not None else "") + f" {n.detail[:160]}")


def _print_summary(verdict: object, device_spec: str, lib_dir: str | None, out: Path,
                   crash: Crash | None = None) -> None:
    """The run's summary; ``crash``: the process died after the nodes were judged (``verdict`` holds them)."""
    from conformance.model import ModelVerdict

    assert isinstance(verdict, ModelVerdict)
    by_op: dict[str, list[float]] = {}
    for n in verdict.nodes:
        by_op.setdefault(n.op, []).append(n.error_ratio if n.error_ratio is not None else float("nan"))
    print(f"model {verdict.model} ({verdict.description}) on {device_spec}")
    if verdict.libllama:
        print(f"libllama: {verdict.libllama}")
    counts = ", ".join(f"{v} {k}" for k, v in sorted(verdict.counts.items()))
    print(f"nodes: {len(verdict.nodes)} computed ({counts})")
    print(f"{'op':<14} {'nodes':>5} {'max error ratio':>16}")
    for op, ratios in sorted(by_op.items()):
        judged = [r for r in ratios if r == r]
        print(f"{op:<14} {len(ratios):>5} {max(judged) if judged else float('nan'):>16.3g}")
    _print_findings(verdict)
    for reason, count, ops in verdict.not_judged:  # one line per reason: the nodes are in nodes.tsv
        print(f"  not judged: {count} node(s) ({', '.join(ops)}): {reason}")
    first = verdict.first_failure
    if first is not None:
        lib = f" --ggml-lib {lib_dir}" if lib_dir else ""
        print(f"first failing node: {first.index} {first.name} ({first.op}, step {first.step}): {first.detail}")
        if first.case_id:
            print(f"  repro: conform repro '{first.case_id}' --device {device_spec}{lib}")
        if first.artefact:
            print(f"  tensors: {first.artefact}")
    if verdict.decode:
        fed = [d.fed for d in verdict.decode]
        print(f"decode: {len(fed)} greedy step(s) fed the golden's token: {fed[:16]}{' ...' if len(fed) > 16 else ''}")
        diverged = verdict.first_divergence
        if diverged is not None:
            print(f"  finding: the device's own greedy choice first differs at step {diverged.step}: device "
                  f"{diverged.device}, golden {diverged.golden} ({diverged.device_from}; the golden's logits put "
                  f"its choice {diverged.golden_margin:.3g} above the device's)")
        elif all(d.golden is not None for d in verdict.decode):
            print("  the device's own greedy choice is the golden's at every step")
    if verdict.logits_not_judged:
        print(f"logits vs the golden's own forward pass: not judged: {verdict.logits_not_judged}")
    else:
        print(f"logits vs the golden's own forward pass (NMSE bar {verdict.logits_bar:.3g}):")
        print(f"  {'run':<14} {'NMSE':>10} {'KL mean':>10} {'KL p99.9':>10} {'KL max':>10} {'top-1':>7}")
        for f in verdict.logits:
            print(f"  {f.device:<14} {f.nmse:>10.3g} {f.kl_mean:>10.3g} {f.kl_p999:>10.3g} {f.kl_max:>10.3g} "
                  f"{f.top1_agreement:>7.1%}")
    if crash is not None:
        print(f"model {verdict.model} on {device_spec}: {crash.verdict}")
        print(f"  {crash.detail}")
        print(f"  the {len(verdict.nodes)} nodes above were judged before it; node by node: {verdict.verdict}")
        print(f"verdict: {crash.verdict}  (results in {out})")
        return
    print(f"verdict: {verdict.verdict}  (results in {out})")


@dataclass
class Crash:
    """The model run's process died (a device abort): where, by the progress it had written."""

    verdict: str
    detail: str
    stage: str
    node: str
    # the node verdicts where the process died after judging them (in the fused or CPU run): a ModelVerdict
    partial: object = None

    def record(self) -> dict[str, str]:
        return {"verdict": self.verdict, "detail": self.detail, "stage": self.stage, "node": self.node}


def _check_in_child(progress: TextIO, path: str, device: str, lib_dir: str | None, steps: list[list[int]],
                    out: str, threads: int, with_cpu: bool, flash_attn: int,
                    expectations: tuple[str, ...] = (), greedy: int = 0, prompt: str = "",
                    kv: object = None) -> object:
    from conformance.model import check_model
    from device.llama.capture import KvOptions

    assert kv is None or isinstance(kv, KvOptions)

    def keep(verdict: object) -> None:  # for run_isolated, should a later run kill this process
        (Path(out) / PARTIAL_RESULT).write_bytes(pickle.dumps(verdict))

    return check_model(path, device, lib_dir, steps, Path(out), threads=threads, with_cpu=with_cpu,
                       progress=progress, flash_attn=flash_attn, expectations=expectations, greedy=greedy,
                       prompt=prompt, kv=kv, nodes_judged=keep)


def _child_main(target: Callable[..., object], args: tuple[object, ...], out: str,
                conn: Connection | None = None) -> None:
    from conformance.cli.model_progress import ProgressTee
    from device.base import DeviceError
    from device.expectation_file import ExpectationFileError

    folder = Path(out)
    with (folder / "progress.log").open("w") as log:
        progress = ProgressTee(log, conn)
        try:
            result: tuple[str, object] = ("ok", target(progress, *args))
        except (DeviceError, ExpectationFileError) as exc:
            result = ("error", str(exc))
    (folder / "child-result.pickle").write_bytes(pickle.dumps(result))


def _follow(process: BaseProcess, reader: Connection, show: Callable[[str], None]) -> None:
    """Show each progress line as the child sends it, until the child has exited and the pipe is drained."""
    from multiprocessing.connection import wait

    open_pipe = True
    while open_pipe:
        for ready in wait([reader, process.sentinel]):
            if ready is reader:
                try:
                    show(reader.recv_bytes().decode(errors="replace"))
                except EOFError:
                    open_pipe = False
            elif not reader.poll():  # the child exited and nothing is left to read
                open_pipe = False
    process.join()


def run_isolated(target: Callable[..., object], args: tuple[object, ...], out: Path,
                 show: Callable[[str], None] | None = None) -> object:
    """``target(progress, *args)`` in a fresh process: a device that aborts takes only that process down, and
    the crash is reported with the stage and the node it was in (from the progress file). ``show`` gets
    each progress line as the child writes it."""
    result_file, partial_file = out / "child-result.pickle", out / PARTIAL_RESULT
    result_file.unlink(missing_ok=True)
    partial_file.unlink(missing_ok=True)
    context = multiprocessing.get_context("spawn")
    reader, writer = context.Pipe(duplex=False)
    process = context.Process(target=_child_main, args=(target, args, str(out), writer))
    process.start()
    writer.close()  # the child holds the only writing end: its exit ends the pipe
    try:
        _follow(process, reader, show or (lambda line: None))
    except KeyboardInterrupt:
        process.terminate()
        process.join()
        raise
    finally:
        reader.close()
    partial = pickle.loads(partial_file.read_bytes()) if partial_file.exists() else None
    partial_file.unlink(missing_ok=True)
    if result_file.exists():
        kind, payload = pickle.loads(result_file.read_bytes())
        result_file.unlink()
        if kind == "error":
            raise ModelUsageError(str(payload))
        return payload
    lines = (out / "progress.log").read_text().splitlines() if (out / "progress.log").exists() else []
    stage = next((line.split("\t", 1)[1] for line in reversed(lines) if line.startswith("stage\t")), "loading")
    # the last node begun, or the last llama_decode entered when no node of that step had begun
    last = next((line for line in reversed(lines) if line.startswith(("node\t", "decode\t", "stage\t"))), "")
    node_line = next((line for line in reversed(lines) if line.startswith("node\t")), "")
    code = process.exitcode or 0
    how = f"signal {-code}" if code < 0 else f"exit status {code}"
    where = f"during the {stage}"
    if last.startswith("decode\t"):
        _, step, n_tokens, edits = (last.split("\t", 3) + [""])[:4]
        verdict = f"CRASH in llama_decode of step {step}, before its first node"
        where += f", in llama_decode of step {step} ({n_tokens} token(s)) before any node of it ran"
        if "seq_add" in edits:
            verdict += " (a context shift)"
            where += (f", after the KV-cache edits {edits}: libllama builds and runs the K cache's shift in that "
                      "decode")
        elif edits:
            where += f", after the KV-cache edits {edits}"
    elif node_line and stage.startswith("capture"):
        _, index, step, op, name = node_line.split("\t", 4)
        verdict = f"CRASH at node {index} ({name}, {op}, step {step})"
    else:
        verdict = f"CRASH in the {stage}"
    return Crash(verdict, f"the model process died ({how}) {where}; the device's stderr is above", stage, node_line,
                 partial)


def _write_json(path: Path, record: dict[str, object]) -> None:
    """``record`` as model.json, written as it is encoded: json.dumps with an indent builds the whole text from
    a list of every piece first, 41.6 MiB of a --decode 256 run's peak (12,850 nodes, a 5.9 MB file)."""
    with path.open("w") as f:
        json.dump(record, f, indent=1, default=str)


def _write_results(folder: Path, device_spec: str, verdict: ModelVerdict) -> dict[str, object]:
    record: dict[str, object] = {"device_spec": device_spec, **verdict.as_dict()}
    _write_json(folder / "model.json", record)
    with (folder / "nodes.tsv").open("w") as f:
        f.write("index\tstep\tname\top\tran_on\tshapes\tstatus\terror_ratio\tcase_id\tdetail\n")
        for n in verdict.nodes:
            f.write(f"{n.index}\t{n.step}\t{n.name}\t{n.op}\t{n.backend}\t{n.shapes}\t{n.status}\t{n.error_ratio}\t"
                    f"{n.case_id}\t{n.detail}\n")
    # the model's distinct node cases, for the op tier: conform repro --sequence node-cases.txt
    distinct = dict.fromkeys(n.case_id for n in verdict.nodes if n.case_id)
    (folder / "node-cases.txt").write_text("".join(f"{case_id}\n" for case_id in distinct))
    return record


def _crash_record(folder: Path, device_spec: str, model: Path, crash: Crash) -> dict[str, object]:
    from conformance.model import LOGITS_NMSE_BAR

    record: dict[str, object] = {
        "device_spec": device_spec, "model": str(model), "device": device_spec.partition(":")[2], "description": "",
        "verdict": crash.verdict, "counts": {}, "replayed_from_device": 0, "first_failure": None, "logits": [],
        "logits_nmse_bar": LOGITS_NMSE_BAR, "nodes": [], "crash": crash.record()}
    (folder / "model.json").write_text(json.dumps(record, indent=1))
    return record


PARTIAL_RESULT = "child-nodes-judged.pickle"  # the child's node verdicts, written before its fused run
MODEL_OUTPUTS = ("model.json", "nodes.tsv", "node-cases.txt", "progress.log", "child-result.pickle", PARTIAL_RESULT)


def _check_outputs(out: Path, gguf: str | None, device_specs: list[str]) -> None:
    """The shared rule (conformance/cli/common.py): the output folder is a folder, and nothing written in it
    (a folder per device where there are several) is the model read; one line, exit 2."""
    from conformance.cli.common import Output, UsageError, check_outputs, is_conform_html

    folders = [out] if len(device_specs) == 1 else [out, *(out / s.partition(":")[2] for s in device_specs)]
    outputs = [Output("--out", folder, folder=True, contents=MODEL_OUTPUTS) for folder in folders]
    outputs.append(Output("--out", out / "model.html", "a conform HTML report", is_conform_html))
    try:
        check_outputs(outputs, [gguf])
    except UsageError as exc:
        raise ModelUsageError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    from conformance.cli.common import UsageError, expectation_paths

    if (args.gguf is None) == (args.arch is None):
        raise ModelUsageError("give a GGUF file or --arch ARCH (one of them)")
    device_specs = list(dict.fromkeys(args.device or ["ggml:CPU"]))
    for spec in device_specs:
        kind, _, name = spec.partition(":")
        if kind != "ggml" or not name:
            raise ModelUsageError(f"--device {spec!r}: the model tier runs on ggml devices (ggml:NAME)")
    if args.threads < 1:
        raise ModelUsageError(f"--threads {args.threads}: at least 1")
    _check_prompt_args(args)
    try:
        expectations = expectation_paths(args.expectations)
    except UsageError as exc:
        raise ModelUsageError(str(exc)) from None
    out = Path(args.out or f"conform-out/model-{time.strftime('%Y%m%d-%H%M%S')}")
    _check_outputs(out, args.gguf, device_specs)
    if args.gguf is not None:
        _check_gguf(Path(args.gguf))
    with _removed_on_failure(out):
        return _run_in(out, args, device_specs, expectations)


@contextlib.contextmanager
def _removed_on_failure(out: Path) -> Iterator[None]:
    """A run that fails (bad input found once the folder exists, a device that does not open) leaves no
    --out behind: what it wrote there is removed, and the folder too where this run made it."""
    from device.base import DeviceError

    made = [folder for folder in (out, *out.parents) if not folder.exists()]
    before = set(out.iterdir()) if out.is_dir() else set()
    try:
        yield
    except (ModelUsageError, DeviceError):
        if out.is_dir():
            for entry in set(out.iterdir()) - before:
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        for folder in made:  # innermost first; only folders this run made, and only while empty
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def _run_in(out: Path, args: argparse.Namespace, device_specs: list[str], expectations: tuple[str, ...]) -> int:
    from conformance.cli.model_progress import ProgressDisplay
    from conformance.model import ModelVerdict
    from conformance.model_synthetic import shape_for, write_tiny_model
    from device.llama.capture import KvOptions
    from reports.model_html import build_model_report

    out.mkdir(parents=True, exist_ok=True)
    if args.arch is not None:
        cache_types = (args.cache_type_k, args.cache_type_v)
        path = write_tiny_model(out / f"tiny-{args.arch}-{args.weights}-s{args.seed}"
                                f"{'-vocab' if args.vocab else ''}.gguf", args.arch, args.weights, args.seed,
                                shape=shape_for(args.weights, cache_types), vocab=args.vocab)
    else:
        path = Path(args.gguf)
    _check_gguf(path)
    for spec in device_specs:  # every device is checked before any runs: bad input leaves no results
        _check_fits(path, spec.partition(":")[2], args.ggml_lib)
    prefill, prompt = _prefill(args, path, args.ggml_lib)
    steps = [prefill]
    kv = KvOptions(args.cache_type_k, args.cache_type_v, args.ctx, args.parallel)
    if args.ctx and args.ctx // args.parallel < len(prefill) + 2:
        raise ModelUsageError(f"--ctx {args.ctx}: each of {args.parallel} sequence(s) needs room for the "
                              f"{len(prefill)}-token prompt and a step ({len(prefill) + 2} cells)")
    if prompt:
        print(f"prompt: {prompt!r} -> {len(prefill)} tokens {prefill}")
    status = 0
    results: list[Path] = []
    for spec in device_specs:
        name = spec.partition(":")[2]
        folder = out if len(device_specs) == 1 else out / name
        folder.mkdir(parents=True, exist_ok=True)
        display = ProgressDisplay()
        try:
            outcome = run_isolated(_check_in_child, (str(path), name, args.ggml_lib, steps, str(folder), args.threads,
                                                     not args.no_cpu, FLASH_ATTN[args.flash_attn], expectations,
                                                     args.decode, prompt, kv),
                                   folder, show=display.line)
        finally:
            display.close()
        if isinstance(outcome, Crash) and isinstance(outcome.partial, ModelVerdict):
            # it died after the node verdicts were in (the fused or the CPU run): they are kept, the run fails
            record = _write_results(folder, spec, outcome.partial)
            record.update(verdict=outcome.verdict, crash=outcome.record())
            _write_json(folder / "model.json", record)
            _print_summary(outcome.partial, spec, args.ggml_lib, folder, crash=outcome)
            status = 1
        elif isinstance(outcome, Crash):
            _crash_record(folder, spec, path, outcome)
            print(f"model {path} on {spec}: {outcome.verdict}")
            print(f"  {outcome.detail}")
            status = 1
        else:
            if not isinstance(outcome, ModelVerdict):
                raise TypeError(f"the model process returned {type(outcome).__name__}, not a ModelVerdict")
            outcome.allow_unjudged = args.allow_unjudged
            _write_results(folder, spec, outcome)
            _print_summary(outcome, spec, args.ggml_lib, folder)
            # a failure on any device outranks an incomplete run on another
            status = 1 if 1 in (status, outcome.exit_status) else max(status, outcome.exit_status)
        results.append(folder / "model.json")
    build_model_report(results, out / "model.html")
    print(f"model section: {out / 'model.html'}")
    return status


def main(argv: list[str]) -> int:
    from device.base import DeviceError

    args = build_parser().parse_args(argv)
    if args.ggml_lib:  # absolute: the capture's child processes may not share the cwd
        args.ggml_lib = os.path.abspath(os.path.expanduser(args.ggml_lib))
    try:
        return run(args)
    except (ModelUsageError, DeviceError) as exc:
        print(f"conform model: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130

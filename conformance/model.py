"""The model tier: judge every node of a real llama.cpp forward pass, then the logits end to end.

1. **Node by node** (:func:`judge_nodes`): the capture run (``device/llama/capture.py``) records every node
   the device computed; each is translated to its op case (``device/llama/nodes.py``), recomputed by the
   golden from the device's own inputs and judged with that op's verdict and tolerance row, as the op tier
   judges a case. The first failing node is named with its ``conform repro`` id and an .npz of its tensors.
   A node whose op or types the golden lacks is listed as not judged, never as passing; a run with any
   such node is ``incomplete`` (exit 3) unless the user accepts the gap (``--allow-unjudged``).
2. **End to end** (:func:`golden_replay`, :func:`logits_figures`): the golden recomputes the captured graph
   from its own values (weights and token inputs from the file, everything computed by the golden, the
   KV cache written by the golden's SET_ROWS), which gives golden logits; the device's logits from a run
   *without* the callback (fused, as users run it) are compared with them: NMSE, KL divergence and top-1
   agreement per token, with ggml:CPU's figures beside them. Where the scheduler splits the graph between
   backends, the copy of a tensor into the next split is the device's (the replay follows nodes, not copies).
   The replay never stands in a device value for a node the golden cannot compute: where there is one, the
   logits comparison is ``not judged`` and says which nodes, by reason.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from threadpoolctl import threadpool_limits

from conformance.heap import reused_heap
from conformance.limits import STAGE_BLAS_THREADS
from conformance.resolution import Resolution, resolve
from conformance.verdict.judge import Judgement, judge_output
from device import known_bugs
from device.known_bug import KnownBug
from device.llama.capture import CapturedNode, CapturedTensor, KvOptions, ModelRun, Tamper
from device.llama.nodes import NodeCase, NotJudged, node_case
from golden import catalogue, dtypes, formats
from golden.case import OpCase

# End to end, the fused run's logits may differ from the golden's by what the same device's node-by-node
# run (every node within its op's tolerance) differs, with room for fusion's own roundings: 4x its NMSE
# (NMSE is quadratic: twice the error amplitude), and never less than test-llama-archs' bar for a toy
# model's logits against the CPU's (1e-4, graph-and-fusion.md §4)
LOGITS_NMSE_BAR = 1e-4
FUSED_NMSE_FACTOR = 4.0


@dataclass
class NodeVerdict:
    index: int
    step: int
    name: str
    op: str
    shapes: str  # the sources' and output's types and shapes
    status: str  # pass, FAIL, expected (a known bug), not judged, error
    backend: str = ""  # where the scheduler ran it (a node the device declines runs on the CPU)
    error_ratio: float | None = None
    case_id: str = ""
    detail: str = ""
    artefact: str = ""
    not_judged_kind: str = ""  # for a not-judged node: its reason without its tensors' names (the summary's key)
    # the backend that answers for the node: the device under test, or the CPU where ggml's scheduler put the node
    # in host memory (the device declined it); empty where unknown (counted as the device's)
    computed_by: str = ""
    decided_by: str = ""  # for a judged node, as an op record's: "catalogue:OP[key]" or "deviation:<known bug id>"

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class LogitsFigures:
    device: str
    nmse: float
    kl_mean: float
    kl_p999: float
    kl_max: float
    top1_agreement: float  # share of tokens whose top-1 id matches the golden's
    n_tokens: int

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


NODE_BY_NODE = "node by node"  # the logits row of the capture run (unfused, every node observed)


@dataclass
class ModelVerdict:
    model: str
    device: str
    description: str
    nodes: list[NodeVerdict] = field(default_factory=list)
    logits: list[LogitsFigures] = field(default_factory=list)
    replayed_from_device: int = 0  # nodes the golden replay took from the device (ops it lacks)
    libllama: str = ""  # the library bound and the llama.h revision of its layouts
    # why the logits were not compared: the golden's forward pass could not compute these nodes (reason: count)
    replay_gaps: dict[str, int] = field(default_factory=dict)
    allow_unjudged: bool = False  # the user accepts nodes (and logits) left not judged: pass, with the gap said
    prompt: str = ""  # the prompt's text as tokenized (empty for token ids given)
    fed: list[list[int]] = field(default_factory=list)  # the ids fed, step by step
    decode: list[DecodeStep] = field(default_factory=list)  # the greedy decode steps

    @property
    def first_divergence(self) -> DecodeStep | None:
        """The first greedy step where the device's own choice is not the golden's (a finding, not a verdict:
        near-ties differ legitimately; the logits figures judge by how much)."""
        return next((d for d in self.decode if d.golden is not None and d.device != d.golden), None)

    @property
    def not_judged(self) -> list[tuple[str, int, list[str]]]:
        """The not-judged nodes by reason: (reason, nodes, their ops), most nodes first."""
        groups: dict[str, tuple[int, dict[str, None]]] = {}
        for n in self.nodes:
            if n.status == "not judged":
                count, ops = groups.get(n.not_judged_kind or n.detail, (0, {}))
                ops[n.op] = None
                groups[n.not_judged_kind or n.detail] = (count + 1, ops)
        return sorted(((k, c, list(o)) for k, (c, o) in groups.items()), key=lambda g: (-g[1], g[0]))

    @property
    def logits_not_judged(self) -> str:
        """Empty when the golden computed every node of its forward pass; else why the logits are not judged."""
        if not self.replay_gaps:
            return ""
        total = sum(self.replay_gaps.values())
        reasons = "; ".join(f"{reason}: {count}" for reason, count in
                            sorted(self.replay_gaps.items(), key=lambda kv: (-kv[1], kv[0])))
        return f"the golden's forward pass cannot compute {total} node(s) ({reasons})"

    @property
    def incomplete(self) -> bool:
        """A node the device computed, or the logits, left not judged (whether or not the user accepts it)."""
        return bool(self.counts.get("not judged") or self.replay_gaps)

    @property
    def first_failure(self) -> NodeVerdict | None:
        return next((n for n in self.nodes if n.status in ("FAIL", "error")), None)

    def elsewhere(self, node: NodeVerdict) -> bool:
        """The node was computed by another backend than the device under test (ggml's scheduler placed it)."""
        return bool(node.computed_by) and node.computed_by != self.device

    @property
    def computed_elsewhere(self) -> dict[str, int]:
        """The nodes other backends computed, counted by backend: judged too, but not the device's answer."""
        out: dict[str, int] = {}
        for n in self.nodes:
            if self.elsewhere(n):
                out[n.computed_by] = out.get(n.computed_by, 0) + 1
        return out

    def _elsewhere_said(self) -> str:
        others = self.computed_elsewhere
        if not others:
            return ""
        on_device = len(self.nodes) - sum(others.values())
        listed = ", ".join(f"{count} on {backend}" for backend, count in sorted(others.items()))
        return f"{self.device} computed {on_device} of {len(self.nodes)} nodes; {listed}, judged apart"

    @property
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for n in self.nodes:
            out[n.status] = out.get(n.status, 0) + 1
        return out

    @property
    def logits_bar(self) -> float:
        captured = next((f for f in self.logits if f.device == NODE_BY_NODE), None)
        return max(LOGITS_NMSE_BAR, FUSED_NMSE_FACTOR * captured.nmse) if captured else LOGITS_NMSE_BAR

    @property
    def passed(self) -> bool:
        return self.verdict.startswith("pass")

    @property
    def exit_status(self) -> int:
        """0 pass, 1 FAIL, 3 incomplete (a node or the logits not judged, not accepted with --allow-unjudged)."""
        if self.passed:
            return 0
        return 3 if self.verdict.startswith("incomplete") else 1

    @property
    def verdict(self) -> str:
        first = self.first_failure
        if first is not None:
            where = f" computed by {first.computed_by}, not {self.device}" if self.elsewhere(first) else ""
            return f"FAIL at node {first.index} ({first.name}, {first.op}){where}"
        fused = next((f for f in self.logits if f.device == self.device), None)
        if fused is not None and not fused.nmse <= self.logits_bar:
            return "FAIL: wrong only with the whole graph (fusion or allocation)"
        if self.incomplete:
            unjudged = self.counts.get("not judged", 0)
            gap = f"{unjudged} of {len(self.nodes)} computed nodes not judged" + \
                ("; logits not judged" if self.replay_gaps else "")
            if self.allow_unjudged:
                return f"pass (every judged node; {gap}: accepted with --allow-unjudged)"
            return f"incomplete: {gap}"
        said = self._elsewhere_said()
        return f"pass ({said})" if said else "pass"

    def as_dict(self) -> dict[str, Any]:
        first = self.first_failure
        return {"model": self.model, "device": self.device, "description": self.description, "libllama": self.libllama,
                "verdict": self.verdict, "counts": self.counts, "replayed_from_device": self.replayed_from_device,
                "not_judged": [{"reason": r, "nodes": c, "ops": o} for r, c, o in self.not_judged],
                "logits_not_judged": self.logits_not_judged, "allow_unjudged": self.allow_unjudged,
                "first_failure": first.as_dict() if first else None, "logits": [f.as_dict() for f in self.logits],
                "logits_nmse_bar": self.logits_bar, "prompt": self.prompt, "fed_tokens": self.fed,
                "decode": [d.as_dict() for d in self.decode],
                "first_divergence": d.as_dict() if (d := self.first_divergence) else None,
                "nodes": [n.as_dict() for n in self.nodes]}


def _shapes(node: CapturedNode) -> str:
    def one(t: CapturedTensor) -> str:
        return f"{t.dtype}[{','.join(map(str, t.ne))}]"
    return ", ".join(one(s) for s in node.srcs if s is not None) + " -> " + one(node.out)


def judge_case(nc: NodeCase, resolution: Resolution) -> tuple[Judgement, np.ndarray]:
    """The op tier's verdict on a node (:func:`~conformance.verdict.judge.judge_output`): the golden from the
    node's inputs, judged as the op tier judges a case with the node's resolution; returns it and the golden."""
    exact = catalogue.golden_inputs(nc.case, nc.inputs)
    golden = catalogue.evaluate(nc.case, exact)
    return judge_output(nc.case, resolution, nc.inputs, exact, golden, nc.output), golden


def _save_npz(folder: Path, verdict: NodeVerdict, nc: NodeCase, golden: np.ndarray) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"node-{verdict.index:05d}-{verdict.op.lower()}.npz"
    arrays: dict[str, Any] = {f"input{i}": np.asarray(x) for i, x in enumerate(nc.inputs)}
    arrays.update(case_id=np.array(nc.case.case_id), node=np.array(verdict.name), golden=golden,
                  device=np.asarray(nc.output))
    np.savez_compressed(path, **arrays)
    return str(path)


def judge_nodes(run: ModelRun, device_name: str, release: str, artefacts: Path | None,
                stop_after_first: bool = False, bugs: Sequence[KnownBug] | None = None,
                on_judged: Callable[[int, int], None] | None = None, build: str | None = None) -> list[NodeVerdict]:
    """A verdict for every computed node of the capture run (view nodes compute nothing and are left out).

    ``bugs``: the known-bug entries (the in-repo lists and the run's expectations files); a failing node is
    ``expected`` only where one of them says the node's case gives that outcome, by the op tier's rule
    (:meth:`conformance.resolution.Resolution.explaining`), at ``release`` and llama.cpp ``build`` (None:
    unknown). ``on_judged(i, n)`` follows the progress.

    The golden and the verdicts run with one BLAS thread (as an op-tier stage's child does): OpenBLAS's pool
    spins between the many small products of a model's nodes, which on a 2-core host cost a 135M-class run
    74 CPU-s for 64 s of wall time, against 45 CPU-s with one thread (the same values: OpenBLAS splits a
    product's outputs between its threads, never a dot product's terms), and with freed memory kept in the
    process (:func:`conformance.heap.reused_heap`: a node's weight-sized temporaries were faulted in anew)."""
    if bugs is None:
        bugs = known_bugs.all_known_bugs()
    with threadpool_limits(STAGE_BLAS_THREADS, user_api="blas"), reused_heap():
        return _judge_nodes(run, device_name, release, artefacts, stop_after_first, bugs, on_judged, build)


def _judge_nodes(run: ModelRun, device_name: str, release: str, artefacts: Path | None, stop_after_first: bool,
                 bugs: Sequence[KnownBug], on_judged: Callable[[int, int], None] | None,
                 build: str | None) -> list[NodeVerdict]:
    judge = NodeJudge(device_name, release, artefacts, bugs, build)
    total = len(run.nodes)
    for position, node in enumerate(run.nodes):
        if on_judged is not None:
            on_judged(position, total)
        verdict = judge.judge(node)
        if stop_after_first and verdict is not None and verdict.status == "FAIL":
            break
    if on_judged is not None:
        on_judged(total, total)
    return judge.verdicts


class NodeJudge:
    """The verdicts of a run's computed nodes, one node at a time as the capture goes (:meth:`judge`): what a
    node leaves behind is its verdict (and, for the first failing node, its .npz), never its tensors, so a run
    of many decode steps holds one node's data at a time.

    Call it with one BLAS thread and the heap kept (see :func:`judge_nodes`)."""

    def __init__(self, device_name: str, release: str, artefacts: Path | None, bugs: Sequence[KnownBug],
                 build: str | None = None) -> None:
        self.device_name, self.release, self.artefacts, self.bugs, self.build = (device_name, release, artefacts,
                                                                                 bugs, build)
        self.verdicts: list[NodeVerdict] = []
        self.saved = False  # the first failing node's .npz is written
        self.resolved: dict[tuple[OpCase, str], Resolution] = {}
        # a node's texts recur in every layer and step: one string each, shared by its verdicts
        self._texts: dict[str, str] = {}

    def _text(self, text: str) -> str:
        return self._texts.setdefault(text, text)

    def judge(self, node: CapturedNode) -> NodeVerdict | None:
        """The node's verdict, appended to ``verdicts``; None for a view node (it computes nothing)."""
        translated = node_case(node)
        if translated is None:
            return None
        device_name, text = self.device_name, self._text
        # a node in host memory was computed by the CPU backend (the device declined it, or llama.cpp keeps it
        # there, as the token embedding's GET_ROWS): the CPU's to answer for
        ran_on = "CPU" if node.host else device_name
        where = node.backend + (" (CPU)" if node.host and device_name != "CPU" and node.backend != "CPU" else "")
        verdict = NodeVerdict(node.index, node.step, text(node.name), text(node.op), text(_shapes(node)),
                              "not judged", text(where), computed_by=text(ran_on))
        self.verdicts.append(verdict)
        if isinstance(translated, NotJudged):
            verdict.detail, verdict.not_judged_kind = text(translated.reason), text(translated.summary)
            return verdict
        verdict.case_id = text(translated.case.case_id)
        try:  # every covering entry of the backend that computed it, as the op tier resolves a case
            resolution = self.resolved.get((translated.case, ran_on))
            if resolution is None:  # a node's case recurs in every layer and step: resolved once per run
                resolution = self.resolved[translated.case, ran_on] = resolve(
                    translated.case, partial(known_bugs.find_all, device_name=ran_on, release=self.release,
                                             bugs=self.bugs, build=self.build))
            judgement, golden = judge_case(translated, resolution)
        except Exception as exc:  # no row, or the golden refused the case (a validator) or broke: never a pass
            verdict.status, verdict.detail = "error", f"harness error while judging: {str(exc).splitlines()[0][:300]}"
            return verdict
        metrics = judgement.metrics
        verdict.error_ratio = float(metrics.error_ratio)
        verdict.decided_by = text(judgement.decided_by)
        if metrics.passed:
            verdict.status = "pass"
        else:
            # known only where a covering entry says the node's case gives a wrong value (a documented
            # deviation while within its own bound): a crash-only entry explains no wrong value
            bug = resolution.explaining("fail", judgement.deviation_held)
            verdict.status = "expected" if bug is not None else "FAIL"
            verdict.detail = (f"known bug {bug.id}: " if bug is not None else "") + metrics.detail
            if not translated.layout_exact:
                verdict.detail += " (a source's strides are no Layout the op tier draws: the repro id says contiguous)"
            if bug is None and self.artefacts is not None and not self.saved:
                verdict.artefact = _save_npz(self.artefacts, verdict, translated, golden)
                self.saved = True
        return verdict


# ---- the golden's own forward pass ---------------------------------------------------------------------

class _Regions:
    """One buffer's written regions in write order: (start, bytes), with their starts and ends also as arrays,
    so a read finds the regions it overlaps in one vectorised pass (a Python scan of every region per read was
    quadratic in a step's nodes: 6.3M comparisons, 5.7 s of a 135M-class run's 16 s forward pass)."""

    def __init__(self, items: Sequence[tuple[int, np.ndarray]] = ()) -> None:
        self.items: list[tuple[int, np.ndarray]] = list(items)
        self._bounds = np.empty((max(16, len(self.items)), 2), np.int64)
        for i, (start, data) in enumerate(self.items):
            self._bounds[i] = (start, start + data.size)

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[tuple[int, np.ndarray]]:
        return iter(self.items)

    def append(self, start: int, data: np.ndarray) -> None:
        n = len(self.items)
        if n == len(self._bounds):
            self._bounds = np.concatenate([self._bounds, np.empty_like(self._bounds)])
        self._bounds[n] = (start, start + data.size)
        self.items.append((start, data))

    def overlapping(self, lo: int, hi: int) -> list[tuple[int, np.ndarray]]:
        """The regions that overlap [lo, hi), in write order."""
        bounds = self._bounds[: len(self.items)]
        hits = np.flatnonzero((bounds[:, 0] < hi) & (bounds[:, 1] > lo))
        return [self.items[i] for i in hits]


class GoldenMemory:
    """Device memory as the golden replay sees it: what the golden wrote, over what the device held.

    Keyed by (buffer, address) ranges; later writes cover earlier ones."""

    def __init__(self) -> None:
        self.regions: dict[int, _Regions] = {}
        self.persistent: dict[int, _Regions] = {}  # the KV cache: lives across steps

    def new_step(self) -> None:
        """Between decode calls the host sets new inputs and the allocator reuses the compute buffer:
        only what persists (the KV cache the golden wrote) stays."""
        self.regions = {b: _Regions(r.items) for b, r in self.persistent.items()}

    def read(self, t: CapturedTensor) -> CapturedTensor:
        """``t`` with the golden's bytes over the device's where the golden wrote them. A leaf (op NONE: an input
        the host set, a weight, the KV cache) takes only what persists: ggml's allocator gives no tensor of a
        graph a leaf's memory while the leaf is still to be read, so a passing region over it was written by an
        earlier graph of the step (a context shift's graph runs in the same llama_decode) and is stale."""
        raw = t.raw
        regions = (self.persistent if t.op == "NONE" else self.regions).get(t.buffer)
        if not regions:
            return t
        for start, data in regions.overlapping(t.address, t.address + raw.size):
            lo, hi = max(start, t.address), min(start + data.size, t.address + raw.size)
            if lo < hi:
                if raw is t.raw:
                    raw = raw.copy()
                raw[lo - t.address:hi - t.address] = data[lo - start:hi - start]
        if raw is t.raw:
            return t
        return CapturedTensor(t.name, t.dtype, t.ne, t.nb, raw, t.address, t.buffer, t.op)

    def write(self, t: CapturedTensor, values: np.ndarray, persistent: bool = False) -> bool:
        """Store logical ``values`` as ``t`` would hold them (its type and strides) at its address; False where
        the type is not one stored here (the device's bytes would stay: the caller must say so)."""
        raw = t.raw.copy()
        if t.dtype in ("f32", "f16", "bf16", "i32", "i64"):
            dtype = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16, "i32": np.int32, "i64": np.int64}[t.dtype]
            target = np.lib.stride_tricks.as_strided(raw[: raw.size - raw.size % np.dtype(dtype).itemsize].view(dtype),
                                                     shape=tuple(reversed(t.ne)), strides=tuple(reversed(t.nb)))
            shaped = np.asarray(values).reshape(target.shape)
            target[...] = dtypes.bf16_bits(shaped.astype(np.float32)) if t.dtype == "bf16" else shaped.astype(dtype)
        elif dtypes.is_quantized(t.dtype) and t.dtype in formats.QUANTIZABLE:
            # a quantized KV cache: the golden's values as ggml's reference quantizer stores them
            row = dtypes.row_size(t.dtype, t.ne[0])
            blocks = formats.quantize(np.asarray(values, np.float32).reshape(-1, t.ne[0]), t.dtype)
            rows = np.lib.stride_tricks.as_strided(raw, shape=(*reversed(t.ne[1:]), row),
                                                   strides=(*reversed(t.nb[1:]), 1))
            rows[...] = blocks.reshape(rows.shape)
        else:
            return False
        self.regions.setdefault(t.buffer, _Regions()).append(t.address, raw)
        if persistent:
            self._keep(t.buffer, t.address, raw)
        return True

    def _keep(self, buffer: int, start: int, data: np.ndarray) -> None:
        """Lay ``data`` over what persists in ``buffer``, held once: the persistent regions never overlap, so a
        write within one (a step's SET_ROWS rewrites its layer's whole cache) updates it in place, and one that
        spans several merges them. Kept as a list of every write, a run held (steps x layers x 2) copies of the
        cache and each read of it laid every one of them over the last: 290 MiB peak and 10.9 s of its 25.8 s in
        the golden's forward pass at --decode 256 of the tiny llama.

        The step's own regions may share a persistent array: an update in place changes only bytes that the
        region appended for this write (later in the step's order) holds too, so the step reads the same."""
        regions = self.persistent.get(buffer)
        end = start + data.size
        if regions is None:
            self.persistent[buffer] = _Regions([(start, data)])
            return
        hits = regions.overlapping(start, end)
        if len(hits) == 1 and hits[0][0] <= start and end <= hits[0][0] + hits[0][1].size:
            held_start, held = hits[0]
            if held is not data:
                held[start - held_start:end - held_start] = data
            return
        lo = min([start] + [s for s, _ in hits])
        hi = max([end] + [s + d.size for s, d in hits])
        merged = np.empty(hi - lo, np.uint8)
        for s, d in hits:
            merged[s - lo:s - lo + d.size] = d
        merged[start - lo:end - lo] = data
        kept = [(s, d) for s, d in regions.items if not any(d is h for _, h in hits)]
        self.persistent[buffer] = _Regions([*kept, (lo, merged)])


KV_CACHE_LEAF = re.compile(r"cache_[kv]_l\d+")  # llama.cpp's names of the KV cache's tensors, one per layer


class GoldenReplay:
    """The golden's own forward pass, node by node as the capture goes (so a greedy decode can take the
    golden's next token before the device decodes it): logits per step, and the nodes it could not compute
    (reason: count).

    The logits are the golden's only when ``gaps`` is empty: a node it cannot compute keeps the device's bytes
    in the replay's memory (so later nodes still run), and the caller must then not compare logits."""

    def __init__(self) -> None:
        self.memory = GoldenMemory()
        self.gaps: dict[str, int] = {}
        self.logits: dict[int, np.ndarray] = {}
        self.step = 0
        self.done = 0  # the nodes of the run replayed so far
        self.cache_buffers: set[int] = set()  # the buffers holding the KV cache (KV_CACHE_LEAF tensors)

    def _gap(self, reason: str) -> None:
        self.gaps[reason] = self.gaps.get(reason, 0) + 1

    def advance(self, nodes: list[CapturedNode]) -> None:
        """Replay ``nodes[done:]`` (the run's node list as it grows), with one BLAS thread and freed memory kept
        for the next node (see judge_nodes)."""
        with threadpool_limits(STAGE_BLAS_THREADS, user_api="blas"), reused_heap():
            for node in nodes[self.done:]:
                self.feed(node)

    def feed(self, node: CapturedNode) -> None:
        """Replay the run's next node (as the capture goes: the node need not be kept after it)."""
        self._replay(node)
        self.done += 1

    def _replay(self, node: CapturedNode) -> None:
        memory = self.memory
        if node.step != self.step:
            memory.new_step()
            self.step = node.step
        self.cache_buffers.update(s.buffer for s in node.srcs if s is not None and s.op == "NONE"
                                  and KV_CACHE_LEAF.fullmatch(s.name))
        replayed = CapturedNode(node.index, node.step, node.name, node.op, node.op_params,
                                [memory.read(s) if s is not None else None for s in node.srcs], memory.read(node.out))
        translated = node_case(replayed)
        if translated is None:
            return  # a view: it reads memory the replay already holds
        if isinstance(translated, NotJudged):
            self._gap(translated.summary)
            return
        try:
            exact = catalogue.golden_inputs(translated.case, translated.inputs)
            values = catalogue.evaluate(translated.case, exact)
        except Exception as exc:  # the golden refused or broke: a gap, never the device's value in its place
            self._gap(f"the golden cannot evaluate {node.op} ({type(exc).__name__})")
            return
        # the KV cache outlives the step: SET_ROWS writes it, before SET_ROWS (b5640) a CPY into a view of it,
        # and a context shift ropes a view of the K cache in place (F16), or for a quantized K converts the view
        # to F32 (a CPY whose output, "cache_k_l0 (view) (copy)", is in the compute buffer: not the cache),
        # ropes that and copies it back. The cache is where the output lives, not what it is called.
        to_cache = node.op == "SET_ROWS" or (node.op in ("CPY", "ROPE") and node.out.buffer in self.cache_buffers)
        if not memory.write(node.out, values, persistent=to_cache):
            self._gap(f"the replay does not store a {node.out.dtype} output")
            return
        if node.name == "result_output":
            self.logits[node.step] = np.asarray(values, np.float64).reshape(-1, node.out.ne[0])


def golden_replay(run: ModelRun) -> tuple[list[np.ndarray], dict[str, int]]:
    """Golden logits per step from the golden's own values, and the nodes it could not compute (reason: count)."""
    replay = GoldenReplay()
    replay.advance(run.nodes)
    return [replay.logits[s] for s in sorted(replay.logits)], replay.gaps


@dataclass
class DecodeStep:
    """One greedy decode step: the token fed (the golden's greedy choice from the step before), and the
    device's own greedy choice from the same step's logits beside it."""

    step: int
    fed: int
    golden: int | None  # None where the golden's forward pass had a gap (the device's choice was fed)
    device: int
    device_from: str  # which run's logits gave the device's choice (the fused run, as users run it)
    # where they differ: the golden's logit of its choice minus its logit of the device's (a near-tie is small)
    golden_margin: float | None = None
    seq: int = 0  # the sequence (with --parallel)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def logits_figures(device: str, golden: list[np.ndarray], measured: list[np.ndarray]) -> LogitsFigures:
    """NMSE over every logit; KL(golden || device) per token: mean, 99.9th percentile, max; top-1 agreement."""
    g = np.concatenate([np.asarray(x, np.float64) for x in golden])
    d = np.concatenate([np.asarray(x, np.float64) for x in measured])
    if g.shape != d.shape:
        raise ValueError(f"logits shapes differ: golden {g.shape}, {device} {d.shape}")
    nmse = float(np.sum((d - g) ** 2) / max(np.sum(g * g), 1e-300))
    lg, ld = _log_softmax(g), _log_softmax(d)
    kl = np.sum(np.exp(lg) * (lg - ld), axis=-1)
    top1 = float(np.mean(np.argmax(g, axis=-1) == np.argmax(d, axis=-1)))
    finite = bool(np.all(np.isfinite(kl)))
    return LogitsFigures(device, nmse if math.isfinite(nmse) else math.inf,
                         float(kl.mean()) if finite else math.inf,
                         float(np.percentile(kl, 99.9)) if finite else math.inf,
                         float(kl.max()) if finite else math.inf, top1, int(g.shape[0]))


def check_model(model_path: str | Path, device: str, lib_dir: str | None, steps: list[list[int]],
                out_dir: Path | None, threads: int = 1, with_cpu: bool = True, tamper: Tamper | None = None,
                progress: TextIO | None = None, flash_attn: int = 0, expectations: Sequence[str] = (),
                greedy: int = 0, prompt: str = "", kv: KvOptions | None = None,
                nodes_judged: Callable[[ModelVerdict], None] | None = None) -> ModelVerdict:
    """The whole model tier for one model on one ggml device (``CPU``, ``Vulkan0``, ``CANN0``); ``progress``
    gets a line per stage and per captured node (what a crash report names). Each node is judged
    (:class:`NodeJudge`) and replayed by the golden (:class:`GoldenReplay`) as it is captured, then dropped: the
    run holds one node's tensors, the weights and the golden's KV cache, whatever the number of steps.
    ``expectations``: known-bug files or folders besides the in-repo lists, as ``conform run --expectations``.

    ``steps`` are fed as given; then ``greedy`` decode steps, each feeding the golden's greedy token (the
    argmax of the golden's own logits of the step before) to the device, and the same ids to every later
    run, so the device and the golden decode one sequence; the device's own choice is recorded beside it.
    ``kv``: the KV cache's types, context size (a shift where it is short) and parallel sequences; every
    later run decodes the capture run's batches (its plan) exactly, shifts and sequence edits included.
    ``nodes_judged(verdict)``: called with the node verdicts before the fused run, which may yet kill the
    process (a library that dies only without the callback), so that they outlive it."""

    def stage(text: str) -> None:
        if progress is not None:
            progress.write(f"stage\t{text}\n")
            progress.flush()

    from device.llama.capture import run_model
    from device.llama.lib import load

    bugs = known_bugs.all_known_bugs(expectations)  # read before the run: a bad file stops it at once
    lib = load(lib_dir)
    stage(f"capture run on {device} (every node observed, judged and replayed as it goes)")
    replay = GoldenReplay()
    judge = NodeJudge(device, lib.ggml.version, out_dir / "artefacts" if out_dir else None, bugs, lib.ggml.build)

    def golden_next(run: ModelRun, row: int) -> int:
        step = len(run.logits) - 1  # every node of the step is replayed: the replay goes with the capture
        if replay.gaps or step not in replay.logits:  # no golden logits: the device's own choice goes on
            return int(np.argmax(run.logits[-1][row]))
        return int(np.argmax(replay.logits[step][row]))

    def on_node(node: CapturedNode) -> None:
        # judged and replayed as it is captured, then dropped: memory stays flat in the number of steps
        judge.judge(node)
        replay.feed(node)

    kv = kv or KvOptions()
    # one BLAS thread and the heap kept for the golden (see judge_nodes); ggml's CPU threads are its own
    with threadpool_limits(STAGE_BLAS_THREADS, user_api="blas"), reused_heap():
        captured = run_model(lib_dir, model_path, device, steps, capture=True, tamper=tamper, threads=threads,
                             progress=progress, flash_attn=flash_attn, greedy=greedy, next_token=golden_next, kv=kv,
                             on_node=on_node)
    steps = captured.steps  # the greedy ids fixed: every later run decodes the same batches
    again = replace(kv, n_ctx=captured.n_ctx)
    verdict = ModelVerdict(str(model_path), device, captured.description, prompt=prompt, fed=steps)
    verdict.libllama = f"{lib.files.library.name} ({lib.version or 'no llama_version'}), llama.h {lib.revision}"
    verdict.nodes = judge.verdicts
    golden, verdict.replay_gaps = [replay.logits[s] for s in sorted(replay.logits)], replay.gaps
    verdict.replayed_from_device = sum(verdict.replay_gaps.values())

    def record_decode(device_logits: list[np.ndarray], source: str) -> None:
        for step, batch in enumerate(captured.plan):
            for fed, seq, row in zip(batch.tokens, batch.seqs, batch.from_rows, strict=True):
                if row is None:
                    continue  # a given token, not a greedy choice
                before = step - 1  # the logits the choice was made from
                golden_choice = int(np.argmax(golden[before][row])) if not verdict.replay_gaps else None
                device_choice = int(np.argmax(device_logits[before][row]))
                margin = None
                if golden_choice is not None and device_choice != golden_choice:
                    margin = float(golden[before][row][golden_choice] - golden[before][row][device_choice])
                verdict.decode.append(DecodeStep(step, fed, golden_choice, device_choice, source, margin, seq))
    if verdict.replay_gaps:
        # no golden logits to compare with: the fused and CPU runs would be figures against nothing
        stage("logits not judged: " + verdict.logits_not_judged)
        record_decode(captured.logits, "capture run (the golden's forward pass had gaps: the device's choice was fed)")
        return verdict
    verdict.logits.append(logits_figures(NODE_BY_NODE, golden, captured.logits))
    if nodes_judged is not None:
        nodes_judged(verdict)
    stage(f"fused run on {device} (no callback)")
    fused = run_model(lib_dir, model_path, device, steps, threads=threads, flash_attn=flash_attn, kv=again,
                      plan=captured.plan, progress=progress)
    verdict.logits.append(logits_figures(device, golden, fused.logits))
    record_decode(fused.logits, f"fused run on {device}")
    if with_cpu and device != "CPU":
        stage("reference run on CPU")
        cpu = run_model(lib_dir, model_path, "CPU", steps, threads=threads, flash_attn=flash_attn, kv=again,
                      plan=captured.plan, progress=progress)
        verdict.logits.append(logits_figures("CPU", golden, cpu.logits))
    return verdict

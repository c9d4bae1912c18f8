"""Running and judging one graph case (``golden/graphs``) end to end, and its record.

The device runs the case three ways (``device.base.GraphRun``). The verdict:

* every run's outputs against the golden's exact output with the graph bound (each node's tolerance
  row plus its sources' bounds carried through it to first order; docs/graph-error-model.md);
* the ``blocked`` run node by node, each node on the device's own inputs (the earlier nodes as the
  device computed them) with the node's own row alone: the first node that fails there is wrong by
  itself, whatever came before it (*localisation*);
* a case whose blocked run passes but whose fused run fails **fails only when fused**: the record
  names the pattern's fusable span; one that fails only under the graph allocator says so;
* every run's graph inputs read back byte for byte (the allocator must not hand an input's memory
  to a node; a fused kernel must not write its sources).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from conformance.data import DISTRIBUTIONS, as_stored, floats
from conformance.resolution import Resolution, resolve
from conformance.verdict import Metrics, compare
from conformance.verdict.judge import judge_output
from device import known_bugs
from device.base import GraphRun, GraphRunResult
from device.known_bug import GraphKnownBug, KnownBug
from golden import catalogue, dtypes, quant
from golden.case import OpCase, TensorSpec
from golden.graphs.case import (
    GraphCase,
    GraphGolden,
    RowFor,
    as_value,
    evaluate_graph,
    exact_graph_inputs,
    propagate,
)
from golden.graphs.graph import BLOCK_NMSE_FLOOR, Graph, GraphInput
from golden.tolerance import ErrorModel, Tolerance
from results.outcome import Outcome
from results.record import CaseDescription, CaseRecord, ExpectedFailure

if TYPE_CHECKING:
    from conformance.harness import Harness

GRAPH_BOUND = ("graph bound: each node's own tolerance row, plus its sources' bounds carried through the node to "
               "first order (docs/graph-error-model.md)")
MESSAGE_LIMIT = 800


def make_graph_inputs(case: GraphCase) -> list[np.ndarray]:
    """The graph inputs' values from the case's seed (as stored: float32/float16 arrays)."""
    rng = np.random.default_rng(case.data_seed)
    out = []
    for i in case.graph.inputs:
        if i.values is not None:  # fixed by the pattern's params (positions, a causal mask): not drawn
            out.append(as_stored(np.asarray(i.values).reshape(i.spec.np_shape), i.spec.dtype))
        elif dtypes.is_quantized(i.spec.dtype):  # weights: drawn values quantized to raw blocks
            values = floats(rng, TensorSpec("f32", i.spec.ne), case.distribution) * i.scale
            out.append(quant.quantize(values.reshape(-1, i.spec.ne[0]).astype(np.float32), i.spec.dtype))
        else:
            values = _values(rng, i, case.distribution)
            if i.spaced:  # router logits: a shuffle of ne0 evenly spaced values per row, so their order is
                # decided by gaps far above any rounding (a near-tie would make top-k a coin toss)
                lo, hi = DISTRIBUTIONS[case.distribution]
                ranks = rng.permuted(np.broadcast_to(np.arange(i.spec.ne[0]), i.spec.np_shape), axis=-1)
                values = dtypes.round_to(lo + (ranks + 0.5) * (hi - lo) / i.spec.ne[0], i.spec.dtype)
            if i.scale != 1.0:
                values = dtypes.round_to(values * i.scale, i.spec.dtype)
            out.append(as_stored(values, i.spec.dtype))
    return out


def _values(rng: np.random.Generator, graph_input: GraphInput, distribution: str) -> np.ndarray:
    spec, fill = graph_input.spec, graph_input.fill
    if not fill:
        return floats(rng, spec, distribution)
    n = int(np.prod(spec.np_shape))
    if fill == "positions":  # a decode position anywhere in a long context, or a run of prefill positions
        return (rng.integers(0, 32768) + np.arange(n)).reshape(spec.np_shape)
    kind, _, limit = fill.partition(":")
    if kind == "rows" and limit.isdigit() and n <= int(limit):
        return rng.permutation(int(limit))[:n].reshape(spec.np_shape)
    if kind == "topk" and limit.isdigit() and spec.ne[0] <= int(limit):  # distinct experts for each token
        columns = n // spec.ne[0]
        return np.stack([rng.permutation(int(limit))[:spec.ne[0]] for _ in range(columns)]).reshape(spec.np_shape)
    raise ValueError(f"graph input {graph_input.name}: unknown fill {fill!r} for {n} values")


def describe(case: GraphCase) -> CaseDescription:
    graph = case.graph
    return CaseDescription(
        dtypes={i.name: i.spec.dtype for i in graph.inputs} | {n.name: n.dst for n in graph.nodes},
        shapes={i.name: list(i.spec.ne) for i in graph.inputs} | {n.name: list(n.ne) for n in graph.nodes},
        layout={i.name: i.spec.layout.label() for i in graph.inputs},
        params=dict(case.params) | {"pattern": case.pattern},
    )


@dataclass
class NodeVerdict:
    node: str  # "n1:MUL"
    run: str
    metrics: Metrics
    decided_by: str = ""  # a node judged on its own inputs: "catalogue:OP[key]" or "deviation:<known bug id>"

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "run": self.run, "passed": self.metrics.passed,
                "error_ratio": self.metrics.error_ratio, "nmse": self.metrics.nmse,
                **({"decided_by": self.decided_by} if self.decided_by else {}),
                **({"detail": self.metrics.detail} if self.metrics.detail else {})}


@dataclass
class GraphVerdict:
    outputs: list[NodeVerdict] = field(default_factory=list)  # every run's outputs, graph bound
    nodes: list[NodeVerdict] = field(default_factory=list)  # the blocked run, node by node, own rows
    inputs_changed: dict[str, list[str]] = field(default_factory=dict)  # run -> graph inputs written
    first_wrong_node: str | None = None
    fused_only: bool = False
    allocator_only: bool = False
    fused_span: str | None = None
    not_run: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return (all(v.metrics.passed for v in self.outputs + self.nodes) and not self.inputs_changed)

    def decided_by(self, case: GraphCase) -> str:
        """The first wrong node's row (or deviation) where the blocked run found one, else the graph bound."""
        first = next((v for v in self.nodes if v.node == self.first_wrong_node), None)
        if first is not None and first.decided_by:
            return first.decided_by
        return f"graph_bound:{case.pattern}"

    def failed_runs(self) -> list[str]:
        runs = {v.run for v in self.outputs if not v.metrics.passed} | set(self.inputs_changed)
        return [r.value for r in GraphRun if r.value in runs]

    def worst(self) -> Metrics:
        every = self.outputs + self.nodes
        return max(every, key=lambda v: v.metrics.error_ratio).metrics if every else Metrics()

    def message(self) -> str:
        if self.passed:
            return ""
        parts = []
        if self.first_wrong_node is not None:
            bad = next(v for v in self.nodes if not v.metrics.passed)
            parts.append(f"first wrong node {self.first_wrong_node} (blocked run, on the device's own inputs): "
                         f"{bad.metrics.detail}")
        if self.fused_only:
            bad = next(v for v in self.outputs if v.run == GraphRun.FUSED.value and not v.metrics.passed)
            parts.append(f"fails only when fused: span {self.fused_span}; {bad.node}: {bad.metrics.detail}")
        elif self.allocator_only:
            bad = next(v for v in self.outputs if v.run == GraphRun.GALLOCR.value and not v.metrics.passed)
            parts.append(f"fails only under ggml's graph allocator (buffers reused in place): span {self.fused_span}; "
                         f"{bad.node}: {bad.metrics.detail}")
        elif self.first_wrong_node is None:
            for v in self.outputs:
                if not v.metrics.passed:
                    parts.append(f"{v.run} run, output {v.node}: {v.metrics.detail}")
                    break
        for run, names in self.inputs_changed.items():
            parts.append(f"the {run} run modified graph input(s) {', '.join(names)} (or the padding around them)")
        return "; ".join(parts)


def judge_graph(case: GraphCase, exact_inputs: list[np.ndarray], golden: GraphGolden,
                result: GraphRunResult, row_for: RowFor | None = None,
                resolve_node: Callable[[OpCase], Resolution] | None = None) -> GraphVerdict:
    """``row_for``: each node's own row, as ``evaluate_graph`` took it (default: the catalogue's);
    ``resolve_node``: a node case's resolution, as the op tier resolves a case (default: no known bugs)."""
    row_for = row_for or catalogue.tolerance_of
    resolve_node = resolve_node or _catalogue_only
    if not isinstance(result, GraphRunResult):
        raise TypeError(f"run_graph returned {type(result).__name__}, not a GraphRunResult")
    graph = case.graph
    verdict = GraphVerdict(not_run=dict(result.not_run))
    for run in GraphRun:
        got = result.nodes.get(run.value)
        if got is None:
            continue
        for name in graph.outputs:
            if run is GraphRun.GALLOCR and name not in graph.allocator_outputs():
                continue  # an output view whose source llama.cpp leaves to the allocator: judged in the other runs
            node = graph.node(name)
            tol = Tolerance(GRAPH_BOUND, model=_fixed(golden.allowed[name]), model_name="graph_bound")
            metrics = compare(case.node_case(node), exact_inputs, golden.exact[name],
                              np.asarray(got[name], np.float64), tol)
            verdict.outputs.append(NodeVerdict(node.label, run.value, metrics))
        intact = result.inputs_intact.get(run.value, [])
        changed = [i.name for i, ok in zip(graph.inputs, intact, strict=False) if not ok and not i.written]
        if changed:
            verdict.inputs_changed[run.value] = changed
    blocked = result.nodes.get(GraphRun.BLOCKED.value)
    _hold_to_blocked(graph, verdict)
    if blocked is not None:
        values: dict[str, np.ndarray] = {i.name: as_value(i, x)
                                         for i, x in zip(graph.inputs, exact_inputs, strict=True)}
        values |= {name: np.asarray(v) if graph.node(name).dst in dtypes.INDEX_TYPES else np.asarray(v, np.float64)
                   for name, v in blocked.items()}
        unread: dict[str, np.ndarray] = {}  # nodes an in-place node overwrote: the bound they feed on
        for node in graph.nodes:
            node_case = case.node_case(node)
            xs = [values[s] for s in node.srcs]
            expected = catalogue.evaluate(node_case, xs)
            if node.name not in blocked and not graph.read_back(node.name):
                values[node.name] = expected  # a view of an input written in place: its own value is gone
                if graph.overwritten_in_place(node.name):  # its consumer is judged on the two nodes together
                    unread[node.name] = row_for(node_case).allowed(node_case, xs, expected, node.dst)
                continue
            resolution = resolve_node(node_case)
            if any(s in unread for s in node.srcs):
                resolution = _with_unread(resolution, node_case, xs, expected, [unread.get(s) for s in node.srcs])
            # the op tier's judge; a node within the device's documented deviation is right on its own inputs
            judgement = judge_output(node_case, resolution, xs, xs, expected, values[node.name])
            metrics = judgement.deciding
            verdict.nodes.append(NodeVerdict(node.label, GraphRun.BLOCKED.value, metrics, judgement.decided_by))
            if not metrics.passed and verdict.first_wrong_node is None:
                verdict.first_wrong_node = node.label
    failed = set(verdict.failed_runs())
    blocked_ok = blocked is not None and verdict.first_wrong_node is None and GraphRun.BLOCKED.value not in failed
    if blocked_ok and GraphRun.FUSED.value in failed:
        verdict.fused_only = True
        verdict.fused_span = _failed_spans(graph, verdict, GraphRun.FUSED)
    elif blocked_ok and failed == {GraphRun.GALLOCR.value}:
        verdict.allocator_only = True
        verdict.fused_span = _failed_spans(graph, verdict, GraphRun.GALLOCR)  # where a fused kernel met the reuse
    return verdict


def _catalogue_only(case: OpCase) -> Resolution:
    return resolve(case, lambda c: ())


def _hold_to_blocked(graph: Graph, verdict: GraphVerdict) -> None:
    """A block's fused and gallocr outputs fail where their NMSE against the golden exceeds ``factor`` × the
    blocked run's NMSE of the same output (+ a floor): a fault inside the block moves the output far less than
    the bound propagated over tens of nodes, but far more than the device's own rounding does."""
    factor = graph.nmse_vs_blocked
    base = {v.node: v.metrics.nmse for v in verdict.outputs if v.run == GraphRun.BLOCKED.value}
    if factor is None:
        return
    for i, v in enumerate(verdict.outputs):
        if v.run == GraphRun.BLOCKED.value or v.node not in base or not v.metrics.passed:
            continue
        limit = factor * base[v.node] + BLOCK_NMSE_FLOOR
        if not v.metrics.nmse <= limit:
            detail = (f"NMSE {v.metrics.nmse:.3g} against the golden, above {factor:g}× the blocked run's "
                      f"{base[v.node]:.3g} + {BLOCK_NMSE_FLOOR:g} (a block's fused runs are held to its blocked run)")
            verdict.outputs[i] = NodeVerdict(v.node, v.run, replace(v.metrics, passed=False, detail=detail))



def _with_unread(resolution: Resolution, case: OpCase, xs: list[np.ndarray], expected: np.ndarray,
                 deltas: list[np.ndarray | None]) -> Resolution:
    """A node on the device's inputs where a source's own value could not be read back (an in-place
    CLAMP wrote over it): its row (and a covering deviation's bound) plus that source's own row carried
    through it, the golden's rule."""
    carried = propagate(case, xs, deltas, expected)

    def chained(row: Tolerance) -> Tolerance:
        bound = row.allowed(case, xs, expected, case.dst) + carried
        return Tolerance("own row, plus the unread source's own row carried through it (the source's memory "
                         "holds this node's in-place result)", model=_fixed(bound), model_name="chain_bound")

    bugs = tuple(replace(b, tolerance=chained(b.tolerance)) if b.tolerance is not None else b
                 for b in resolution.known_bugs)
    return replace(resolution, tolerance=chained(resolution.tolerance), known_bugs=bugs)


def _failed_spans(graph: Graph, verdict: GraphVerdict, run: GraphRun) -> str:
    """The fusable spans that end in (or hold) an output the run got wrong."""
    bad = [v.node.split(":")[0] for v in verdict.outputs if v.run == run.value and not v.metrics.passed]
    spans = [s for name in bad for s in graph.spans_into(name)]
    return "; ".join(dict.fromkeys(graph.span_label(s) for s in spans)) or "(no fusable span)"


def _fixed(bound: np.ndarray) -> ErrorModel:
    """An error model that is the propagated bound already computed for this output."""
    def model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
        return bound
    return model


def check_graph(harness: Harness, case: GraphCase, *, once: bool = False) -> CaseRecord | None:
    """The suite's check of one graph case on ``harness`` (its circuit breaker and once-only rule)."""
    __tracebackhide__ = True
    return harness.check_evaluated(case.case_id, lambda: evaluate_graph_case(harness, case), once=once)


def evaluate_graph_case(harness: Harness, case: GraphCase,
                        annotate: Callable[[CaseRecord], None] | None = None) -> CaseRecord:
    """Run and judge one graph case on the harness' device; always returns (and writes) a record.
    ``annotate`` may add to the record before it is written (the state tier's sequence and its
    confirmation in a fresh process)."""
    description = CaseDescription({}, {}, {}, {"pattern": case.pattern})
    tolerance: dict[str, Any] = {"reason": GRAPH_BOUND}
    deviations: dict[str, str] = {}

    def row_for(node_case: OpCase) -> Tolerance:
        """A node's own row: the catalogue's, or this backend's documented deviation for the node (the
        op tier's known bug with a bound of its own, e.g. Vulkan's F16 MUL_MAT intermediates)."""
        bug = next((b for b in harness.known_bugs_of(node_case) if b.tolerance is not None), None)
        if bug is not None and bug.tolerance is not None:
            deviations[node_case.op] = bug.id
            return bug.tolerance
        return catalogue.tolerance_of(node_case)

    step = "expanding the pattern"
    try:
        description = describe(case)
        step = "making the inputs"
        inputs = make_graph_inputs(case)
        exact_inputs = exact_graph_inputs(case, inputs)
        step = "computing the golden"
        golden = evaluate_graph(case, exact_inputs, row_for)
    except Exception as exc:
        return harness.write_record(_error(harness, case, description, f"harness error while {step}: {_line(exc)}"))
    graph_bugs = graph_bugs_of(harness, case)
    try:
        _isolate(harness, graph_bugs)
        reply = harness.runner.call("run_graph", (case, inputs), harness.timeout, label=case.case_id)
    except Exception as exc:
        return harness.write_record(_error(harness, case, description, f"device error: {_line(exc)}"))
    if reply.outcome is Outcome.UNSUPPORTED and "does not declare run_graph" in reply.message:
        reply.message = "the device does not run graph cases (it declares no Capability.GRAPH)"
    if deviations:
        tolerance["deviations"] = dict(deviations)
    record = harness.new_record(case.case_id, case.op, description, case.distribution, case.data_seed, reply,
                                 tolerance)
    if reply.answered:
        try:
            verdict = judge_graph(case, exact_inputs, golden, reply.result, row_for,
                                  lambda node_case: resolve(node_case, harness.known_bugs_of))
        except Exception as exc:
            record.outcome = Outcome.ERROR
            record.message = f"harness error while judging the graph: {_line(exc)}"[:MESSAGE_LIMIT]
        else:
            record.metrics = verdict.worst().as_dict()
            record.outcome = Outcome.PASS if verdict.passed else Outcome.FAIL
            record.message = verdict.message()[:MESSAGE_LIMIT]
            record.decided_by = verdict.decided_by(case)
            record.extra = {
                "pattern": case.pattern,
                "outputs": [v.to_json() for v in verdict.outputs],
                "nodes": [v.to_json() for v in verdict.nodes],
                "failed_runs": verdict.failed_runs(),
                "first_wrong_node": verdict.first_wrong_node,
                "fused_only": verdict.fused_only,
                "allocator_only": verdict.allocator_only,
                "fused_span": verdict.fused_span,
                "not_run": verdict.not_run,
                "deviations": deviations,
                "compute_s": dict(reply.result.extra),
            }
    _settle(harness, case, record, graph_bugs, reply.answered)
    if annotate is not None:
        annotate(record)
    return harness.write_record(record)


def _isolate(harness: Harness, graph_bugs: list[GraphKnownBug]) -> None:
    """A fresh worker before a case an isolating entry covers: damage left by earlier cases must not land on it."""
    if any(b.isolated for b in graph_bugs):
        harness.restart_worker(only_if_used=True)


def _settle(harness: Harness, case: GraphCase, record: CaseRecord, graph_bugs: list[GraphKnownBug],
            answered: bool) -> None:
    """The known bug that explains the record's outcome, if any, and a fresh worker after a case that may have
    corrupted its process (or failed: a wrong kernel may also have written past its buffer)."""
    bug: GraphKnownBug | KnownBug | None = next(
        (b for b in graph_bugs if record.outcome.value in b.outcomes), None)
    if bug is None and record.outcome is Outcome.FAIL:
        bug = _node_bug(harness, case, (record.extra or {}).get("first_wrong_node"))
    if bug is not None and record.outcome.value in bug.outcomes:
        # only the outcome the bug gives: a latent corruption leaves this case's own results right, so a
        # pass is not a stale expectation here
        record.expected = ExpectedFailure.of(bug)
    corrupting = (any(b.corrupts_process for b in graph_bugs) or (bug is not None and bug.corrupts_process)) \
        and answered
    if record.outcome is Outcome.FAIL or corrupting:
        harness.restart_worker(record)  # a wrong kernel may also have written past its buffer


def _node_bug(harness: Harness, case: GraphCase, first_wrong_node: str | None) -> KnownBug | None:
    """The op tier's known bug (not a documented deviation, which is judged by its own bound) of the node
    the fusion-blocked run found wrong on the device's own inputs: the graph fails because that op does."""
    if not first_wrong_node:
        return None
    node_case = case.node_case(case.graph.node(first_wrong_node.split(":")[0]))
    # the first wrong node failed its row and any covering deviation's bound (else it would be right): only
    # an entry that says the node's case gives a wrong value explains it, as the op tier resolves a case
    return resolve(node_case, harness.known_bugs_of).explaining("fail", deviation_held=False)


def graph_bugs_of(harness: Harness, case: GraphCase) -> list[GraphKnownBug]:
    """The device's graph-level known bugs covering ``case`` (ggml devices: by device name and release)."""
    return known_bugs.find_all_graph(case, *harness.bug_identity(), build=harness.llama_build())



def _error(harness: Harness, case: GraphCase, description: CaseDescription, message: str) -> CaseRecord:
    from device.worker import Reply

    record = harness.new_record(case.case_id, case.op, description, case.distribution, case.data_seed,
                                 Reply(Outcome.ERROR), {"reason": GRAPH_BOUND})
    record.outcome = Outcome.ERROR
    record.message = message[:MESSAGE_LIMIT]
    return record


def _line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"

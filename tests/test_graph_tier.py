"""The graph tier: ids, the golden against hand computation, the propagated bound, localisation, the
device contract, and the planted fused-RMS_NORM+MUL fault caught and named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.graph_strategies import graph_strategy, has_strategy
from conformance.graphs import evaluate_graph_case, judge_graph, make_graph_inputs
from conformance.harness import Harness
from conformance.options import parse_ops
from device.base import GraphRun, GraphRunResult, as_output
from golden import catalogue
from golden.case import parse_case_id
from golden.graphs.case import GraphCase, evaluate_graph, is_graph_id, parse_graph_id
from golden.graphs.registry import patterns
from results.outcome import Outcome
from tests.graph_examples import EXAMPLES, example

ROOT = Path(__file__).resolve().parents[1]
RMS_ID = EXAMPLES["rms_norm_mul/row_prefill"]


def _all_patterns() -> st.SearchStrategy[GraphCase]:
    # a pattern without a strategy is left out here: tests/test_graph_consistency.py names the missing piece
    return st.one_of([graph_strategy(name, sig) for name, p in sorted(patterns().items()) for sig in p.signatures
                      if has_strategy(name)])


@settings(max_examples=60, deadline=None)
@given(case=_all_patterns())
def test_graph_id_parses_back_exactly(case: GraphCase) -> None:
    assert is_graph_id(case.case_id)
    back = parse_graph_id(case.case_id)
    assert back == case and back.case_id == case.case_id
    try:  # never read as an op case: op names have no '['
        op = parse_case_id(case.case_id).op
    except (ValueError, KeyError):
        return
    assert op not in catalogue.OPS


@pytest.mark.parametrize("bad", ["GRAPH[no_such](type=f32,data=uniform:1)", "GRAPH[softcap](type=f32,data=uniform:1)",
                                 "GRAPH[rms_norm_mul](type=f32,ne=[8,1,1,1],w=row,order=wx,eps=1e-06,data=uniform:1)",
                                 "GRAPH[softcap]type=f32"])
def test_bad_graph_ids_are_value_errors(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_graph_id(bad)


def test_pattern_names_select_with_op_and_never_shadow_an_op() -> None:
    assert parse_ops(["rms_norm_mul,MUL"]) == {"RMS_NORM_MUL", "MUL"}
    with pytest.raises(ValueError):
        parse_ops(["rms_norm_mull"])


def test_golden_is_the_hand_computation_with_intermediates_rounded() -> None:
    case = parse_graph_id(RMS_ID)
    x, w = (np.asarray(v, np.float64) for v in make_graph_inputs(case))
    norm = (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(1e-5))).astype(np.float32)
    got = evaluate_graph(case, [x, w])
    np.testing.assert_array_equal(got.stored["n0"], norm.astype(np.float64))
    np.testing.assert_allclose(got.exact["n1"], norm.astype(np.float64) * w, rtol=0, atol=0)


def test_bound_grows_along_a_chain_and_covers_a_correctly_rounded_f32_evaluation() -> None:
    case = GraphCase("add_chain", (("type", "f32"), ("ne", (64, 2, 1, 1)), ("n", 8), ("b", "full")), 7, "dense")
    xs = [np.asarray(v, np.float64) for v in make_graph_inputs(case)]
    got = evaluate_graph(case, xs)
    worst = [float(np.max(got.allowed[f"n{i}"])) for i in range(8)]
    assert worst == sorted(worst) and worst[-1] > worst[0]
    acc = np.float32(0) + xs[0].astype(np.float32)
    for x in xs[1:]:
        acc = (acc + x.astype(np.float32)).astype(np.float32)  # f32 left to right, each sum rounded
    assert np.all(np.abs(acc - got.exact["n7"]) <= got.allowed["n7"])


def _result(case: GraphCase, values: dict[str, np.ndarray], fused_out: dict[str, np.ndarray] | None = None
            ) -> GraphRunResult:
    graph = case.graph
    out = GraphRunResult()
    for run in GraphRun:
        names = [n.name for n in graph.nodes] if run is GraphRun.BLOCKED else list(graph.outputs)
        out.nodes[run.value] = {n: as_output(values[n], graph.node(n).dst) for n in names}
        out.inputs_intact[run.value] = [True] * len(graph.inputs)
    if fused_out is not None:
        out.nodes[GraphRun.FUSED.value] = fused_out
    return out


def test_localisation_names_the_first_wrong_node_on_the_devices_own_inputs() -> None:
    case = parse_graph_id("GRAPH[rms_norm_mul_add](type=f32,ne=[16,2,1,1],w=row,order=xw,eps=1e-06,b=row,"
                          "data=uniform:1)")
    xs = [np.asarray(v, np.float64) for v in make_graph_inputs(case)]
    golden = evaluate_graph(case, xs)
    values = dict(golden.exact)
    values["n1"] = values["n1"] * 1.01  # MUL wrong; n2 computed from the wrong n1 is right for its inputs
    values["n2"] = values["n1"].astype(np.float32).astype(np.float64) + np.asarray(xs[2])
    verdict = judge_graph(case, xs, golden, _result(case, values))
    assert not verdict.passed and verdict.first_wrong_node == "n1:MUL" and not verdict.fused_only
    assert [v.metrics.passed for v in verdict.nodes] == [True, False, True]


def test_fails_only_when_fused_names_the_span() -> None:
    case = parse_graph_id(RMS_ID)
    xs = [np.asarray(v, np.float64) for v in make_graph_inputs(case)]
    golden = evaluate_graph(case, xs)
    wrong = {"n1": as_output(golden.exact["n1"] * 1.001, "f32")}
    verdict = judge_graph(case, xs, golden, _result(case, golden.exact, wrong))
    assert verdict.fused_only and verdict.failed_runs() == ["fused"]
    assert verdict.fused_span == "n0:RMS_NORM→n1:MUL"
    assert "fails only when fused: span n0:RMS_NORM→n1:MUL" in verdict.message()


def test_an_input_written_by_a_run_fails_it() -> None:
    case = parse_graph_id(RMS_ID)
    xs = [np.asarray(v, np.float64) for v in make_graph_inputs(case)]
    golden = evaluate_graph(case, xs)
    result = _result(case, golden.exact)
    result.inputs_intact[GraphRun.GALLOCR.value] = [False, True]
    verdict = judge_graph(case, xs, golden, result)
    assert not verdict.passed and verdict.inputs_changed == {"gallocr": ["x"]}


def test_golden_device_runs_graph_cases(tmp_path: Path) -> None:
    harness = Harness("golden", out_dir=str(tmp_path))
    try:
        record = evaluate_graph_case(harness, parse_graph_id(RMS_ID))
    finally:
        harness.close()
    assert record.outcome is Outcome.PASS, record.message
    assert record.extra is not None and [v["run"] for v in record.extra["outputs"]] == ["fused", "blocked", "gallocr"]


@pytest.fixture(scope="module")
def cpu_harness(tmp_path_factory: pytest.TempPathFactory) -> Any:
    harness = Harness("ggml:CPU", out_dir=str(tmp_path_factory.mktemp("cpu")))
    yield harness
    harness.close()


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_cpu_runs_every_example_three_ways(cpu_harness: Harness, name: str) -> None:
    case = example(name)
    record = evaluate_graph_case(cpu_harness, case)
    assert record.outcome is Outcome.PASS, f"{case.case_id}: {record.message}"
    assert record.extra is not None
    assert {v["run"] for v in record.extra["outputs"]} == {"fused", "blocked", "gallocr"}
    # every node the blocked run can read back is judged (a view of a written cache, or a node an in-place
    # CLAMP overwrote, is judged through its consumer)
    assert len(record.extra["nodes"]) == sum(case.graph.read_back(n.name) for n in case.graph.nodes)


def test_a_device_without_the_graph_capability_is_unsupported_with_a_reason(tmp_path: Path) -> None:
    harness = Harness("tests.plugins.faulty_glu:swiglu_halves_swapped", out_dir=str(tmp_path))
    try:
        record = evaluate_graph_case(harness, parse_graph_id(RMS_ID))
    finally:
        harness.close()
    assert record.outcome is Outcome.UNSUPPORTED
    assert "does not run graph cases" in record.message


@pytest.mark.slow
def test_fused_eps_fault_is_caught_and_named(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance/test_graphs.py", "-q", "-p", "no:cacheprovider", "-x",
         "--device", "tests.plugins.faulty_graph:fused_rms_norm_eps", "--op", "RMS_NORM_MUL",
         # the ci profile's draws, the failure not shrunk: catching and naming the span need no shrinking
         "--conform-profile", "ci-detect", "--results", str(results)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    tail = (proc.stdout + proc.stderr)[-1500:]
    assert proc.returncode == 1, tail
    records = [json.loads(line) for line in results.read_text().splitlines()]
    failing = [r for r in records if r.get("type") == "case" and r["outcome"] == "fail"]
    assert failing and all(r["extra"]["fused_only"] for r in failing), tail
    assert all(r["extra"]["fused_span"] == "n0:RMS_NORM→n1:MUL" for r in failing)
    assert "fails only when fused: span n0:RMS_NORM→n1:MUL" in proc.stdout


def test_vulkan_fusion_heap_bug_covers_graphs_with_an_rms_norm_mul_span_on_its_release_only() -> None:
    from device.known_bugs import find_all_graph, find_graph

    bug_id = "vulkan-rms-norm-mul-fusion-heap-corruption"
    def feeds(case: GraphCase) -> bool:  # a MUL of an RMS_NORM's result (a llama layer opens with one)
        norms = {n.name for n in case.graph.nodes if n.op == "RMS_NORM"}
        return any(n.op == "MUL" and norms.intersection(n.srcs) for n in case.graph.nodes)

    cases = [example(n) for n in EXAMPLES]
    with_span, without = [c for c in cases if feeds(c)], [c for c in cases if not feeds(c)]
    assert {"rms_norm_mul", "rms_norm_mul_add", "add_rms_norm_mul", "llama_layer"} <= {c.pattern for c in with_span}
    assert without
    for case in with_span:
        found = find_graph(case, "Vulkan0", "0.25.1")
        assert found is not None and found.id == bug_id and found.corrupts_process, case.case_id
        assert find_graph(case, "CPU", "0.25.1") is None and find_graph(case, "Vulkan0", "0.20.2") is None
    assert all(bug_id not in [b.id for b in find_all_graph(case, "Vulkan0", "0.25.1")] for case in without)


def test_every_vulkan_graph_but_the_state_sequences_runs_isolated() -> None:
    from device.known_bugs import find_all_graph

    for name in EXAMPLES:
        case = example(name)
        isolated = [b.id for b in find_all_graph(case, "Vulkan0", "0.25.1") if b.isolated]
        assert isolated == ([] if case.pattern == "rope_seq" else ["vulkan-graph-sequence-heap-corruption"])
        assert not any(b.isolated for b in find_all_graph(case, "CPU", "0.25.1"))


def test_b8121_graph_entries_cover_their_cases_on_that_build_only() -> None:
    from device.known_bugs import find_all_graph

    def ids(case_id: str, build: str | None = "b8121", release: str = "0.9.7") -> set[str]:
        return {b.id for b in find_all_graph(parse_graph_id(case_id), "Vulkan0", release, build=build)}

    rope = ("GRAPH[rope_seq](type=f32,ne=[2,4,3,1],n_dims=2,mode=0,freq_base=10000.0,freq_scale=1.0,ext_factor=1.0,"
            "p0=1962,lay={lay},data=uniform:2219)")
    assert "vulkan-b8121-rope-misaligned-view" in ids(rope.format(lay="offs[3]"))  # 12 bytes
    for lay in ("offs[4]", "contiguous"):  # 16 bytes, none: b8121 takes them
        assert "vulkan-b8121-rope-misaligned-view" not in ids(rope.format(lay=lay))
    assert ids(rope.format(lay="offs[3]")) == {"vulkan-b8121-rope-misaligned-view"}  # rope_seq: not isolated
    topk = ("GRAPH[topk_moe](type=f32,n_expert=8,k=2,n_tokens=3,gating={gating},bias={bias},norm=True,scale=2.5,"
            "router=mul_mat,n_embd=16,data=uniform:0)")
    sigmoid = ids(topk.format(gating="sigmoid", bias="True"))
    assert "vulkan-b8121-topk-moe-fused-output-over-logits" in sigmoid
    assert "vulkan-b8121-graph-sequence-heap-corruption" in sigmoid
    assert "vulkan-b8121-topk-moe-fused-output-over-logits" not in ids(topk.format(gating="sigmoid", bias="False"))
    assert "vulkan-b8121-topk-moe-fused-output-over-logits" not in ids(topk.format(gating="softmax", bias="True"))
    weight = ids(topk.format(gating="softmax_weight", bias="False"))
    assert "vulkan-b8121-topk-moe-softmax-weight-fusion-heap-corruption" in weight
    assert "vulkan-b8121-topk-moe-softmax-weight-fusion-heap-corruption" not in sigmoid
    # keyed on the build: not on another 0.9.7 build, an unknown one, or 0.25.1
    for build, release in (("b8179", "0.9.7"), (None, "0.9.7"), (None, "0.25.1")):
        assert not any(i.startswith("vulkan-b8121-") for i in ids(topk.format(gating="sigmoid", bias="True"),
                                                                   build=build, release=release))


def test_an_isolating_graph_bug_starts_each_case_in_a_fresh_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import conformance.graphs as graphs
    from device.known_bug import GraphKnownBug

    first, second = parse_graph_id(RMS_ID), example("rms_norm_mul_add/full_wx_decode")
    harness = Harness("ggml:CPU", out_dir=str(tmp_path))
    try:
        evaluate_graph_case(harness, first)
        evaluate_graph_case(harness, second)
        assert harness.runner.history == [first.case_id, second.case_id]  # one worker for both
        bug = GraphKnownBug("isolate", "*", lambda case: True, "stands for damage from earlier graphs", RMS_ID,
                            outcomes=(), isolated=True)
        monkeypatch.setattr(graphs, "graph_bugs_of", lambda harness, case: [bug])
        evaluate_graph_case(harness, first)
        record = evaluate_graph_case(harness, second)
        assert harness.runner.history == [second.case_id]  # started afresh before it
    finally:
        harness.close()
    assert record.outcome is Outcome.PASS and record.expected is None


def test_a_corrupting_graph_bug_restarts_the_worker_and_a_pass_is_not_marked_expected(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import conformance.graphs as graphs
    from device.known_bug import GraphKnownBug

    bug = GraphKnownBug("latent-heap-corruption", "*", lambda case: True, "stands for a latent corruption", RMS_ID,
                        outcomes=("crash",), corrupts_process=True)
    monkeypatch.setattr(graphs, "graph_bugs_of", lambda harness, case: [bug])
    harness = Harness("ggml:CPU", out_dir=str(tmp_path))
    starts: list[int] = []
    try:
        real_start = harness.runner.start
        monkeypatch.setattr(harness.runner, "start", lambda: (starts.append(1), real_start())[1])
        record = evaluate_graph_case(harness, parse_graph_id(RMS_ID))
    finally:
        harness.close()
    assert record.outcome is Outcome.PASS and record.expected is None, record.message
    assert starts == [1]  # the next case gets a clean process


def test_a_graph_failing_at_a_node_an_op_bug_covers_is_that_known_bug() -> None:
    """The fusion-blocked run names the first wrong node; where the op tier lists a wrong-result bug of the
    device for that node's case, the graph record carries it (a documented deviation does not: it is
    judged by its own bound), and a node no bug covers leaves the failure unexpected."""
    from types import SimpleNamespace

    from conformance.graphs import _node_bug
    from device.known_bug import KnownBug

    case = parse_graph_id(
        "GRAPH[group_norm_mul_add](type=f32,ne=[8,2,6,1],n_groups=4,w=channel,b=full,order=xw,eps=1e-06,data=dense:2)")
    first = case.graph.nodes[0]
    assert first.op == "GROUP_NORM"
    bug = KnownBug("planted-group-norm", "CPU", "GROUP_NORM", lambda c: c.op == "GROUP_NORM", "planted", "")
    deviation = KnownBug("planted-deviation", "CPU", "GROUP_NORM", lambda c: True, "planted", "",
                         tolerance=catalogue.tolerance_of(case.node_case(first)))

    def harness_with(found: KnownBug | None) -> Any:
        return SimpleNamespace(known_bugs_of=lambda node_case: [found] if found and found.applies(node_case) else [])

    assert _node_bug(harness_with(bug), case, first.label) is bug
    assert _node_bug(harness_with(bug), case, case.graph.nodes[1].label) is None  # the MUL: not covered
    assert _node_bug(harness_with(deviation), case, first.label) is None
    assert _node_bug(harness_with(bug), case, None) is None

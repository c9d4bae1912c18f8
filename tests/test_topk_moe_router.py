"""topk_moe as llama.cpp builds it (issue 34, Deliver 1): the router logits from a MUL_MAT, only the
outputs flagged under ggml's graph allocator, every gating with and without the expert bias; each
combination is reached by the suite's own ci-profile draw, and the planted fault that needs the
allocator's reuse of the logits' block is caught there and nowhere else."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.graphs import evaluate_graph_case
from conformance.harness import Harness
from golden.graphs.case import parse_graph_id
from golden.graphs.patterns.moe import GATINGS, ROUTERS
from results.outcome import Outcome

ROOT = Path(__file__).resolve().parents[1]


def _router_case(gating: str, bias: bool, n_tokens: int, norm: bool = True, n_expert: int = 8) -> str:
    return (f"GRAPH[topk_moe](type=f32,n_expert={n_expert},k=2,n_tokens={n_tokens},gating={gating},bias={bias},"
            f"norm={norm},scale=2.5,router=mul_mat,n_embd=16,data=uniform:1)")


def test_the_llama_form_computes_the_logits_and_leaves_the_argsort_to_the_allocator() -> None:
    case = parse_graph_id(_router_case("softmax_weight", True, 3))
    graph = case.graph
    assert [i.name for i in graph.inputs] == ["router_w", "x", "expert_bias"]
    assert graph.nodes[0].op == "MUL_MAT" and graph.nodes[0].srcs == ("router_w", "x")
    assert "logits" not in graph.spans[0]  # the fused kernels take the logits as their input
    assert graph.outputs == ("weights_scaled", "selected")
    assert graph.allocator_outputs() == ("weights_scaled",)  # selected views the ARGSORT, not kept alive
    # a view of the last kernel is read back (nothing is allocated after its block is freed)
    unscaled = parse_graph_id(_router_case("softmax", False, 3).replace("scale=2.5", "scale=1.0")).graph
    assert unscaled.outputs[0] == "weights_3d" and unscaled.allocator_outputs() == ("weights_3d",)
    # today's form stays: the logits a graph input, the ARGSORT held for the read-back
    old = parse_graph_id(_router_case("softmax", False, 3).replace(",router=mul_mat,n_embd=16", ""))
    assert old.graph.inputs[0].name == "logits" and old.graph.allocator_outputs() == old.graph.outputs


def test_clamp_writes_over_its_source_so_the_sum_is_not_read_back() -> None:
    graph = parse_graph_id(_router_case("sigmoid", False, 2)).graph
    assert not graph.read_back("weights_sum") and graph.read_back("weights_norm")


@pytest.mark.parametrize(("gating", "bias"), list(itertools.product(GATINGS, (False, True))))
def test_every_gating_with_and_without_the_bias_passes_three_ways_on_cpu(gating: str, bias: bool,
                                                                         tmp_path: Path) -> None:
    harness = Harness("ggml:CPU", out_dir=str(tmp_path))
    try:  # 6 experts: not a power of two, several tokens (the late softmax's unfused path too)
        record = evaluate_graph_case(harness, parse_graph_id(_router_case(gating, bias, 7, n_expert=6)))
    finally:
        harness.close()
    assert record.outcome is Outcome.PASS, record.message
    assert record.extra is not None
    assert {v["run"] for v in record.extra["outputs"]} == {"fused", "blocked", "gallocr"}


def _ci_records(device: str, tmp_path: Path) -> tuple[int, list[dict[str, object]]]:
    results = tmp_path / "r.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance/test_graphs.py", "-q", "-p", "no:cacheprovider",
         "--device", device, "-k", "test_graph and topk_moe", "--conform-profile", "ci", "--results", str(results)],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    records = [json.loads(line) for line in results.read_text().splitlines()]
    return proc.returncode, [r for r in records if r.get("type") == "case"]


@pytest.mark.slow
def test_every_combination_is_reached_by_the_ci_profile(tmp_path: Path) -> None:
    rc, records = _ci_records("golden", tmp_path)
    assert rc == 0 and records
    tests = {r["test_id"] for r in records}
    assert tests == {f"conformance/test_graphs.py::test_graph[topk_moe-f32-{g}]" for g in GATINGS}
    reached, uneven_prefill = set(), set()
    for r in records:
        p = r["params"]
        assert isinstance(p, dict)
        reached.add((p["gating"], p["bias"], p.get("router", "input")))
        if p["n_expert"] & (p["n_expert"] - 1) and p["n_tokens"] > 1:
            uneven_prefill.add(p["gating"])
    missing = set(itertools.product(GATINGS, (False, True), ROUTERS)) - reached
    assert not missing, f"never drawn in ci: {sorted(missing)}"
    assert uneven_prefill == set(GATINGS), "a gating without a non-power-of-two expert count over several tokens"


@pytest.mark.slow
def test_the_freed_logits_fault_is_caught_in_ci_only_under_the_allocator(tmp_path: Path) -> None:
    rc, records = _ci_records("tests.plugins.faulty_graph_fusion:topk_moe_weights_over_freed_logits", tmp_path)
    failed = [r for r in records if r["outcome"] == "fail"]
    assert rc == 1 and failed
    # an error record is the plug-in itself (it raised KeyError on a view output the allocator run does not read)
    assert not [r["case_id"] for r in records if r["outcome"] == "error"]
    # every gating's test (sqrt_softplus's only through a scale-1.0 view output the gallocr run now reads back)
    assert {r["test_id"] for r in failed} == {f"conformance/test_graphs.py::test_graph[topk_moe-f32-{g}]"
                                              for g in GATINGS}
    for r in failed:  # only llama.cpp's form, several rows, and only the graph-allocator run
        assert "router=mul_mat" in str(r["case_id"]) and "n_tokens=1," not in str(r["case_id"])
        assert "fails only under ggml's graph allocator" in str(r["message"]), r["message"]


@pytest.mark.parametrize("op", ["SIGMOID", "SOFTPLUS"])
def test_gating_propagation_bounds_every_perturbation_within_delta(op: str) -> None:
    import numpy as np

    from golden.case import OpCase, TensorSpec
    from golden.graphs.case import PROPAGATION

    rng = np.random.default_rng(7)
    x = rng.uniform(-30, 30, (1, 1, 64, 256))
    d = 10.0 ** rng.uniform(-8, 1, x.shape)
    node = OpCase(op, (TensorSpec("f32", (256, 64, 1, 1)),), (), "f32")
    f = {"SIGMOID": lambda v: 1 / (1 + np.exp(-v)), "SOFTPLUS": lambda v: np.logaddexp(0, v)}[op]
    bound = PROPAGATION[op](node, [x], [d], f(x))
    for sign in (-1.0, 1.0):  # the extremes of [x − d, x + d] (both functions are monotone)
        moved = f(x + sign * d)
        rounding = 4 * np.finfo(np.float64).eps * np.maximum(np.abs(moved), np.abs(f(x)))  # this test's float64
        assert np.all(np.abs(moved - f(x)) <= bound + rounding)

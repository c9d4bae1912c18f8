"""The graph patterns of issue 23 item 5 (norms.py, misc.py, moe.py, rope.py): each runs on ggml:CPU
three ways and passes, their propagation rules bound what they must, and the two faulty plug-ins of
tests/plugins/faulty_graph_fusion.py are caught and named at their span."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conformance.graphs import evaluate_graph_case, make_graph_inputs
from conformance.harness import Harness
from golden import catalogue
from golden.case import OpCase, TensorSpec
from golden.graphs.case import PROPAGATION, evaluate_graph, parse_graph_id
from results.outcome import Outcome

ROOT = Path(__file__).resolve().parents[1]
NEW_EXAMPLES = (  # decode and prefill, broadcast and swapped variants, every mode among them
    "GRAPH[norm_mul_add](type=f32,ne=[64,3,1,1],w=full,b=row,order=wx,eps=1e-05,data=uniform:1)",
    "GRAPH[group_norm_mul_add](type=f32,ne=[8,2,6,1],n_groups=4,w=channel,b=full,order=xw,eps=1e-06,data=dense:2)",
    "GRAPH[unary_mul](type=f32,ne=[33,2,1,1],unary=SOFTPLUS,b=row,data=dense:3)",
    "GRAPH[ssm_conv_silu](type=f32,d_conv=4,d_inner=7,n_t=3,n_s=2,bias=True,data=dense:4)",
    "GRAPH[topk_moe](type=f32,n_expert=8,k=2,n_tokens=3,gating=softmax,bias=False,norm=True,scale=2.5,data=uniform:1)",
    "GRAPH[topk_moe](type=f32,n_expert=64,k=6,n_tokens=1,gating=sigmoid,bias=True,norm=False,scale=1.0,data=dense:2)",
    "GRAPH[rms_norm_mul_rope](type=f32,head_dim=64,n_head=2,n_tokens=3,mode=2,n_dims=32,freq_base=10000.0,"
    "eps=1e-06,set_rows=True,n_kv=32,idx=i64,data=uniform:1)",
    "GRAPH[rms_norm_mul_rope](type=f32,head_dim=128,n_head=1,n_tokens=1,mode=0,n_dims=128,freq_base=10000.0,"
    "eps=1e-06,set_rows=False,data=dense:5)",
    "GRAPH[rope_set_rows](type=f32,head_dim=128,n_head=1,n_tokens=1,mode=0,n_dims=128,freq_base=10000.0,n_kv=64,"
    "idx=i32,data=dense:2)",
    "GRAPH[rope_inplace_view](type=f16,head_dim=64,n_head=2,n_kv=7,n_rot=32,mode=2,freq_base=10000.0,data=uniform:1)",
    "GRAPH[mul_mat_id_mul](type=f16,k=64,m=9,n_expert=8,n_used=2,n_tokens=3,src_rows=1,data=uniform:3)",
    "GRAPH[mul_mat_id_mul](type=f32,k=33,m=5,n_expert=4,n_used=4,n_tokens=1,src_rows=4,data=dense:4)",
    "GRAPH[mul_mat_id_mul](type=f16,k=64,m=9,n_expert=8,n_used=2,n_tokens=3,src_rows=1,bias=True,data=uniform:3)",
    "GRAPH[mul_mat_id_mul](type=f32,k=33,m=5,n_expert=4,n_used=4,n_tokens=1,src_rows=4,bias=True,mul=False,"
    "data=dense:4)",
)


def test_new_patterns_pass_three_ways_on_cpu(tmp_path: Path) -> None:
    harness = Harness("ggml:CPU", out_dir=str(tmp_path))
    try:
        for case_id in NEW_EXAMPLES:
            case = parse_graph_id(case_id)
            record = evaluate_graph_case(harness, case)
            assert record.outcome is Outcome.PASS, f"{case_id}: {record.message}"
            assert record.extra is not None
            assert {v["run"] for v in record.extra["outputs"]} == {"fused", "blocked", "gallocr"}
    finally:
        harness.close()


def test_topk_moe_node_order_is_vulkans() -> None:
    # ggml-vulkan's topk_moe_early_softmax_norm op list, in the order the DFS over the weights gives
    case = parse_graph_id(NEW_EXAMPLES[4])
    assert [n.op for n in case.graph.nodes] == ["SOFT_MAX", "RESHAPE", "ARGSORT", "VIEW", "GET_ROWS", "RESHAPE",
                                                "SUM_ROWS", "CLAMP", "DIV", "RESHAPE", "SCALE"]
    assert case.graph.outputs == ("weights_scaled", "selected")


def test_argsort_propagation_marks_only_positions_that_may_swap() -> None:
    x = np.array([[[[0.5, 0.1, 0.1000001, 0.9]]]])
    node = OpCase("ARGSORT", (TensorSpec("f32", (4, 1, 1, 1)),), (("order", "desc"),), "i32")
    order = catalogue.evaluate(node, [x])
    bound = PROPAGATION["ARGSORT"](node, [x], [np.full(x.shape, 1e-6)], order)
    assert list(bound.ravel()) == [0.0, 0.0, np.inf, np.inf]  # 0.9, 0.5 are sure; the near tie is not


def test_a_near_tie_makes_the_gathered_weight_unjudged_not_wrong() -> None:
    case = parse_graph_id(NEW_EXAMPLES[4])
    xs = [np.asarray(v, np.float64) for v in make_graph_inputs(case)]
    logits = xs[0].copy()
    top = np.argsort(-logits, axis=-1)
    first, second = top[..., 0], top[..., 1]
    np.put_along_axis(logits, second[..., None], np.take_along_axis(logits, first[..., None], -1), -1)
    golden = evaluate_graph(case, [logits])
    assert np.all(np.isinf(golden.allowed["weights"][..., :2, :]))  # either expert may come first
    assert np.all(np.isfinite(golden.allowed["selected"][..., 2:]))


def test_the_cache_write_bound_allows_one_f16_step_past_the_propagated_error() -> None:
    case = parse_graph_id(NEW_EXAMPLES[8])
    xs = [np.asarray(v, np.float64) for v in make_graph_inputs(case)]
    golden = evaluate_graph(case, xs)
    written = golden.allowed["k_cache"] > 0
    assert written.sum() == 128  # one row of the 64 written, the others exact
    spacing = np.spacing(np.abs(golden.exact["k_cache"]).astype(np.float16)).astype(np.float64)
    assert np.all(golden.allowed["k_cache"][written] >= spacing[written])


@pytest.mark.parametrize(("plugin", "case_id", "says"), [
    ("bias_fused_as_plain", "GRAPH[mul_mat_add](type=f32,k=65,m=9,n=5,bias=full,order=mb,data=dense:9)",
     "fails only when fused: span n0:MUL_MAT→n1:ADD"),
    ("topk_moe_output_over_input", NEW_EXAMPLES[4],
     "fails only under ggml's graph allocator (buffers reused in place): span probs:SOFT_MAX→"),
])
def test_fusion_faults_are_named_at_their_span(plugin: str, case_id: str, says: str, tmp_path: Path) -> None:
    harness = Harness(f"tests.plugins.faulty_graph_fusion:{plugin}", out_dir=str(tmp_path))
    try:
        record = evaluate_graph_case(harness, parse_graph_id(case_id))
    finally:
        harness.close()
    assert record.outcome is Outcome.FAIL and says in record.message, record.message
    assert record.extra is not None and (record.extra["fused_only"] or record.extra["allocator_only"])


@pytest.mark.parametrize("plugin", ["bias_fused_as_plain", "topk_moe_output_over_input"])
def test_fusion_faults_pass_where_their_bug_cannot_show(plugin: str, tmp_path: Path) -> None:
    # a plain bias, and one row: the planted bugs need a broadcast bias / several rows, as the real ones did
    case_id = {"bias_fused_as_plain": "GRAPH[mul_mat_add](type=f32,k=65,m=9,n=5,bias=vec,order=mb,data=dense:9)",
               "topk_moe_output_over_input": NEW_EXAMPLES[5]}[plugin]
    harness = Harness(f"tests.plugins.faulty_graph_fusion:{plugin}", out_dir=str(tmp_path))
    try:
        record = evaluate_graph_case(harness, parse_graph_id(case_id))
    finally:
        harness.close()
    assert record.outcome is Outcome.PASS, record.message


@pytest.mark.slow
def test_a_new_pattern_replays_from_its_repro_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", "repro", NEW_EXAMPLES[6], "--device", "ggml:CPU"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-1500:] + proc.stderr[-1500:]
    assert "k_cache:SET_ROWS" in proc.stdout

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
from tests.graph_examples import EXAMPLES, example

ROOT = Path(__file__).resolve().parents[1]


def test_topk_moe_node_order_is_vulkans() -> None:
    # ggml-vulkan's topk_moe_early_softmax_norm op list, in the order the DFS over the weights gives
    case = example("topk_moe/softmax_norm_scale_prefill")
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
    case = example("topk_moe/softmax_norm_scale_prefill")
    xs = [np.asarray(v, np.float64) for v in make_graph_inputs(case)]
    logits = xs[0].copy()
    top = np.argsort(-logits, axis=-1)
    first, second = top[..., 0], top[..., 1]
    np.put_along_axis(logits, second[..., None], np.take_along_axis(logits, first[..., None], -1), -1)
    golden = evaluate_graph(case, [logits])
    assert np.all(np.isinf(golden.allowed["weights"][..., :2, :]))  # either expert may come first
    assert np.all(np.isfinite(golden.allowed["selected"][..., 2:]))


def test_the_cache_write_bound_allows_one_f16_step_past_the_propagated_error() -> None:
    case = example("rope_set_rows/i32_decode")
    xs = [np.asarray(v, np.float64) for v in make_graph_inputs(case)]
    golden = evaluate_graph(case, xs)
    written = golden.allowed["k_cache"] > 0
    assert written.sum() == 128  # one row of the 64 written, the others exact
    spacing = np.spacing(np.abs(golden.exact["k_cache"]).astype(np.float16)).astype(np.float64)
    assert np.all(golden.allowed["k_cache"][written] >= spacing[written])


@pytest.mark.parametrize(("plugin", "case_id", "says"), [
    ("bias_fused_as_plain", EXAMPLES["mul_mat_add/f32_full_mb_prefill"],
     "fails only when fused: span n0:MUL_MAT→n1:ADD"),
    ("topk_moe_output_over_input", EXAMPLES["topk_moe/softmax_norm_scale_prefill"],
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
    case_id = {"bias_fused_as_plain": EXAMPLES["mul_mat_add/f32_vec_prefill"],
               "topk_moe_output_over_input": EXAMPLES["topk_moe/sigmoid_bias_decode"]}[plugin]
    harness = Harness(f"tests.plugins.faulty_graph_fusion:{plugin}", out_dir=str(tmp_path))
    try:
        record = evaluate_graph_case(harness, parse_graph_id(case_id))
    finally:
        harness.close()
    assert record.outcome is Outcome.PASS, record.message


@pytest.mark.slow
def test_a_new_pattern_replays_from_its_repro_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", "repro",
                           EXAMPLES["rms_norm_mul_rope/set_rows_i64_prefill"], "--device", "ggml:CPU"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-1500:] + proc.stderr[-1500:]
    assert "k_cache:SET_ROWS" in proc.stdout

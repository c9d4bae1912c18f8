"""The model verdict's rules (conformance/model.py), on figures made by hand: a failing node decides first;
with every node passing, fused logits beyond the bar read "wrong only with the whole graph"; a not-judged
node (or logits the golden could not compute) make the run incomplete, a pass only when the user accepts the
gap; and the logits figures themselves."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from conformance.model import (
    LOGITS_NMSE_BAR,
    NODE_BY_NODE,
    LogitsFigures,
    ModelVerdict,
    NodeVerdict,
    logits_figures,
)


def _figures(device: str, nmse: float) -> LogitsFigures:
    return LogitsFigures(device, nmse, 0.0, 0.0, 0.0, 1.0, 8)


def _verdict(statuses: list[str], node_by_node: float, fused: float) -> ModelVerdict:
    v = ModelVerdict("m.gguf", "Vulkan0", "tiny")
    v.nodes = [NodeVerdict(i, 0, f"n{i}", "MUL", "", s) for i, s in enumerate(statuses)]
    v.logits = [_figures(NODE_BY_NODE, node_by_node), _figures("Vulkan0", fused)]
    return v


def test_the_first_failing_node_decides_before_the_logits() -> None:
    v = _verdict(["pass", "expected", "FAIL", "FAIL"], 1e-7, 1.0)
    assert v.verdict == "FAIL at node 2 (n2, MUL)" and not v.passed


def test_fused_logits_beyond_the_bar_are_wrong_only_with_the_whole_graph() -> None:
    assert _verdict(["pass"] * 3, 1e-7, 2 * LOGITS_NMSE_BAR).verdict == \
        "FAIL: wrong only with the whole graph (fusion or allocation)"
    assert _verdict(["pass"] * 3, 1e-7, 0.5 * LOGITS_NMSE_BAR).verdict == "pass"
    # the bar follows a node-by-node run that is itself far from the golden (activations quantized to Q8_0)
    assert _verdict(["pass"] * 3, 1e-3, 3.9e-3).verdict == "pass"
    assert _verdict(["pass"] * 3, 1e-3, 4.1e-3).verdict.startswith("FAIL: wrong only")
    assert _verdict(["pass"] * 3, 1e-7, math.nan).verdict.startswith("FAIL: wrong only")


def test_not_judged_nodes_make_the_run_incomplete_unless_accepted() -> None:
    v = _verdict(["pass", "not judged", "not judged", "not judged"], 1e-7, 1e-7)
    for node, kind in zip(v.nodes[1:], ("a source has ggml type q4_1", "a source has ggml type q4_1", "no op"),
                          strict=True):
        node.not_judged_kind, node.detail = kind, f"{kind} (node {node.index})"
    v.nodes[3].op = "ROPE"
    assert v.verdict == "incomplete: 3 of 4 computed nodes not judged" and not v.passed and v.exit_status == 3
    assert v.not_judged == [("a source has ggml type q4_1", 2, ["MUL"]), ("no op", 1, ["ROPE"])]
    v.allow_unjudged = True
    assert v.passed and v.exit_status == 0
    assert v.verdict == "pass (every judged node; 3 of 4 computed nodes not judged: accepted with --allow-unjudged)"
    # a failing node still decides first
    v.nodes[0].status = "FAIL"
    assert v.exit_status == 1 and v.verdict.startswith("FAIL at node 0")


def test_logits_the_golden_could_not_compute_are_not_judged_and_say_why() -> None:
    v = _verdict(["pass", "pass"], 1e-7, 1e-7)
    v.logits = []
    v.replay_gaps = {"a source has ggml type q4_1, which the golden does not read": 60, "no SET_ROWS dst": 2}
    assert v.logits_not_judged == ("the golden's forward pass cannot compute 62 node(s) (a source has ggml type q4_1, "
                                   "which the golden does not read: 60; no SET_ROWS dst: 2)")
    assert v.verdict == "incomplete: 0 of 2 computed nodes not judged; logits not judged" and v.exit_status == 3


def test_logits_figures() -> None:
    rng = np.random.default_rng(0)
    golden = [rng.standard_normal((6, 32)), rng.standard_normal((1, 32))]
    same = logits_figures("d", golden, [g.astype(np.float32) for g in golden])
    assert same.nmse < 1e-14 and same.kl_max < 1e-12 and same.top1_agreement == 1.0 and same.n_tokens == 7
    swapped = [g.copy() for g in golden]
    row = swapped[0][2]
    top = int(np.argmax(row))
    row[top] = row.min() - 1.0  # token 2's top-1 is now another id
    figures = logits_figures("d", golden, swapped)
    assert figures.top1_agreement == 6 / 7 and figures.kl_max > figures.kl_mean > 0


def test_nodes_another_backend_computed_are_counted_and_named_apart() -> None:
    """ggml's scheduler puts a node the device declines on the CPU: a pass says how many nodes were the
    device's, and a failure on the CPU is not called the device's."""
    v = _verdict(["pass"] * 5, 1e-7, 1e-7)
    for node in v.nodes:
        node.computed_by = "Vulkan0"
    assert v.verdict == "pass" and not v.computed_elsewhere
    v.nodes[0].computed_by = v.nodes[3].computed_by = "CPU"
    assert v.computed_elsewhere == {"CPU": 2}
    assert v.verdict == "pass (Vulkan0 computed 3 of 5 nodes; 2 on CPU, judged apart)" and v.exit_status == 0
    v.nodes[3].status = "FAIL"
    assert v.verdict == "FAIL at node 3 (n3, MUL) computed by CPU, not Vulkan0" and v.exit_status == 1
    v.nodes[1].status = "FAIL"  # the device's own failure comes first in node order
    assert v.verdict == "FAIL at node 1 (n1, MUL)"


def test_results_are_written_and_read_back_whole_with_equal_texts_shared(tmp_path: Path) -> None:
    """model.json as json.dumps(indent=1) writes it, encoded straight to the file; the report reads it back with
    the nodes' repeated texts (ops, shapes, case ids in every layer and step) one object each, and renders the
    page it rendered whole."""
    import json

    from conformance.cli.model import _write_results
    from reports.model_html import build_model_report, load_model_results, render_model_section

    v = _verdict(["pass", "FAIL", "pass", "pass"], 1e-7, 1e-7)
    for n in v.nodes:
        n.shapes, n.case_id = "f32[64,1,1,1], f32[64,1,1,1] -> f32[64,1,1,1]", "MUL(type0=f32,ne0=[64,1,1,1])"
    record = _write_results(tmp_path, "ggml:Vulkan0", v)
    text = (tmp_path / "model.json").read_text()
    assert text == json.dumps(record, indent=1, default=str)
    [loaded] = load_model_results([tmp_path / "model.json"])
    assert loaded == json.loads(text)
    nodes = loaded["nodes"]
    assert len({id(n["shapes"]) for n in nodes}) == 1 and len({id(n["case_id"]) for n in nodes}) == 1
    assert nodes[1]["status"] == "FAIL" and nodes[1]["status"] is not nodes[0]["status"]
    page = build_model_report([tmp_path / "model.json"], tmp_path / "model.html")
    assert page.read_text(encoding="utf-8") == render_model_section([loaded])
    assert "FAIL at node 1" in page.read_text(encoding="utf-8")

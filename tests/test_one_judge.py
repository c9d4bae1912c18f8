"""One judge for every tier (conformance/verdict/judge.py): op records, graph records and the graph's nodes, and
model nodes carry ``decided_by``; the model tier resolves every covering known bug by the op tier's rule (a
crash-only entry explains no wrong value); an op's own comparator is handed the row it judges with."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import conformance.model as model
from conformance.graphs import evaluate_graph_case
from conformance.harness import Harness
from conformance.resolution import resolve
from conformance.verdict.judge import judge_output
from device.known_bug import KnownBug
from device.llama.capture import CapturedNode, CapturedTensor, ModelRun
from device.llama.nodes import NodeCase
from golden import catalogue
from golden.case import parse_case_id
from golden.graphs.case import parse_graph_id
from golden.tolerance import Tolerance

GELU = "GELU(type=f32,ne=[8,2,1,1],dst=f32,data=uniform:3)"
RMS_GRAPH = "GRAPH[rms_norm_mul](type=f32,ne=[8,3,1,1],w=row,order=xw,eps=1e-05,data=uniform:3)"


def test_op_and_graph_records_carry_decided_by(tmp_path: Path) -> None:
    harness = Harness("ggml:CPU", out_dir=str(tmp_path))
    try:
        op = harness.evaluate(parse_case_id("SQR(type=f32,ne=[8,2,1,1],dst=f32,data=uniform:3)"))
        graph = evaluate_graph_case(harness, parse_graph_id(RMS_GRAPH))
    finally:
        harness.close()
    assert op.outcome.value == "pass" and op.decided_by == "catalogue:SQR[f32]", op.message
    assert graph.outcome.value == "pass", (graph.message, graph.extra)
    assert graph.decided_by == "graph_bound:rms_norm_mul"
    nodes = (graph.extra or {})["nodes"]
    assert nodes and all(n["decided_by"].startswith("catalogue:") for n in nodes)


def _gelu_node(wrong: bool) -> tuple[ModelRun, NodeCase]:
    case = parse_case_id(GELU)
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)
    out = catalogue.evaluate(case, [x.astype(np.float64)]).astype(np.float32)
    if wrong:
        out = out + np.float32(0.5)
    t = CapturedTensor("t", "f32", (8, 2, 1, 1), (4, 32, 64, 64), np.zeros(64, np.uint8), 0, 0, "GELU")
    run = ModelRun("CPU", [], [CapturedNode(0, 0, "gelu-0", "GELU", b"", [t], t, "CPU")])
    return run, NodeCase(case, [x], out, True)


@pytest.mark.parametrize("wrong", [False, True])
def test_model_nodes_carry_decided_by_and_a_crash_only_entry_explains_no_wrong_value(
        monkeypatch: pytest.MonkeyPatch, wrong: bool) -> None:
    run, node = _gelu_node(wrong)
    monkeypatch.setattr(model, "node_case", lambda captured: node)
    crash_only = KnownBug("planted-crash", "CPU", "GELU", lambda c: True, "planted", GELU, outcomes=("crash",))
    wrong_value = KnownBug("planted-fail", "CPU", "GELU", lambda c: True, "planted", GELU)
    [alone] = model.judge_nodes(run, "CPU", "0.0.0", None, bugs=[crash_only])
    assert alone.decided_by == "catalogue:GELU[f32]"
    assert alone.status == ("FAIL" if wrong else "pass"), alone.detail  # the crash-only entry explains nothing
    [both] = model.judge_nodes(run, "CPU", "0.0.0", None, bugs=[crash_only, wrong_value])
    assert both.status == ("expected" if wrong else "pass")
    assert not wrong or both.detail.startswith("known bug planted-fail")


def test_a_deviation_decides_where_the_row_fails_and_the_comparator_is_handed_its_row() -> None:
    case = parse_case_id("CLAMP(type=f32,ne=[8,1,1,1],dst=f32,min=-0.5,max=0.5,data=uniform:1)")
    x = np.linspace(-1, 1, 8).reshape(1, 1, 1, 8)
    golden = catalogue.evaluate(case, [x])
    off = golden + 1e-3
    loose = Tolerance("planted: any error below 1e-2", atol=1e-2)
    deviation = KnownBug("planted-deviation", "CPU", "CLAMP", lambda c: True, "planted", "", tolerance=loose)
    plain = resolve(case, lambda c: ())
    judged = judge_output(case, plain, [x], [x], golden, off)
    assert not judged.metrics.passed and judged.within_deviation is None and judged.decided_by == "catalogue:CLAMP[*]"
    covered = resolve(case, lambda c: [deviation])
    judged = judge_output(case, covered, [x], [x], golden, off)
    assert judged.within_deviation is True and judged.acceptable and judged.decided_by == "deviation:planted-deviation"
    assert judged.deciding.passed and not judged.metrics.passed

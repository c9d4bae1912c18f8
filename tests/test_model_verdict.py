"""The model verdict's rules (conformance/model.py), on figures made by hand: a failing node decides first;
with every node passing, fused logits beyond the bar read "wrong only with the whole graph"; a not-judged
node is never a pass by itself; and the logits figures themselves."""

from __future__ import annotations

import math

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


def test_not_judged_nodes_are_said_so() -> None:
    v = _verdict(["pass", "not judged"], 1e-7, 1e-7)
    assert v.verdict == "pass (every judged node; some not judged)" and v.counts == {"pass": 1, "not judged": 1}


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

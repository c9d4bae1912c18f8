"""The attention pattern (issue 34, item 4): llama.cpp's non-flash attention, K·Q → SOFT_MAX(mask,
scale) → V·KQ over a cache with GQA, its golden equal to attention computed directly, and its node
order the one ggml_build_forward_expand gives."""

from __future__ import annotations

import math

import numpy as np
import pytest

from conformance.graphs import make_graph_inputs
from golden.graphs.case import evaluate_graph, exact_graph_inputs, parse_graph_id

GQA = ("GRAPH[attention](type=f16,hd=16,heads=4,kv_heads=2,n=3,kv=32,p0=5,max_bias=0.0,softcap={cap},sinks=False,"
       "data=uniform:4)")


def test_node_order_is_the_dfs_over_the_output() -> None:
    graph = parse_graph_id(GQA.format(cap=30.0)).graph
    assert [n.name for n in graph.nodes] == ["k_attn", "q_attn", "kq", "kq_capped", "kq_tanh", "kq_softcap",
                                             "kq_soft", "kqv", "kqv_heads", "out"]
    assert graph.spans == (("kq_capped", "kq_tanh", "kq_softcap"),)


@pytest.mark.parametrize("cap", [0.0, 30.0])
def test_golden_is_attention_computed_directly(cap: float) -> None:
    case = parse_graph_id(GQA.format(cap=cap))
    q, k, v_t, mask = exact_graph_inputs(case, make_graph_inputs(case))
    # numpy order: q (n, heads, hd), k (kv, kv_heads, hd), v_t (kv_heads, hd, kv), mask (rows, kv)
    n, heads, hd = q.shape[1:]
    kv_heads = k.shape[2]
    out = np.zeros((n, heads, hd))
    for h in range(heads):
        g = h // (heads // kv_heads)  # consecutive query heads share a K/V head (MUL_MAT's broadcast)
        scores = q[0, :, h, :] @ k[0, :, g, :].T  # (n, kv)
        if cap:
            scores = cap * np.tanh(scores / cap)
        logits = scores / math.sqrt(hd) + mask[0, 0, :n, :]
        p = np.exp(logits - logits.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        out[:, h, :] = p @ v_t[0, g, :, :].T
    golden = evaluate_graph(case, [q, k, v_t, mask])
    np.testing.assert_allclose(golden.exact["out"].reshape(n, heads, hd), out, rtol=1e-5, atol=1e-6)
    assert np.all(golden.allowed["out"] > 0) and np.all(np.isfinite(golden.allowed["out"]))


def test_gqa_needs_kv_heads_to_divide_heads() -> None:
    with pytest.raises(ValueError, match="kv_heads"):
        parse_graph_id(GQA.format(cap=0.0).replace("heads=4,kv_heads=2", "heads=4,kv_heads=3"))


@pytest.mark.parametrize(("max_bias", "softcap", "sinks"), [(0.0, 0.0, False), (8.0, 30.0, True)])
def test_flash_attn_propagation_bounds_moved_sources_and_mask(max_bias: float, softcap: float, sinks: bool) -> None:
    """The FLASH_ATTN_EXT rule (ALiBi, softcap, sinks, a mask computed in the graph): moving q, k, v and the
    mask's visible entries by up to δ moves the output by no more than the rule's bound (δ small: first order)."""
    from golden import catalogue
    from golden.graphs.case import PROPAGATION

    case = parse_graph_id(f"GRAPH[flash_attention](type=f32,hd=16,heads=4,kv_heads=2,n=3,kv=32,p0=5,"
                          f"max_bias={max_bias},softcap={softcap},sinks={sinks},data=uniform:4)")
    node = case.graph.node("out")
    node_case = case.node_case(node)
    golden = evaluate_graph(case, exact_graph_inputs(case, make_graph_inputs(case)))
    xs = [golden.stored[s] if s in golden.stored else None for s in node.srcs]
    inputs = dict(zip([i.name for i in case.graph.inputs], exact_graph_inputs(case, make_graph_inputs(case)),
                      strict=True))
    xs = [x if x is not None else inputs[s] for x, s in zip(xs, node.srcs, strict=True)]
    rng = np.random.default_rng(3)
    deltas = [np.full(np.shape(x), 1e-6) for x in xs[:4]] + ([None] if sinks else [])
    out = catalogue.evaluate(node_case, xs)
    bound = PROPAGATION["FLASH_ATTN_EXT"](node_case, xs, deltas, out)
    for _ in range(5):
        moved = [x + rng.choice((-1.0, 1.0), np.shape(x)) * d if d is not None else x
                 for x, d in zip(xs, deltas, strict=False)] + xs[len(deltas):]
        moved[3] = np.where(np.isfinite(xs[3]), moved[3], xs[3])
        diff = np.abs(catalogue.evaluate(node_case, moved) - out)
        assert np.all(diff <= bound * 1.01 + 1e-12)

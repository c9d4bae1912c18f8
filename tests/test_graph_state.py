"""State between nodes and graphs, and the model blocks: the propagation rules the blocks need hold
against perturbed sources, ARGSORT allows any index where the order is undecided, and a sequence's failing graph is
confirmed in a fresh process (reproduces alone / only after the sequence)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conformance.graphs import evaluate_graph_case, exact_graph_inputs, make_graph_inputs
from conformance.harness import Harness
from conformance.test_graph_state import AFTER, ALONE, annotate_step
from golden import catalogue
from golden.case import OpCase, TensorSpec
from golden.graphs.case import PROPAGATION, evaluate_graph, parse_graph_id
from results.outcome import Outcome

ROOT = Path(__file__).resolve().parents[1]
SEQ_A = ("GRAPH[rope_seq](type=f32,ne=[8,2,3,1],n_dims=8,mode=0,freq_base=10000.0,freq_scale=1.0,ext_factor=0.0,"
         "p0=3,lay=contiguous,data=uniform:1)")
SEQ_B = SEQ_A.replace("freq_scale=1.0", "freq_scale=0.25")
PAIR = ("GRAPH[rope_pair](type=f32,ne=[16,2,2,1],n_dims=16,mode=0,freq_base=10000.0,freq_scale=1.0,ext_factor=0.0,"
        "pos=[0,100],second=same,data=uniform:2)")


def _worst_change(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], rng: np.random.Generator,
                  trials: int = 20) -> np.ndarray:
    """The largest output change seen with every source moved by at most its delta (random signs)."""
    base = catalogue.evaluate(case, xs)
    worst = np.zeros(np.shape(base))
    for _ in range(trials):
        moved = [x if d is None else x + d * rng.choice((-1.0, 1.0), size=np.shape(x)) for x, d in zip(xs, deltas,
                                                                                                       strict=True)]
        worst = np.maximum(worst, np.abs(catalogue.evaluate(case, moved) - base))
    return worst


def _rel(shape: tuple[int, ...], x: np.ndarray, rel: float = 1e-6) -> np.ndarray:
    return np.abs(x) * rel + 1e-9


@pytest.mark.parametrize("op", ["SOFT_MAX", "FLASH_ATTN_EXT", "ROPE", "MUL_MAT_ID"])
def test_first_order_rules_bound_perturbed_sources(op: str) -> None:
    rng = np.random.default_rng(3)
    if op == "SOFT_MAX":
        case = OpCase(op, (TensorSpec("f32", (12, 3, 1, 1)),), (("scale", 0.5), ("max_bias", 0.0), ("mask", False),
                                                                 ("sinks", False)))
        xs = [rng.uniform(-4, 4, (1, 1, 3, 12))]
    elif op == "FLASH_ATTN_EXT":
        case = OpCase(op, (TensorSpec("f32", (16, 3, 2, 1)), TensorSpec("f16", (16, 10, 2, 1)),
                           TensorSpec("f16", (16, 10, 2, 1))),
                      (("scale", 0.25), ("max_bias", 0.0), ("logit_softcap", 0.0), ("prec", "f32"), ("mask", False),
                       ("sinks", False)))
        xs = [rng.uniform(-1, 1, (1, 2, 3, 16)), rng.uniform(-1, 1, (1, 2, 10, 16)), rng.uniform(-1, 1, (1, 2, 10, 16))]
    elif op == "ROPE":
        case = OpCase(op, (TensorSpec("f32", (8, 2, 3, 1)), TensorSpec("i32", (3, 1, 1, 1))),
                      (("n_dims", 6), ("mode", 2), ("n_ctx_orig", 4096), ("freq_base", 10000.0), ("freq_scale", 1.0),
                       ("ext_factor", 0.0), ("attn_factor", 1.0), ("beta_fast", 32.0), ("beta_slow", 1.0),
                       ("freq_factors", False)))
        xs = [rng.uniform(-1, 1, (1, 3, 2, 8)), np.array([3, 50, 700], np.int32)]
    else:
        case = OpCase(op, (TensorSpec("f32", (16, 5, 4, 1)), TensorSpec("f32", (16, 1, 3, 1)),
                           TensorSpec("i32", (2, 3, 1, 1))))
        xs = [rng.uniform(-1, 1, (1, 4, 5, 16)), rng.uniform(-1, 1, (1, 3, 1, 16)),
              np.array([[0, 3], [1, 1], [2, 0]], np.int32)]
    deltas: list[np.ndarray | None] = [None if np.asarray(x).dtype.kind == "i" else _rel(np.shape(x), x) for x in xs]
    bound = PROPAGATION[op](case, xs, deltas, catalogue.evaluate(case, xs))
    seen = _worst_change(case, xs, deltas, rng)
    assert np.all(seen <= bound * (1 + 1e-3) + 1e-15), float(np.max(seen / np.maximum(bound, 1e-300)))
    assert np.max(seen / np.maximum(bound, 1e-300)) > 0.05  # the bound is not vacuous either


def test_argsort_allows_any_index_where_the_bounds_do_not_decide_the_order() -> None:
    case = OpCase("ARGSORT", (TensorSpec("f32", (3, 1, 1, 1)),), (("order", "desc"),), "i32")
    x = [np.array([[[[0.5, 0.1, 0.5 + 1e-9]]]])]
    golden = catalogue.evaluate(case, x)
    loose = PROPAGATION["ARGSORT"](case, x, [np.full((1, 1, 1, 3), 1e-8)], golden)
    assert list(np.isinf(loose).ravel()) == [True, True, False]  # the two near-equal values lead a desc sort
    assert not PROPAGATION["ARGSORT"](case, x, [np.full((1, 1, 1, 3), 1e-10)], golden).any()


def test_block_inputs_are_quantized_weights_fixed_positions_and_a_causal_mask() -> None:
    case = parse_graph_id("GRAPH[llama_layer](type=q4_0,hd=16,heads=2,n=3,kv=32,p0=7,ff=64,attn=fa,eps=1e-05,"
                          "mode=2,n_dims=16,freq_base=10000.0,data=uniform:14)")
    names = [i.name for i in case.graph.inputs]
    raw = make_graph_inputs(case)
    exact = dict(zip(names, exact_graph_inputs(case, raw), strict=True))
    assert raw[names.index("wq")].dtype == np.uint8 and exact["wq"].shape == (1, 1, 32, 32)
    assert np.max(np.abs(exact["wq"])) <= 1 / np.sqrt(32) * 1.01  # weights at 1/sqrt(fan-in)
    assert list(exact["pos"].ravel()) == [7, 8, 9] and list(exact["slots"].ravel()) == [7, 8, 9]
    mask = exact["mask"][0, 0]
    assert mask[0, 7] == 0 and mask[0, 8] == -np.inf and mask[2, 9] == 0 and mask[2, 10] == -np.inf
    golden = evaluate_graph(case, exact_graph_inputs(case, raw))
    assert np.all(np.isfinite(golden.allowed["out"]))


def test_moe_router_logits_have_no_near_ties() -> None:
    case = parse_graph_id("GRAPH[moe_ffn](type=f16,d=32,ff=32,e=32,k=4,n=7,data=uniform:3)")
    logits = make_graph_inputs(case)[0].astype(np.float64)
    gaps = np.diff(np.sort(logits, axis=-1), axis=-1)
    assert gaps.min() > 2 / 32 * 0.99


def _harness(spec: str, tmp_path: Path) -> Harness:
    return Harness(spec, out_dir=str(tmp_path))


def test_a_failure_after_a_sequence_that_passes_alone_is_only_after_the_sequence(tmp_path: Path) -> None:
    harness = _harness("tests.plugins.faulty_graph_state:address_keyed_graph_cache", tmp_path)
    try:
        first, second = parse_graph_id(SEQ_A), parse_graph_id(SEQ_B)
        assert evaluate_graph_case(harness, first).outcome is Outcome.PASS
        record = evaluate_graph_case(harness, second,
                                     lambda r: annotate_step(harness, second, (SEQ_A, SEQ_B), r))
    finally:
        harness.close()
    assert record.outcome is Outcome.FAIL
    assert record.extra is not None and record.extra["state"]["confirmation"] == AFTER
    assert record.extra["state"]["of_sequence"] == [SEQ_A, SEQ_B]
    assert record.message.startswith(AFTER)


def test_a_failure_that_reproduces_alone_says_so(tmp_path: Path) -> None:
    harness = _harness("tests.plugins.faulty_graph_state:stale_rope_cache", tmp_path)
    try:
        pair = parse_graph_id(PAIR)
        record = evaluate_graph_case(harness, pair, lambda r: annotate_step(harness, pair, (SEQ_A, PAIR), r))
    finally:
        harness.close()
    assert record.outcome is Outcome.FAIL and record.extra is not None
    assert record.extra["state"]["confirmation"] == ALONE
    assert record.extra["first_wrong_node"] == "n1:ROPE"


def test_the_unmodified_cpu_passes_the_same_sequence(tmp_path: Path) -> None:
    harness = _harness("ggml:CPU", tmp_path)
    try:
        records = [evaluate_graph_case(harness, parse_graph_id(i)) for i in (SEQ_A, SEQ_B, SEQ_A, PAIR)]
    finally:
        harness.close()
    assert [r.outcome for r in records] == [Outcome.PASS] * 4, [r.message for r in records]


@pytest.mark.slow
def test_the_address_keyed_cache_is_caught_and_the_sequence_named(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance/test_graph_state.py", "-q", "-p", "no:cacheprovider", "-x",
         # the ci profile's draws, the failure not shrunk: catching and naming the sequence need no shrinking
         "--device", "tests.plugins.faulty_graph_state:address_keyed_graph_cache", "--conform-profile", "ci-detect",
         "--results", str(results)],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=600)
    tail = (proc.stdout + proc.stderr)[-1500:]
    assert proc.returncode == 1, tail
    failing = [r for r in map(json.loads, results.read_text().splitlines())
               if r.get("type") == "case" and r["outcome"] == "fail"]
    assert failing and all(r["extra"]["state"]["confirmation"] == AFTER for r in failing), tail
    assert "reproduce the sequence: conform repro" in proc.stdout and "--sequence" in proc.stdout

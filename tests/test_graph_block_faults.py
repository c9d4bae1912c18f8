"""Block faults that need state between graphs (tests/plugins/faulty_graph_blocks.py): the stale weight
cache is invisible on a block's first graph and caught on the next graph of the same shapes with new
weights; replayed alone in a fresh device process that graph passes; ggml:CPU passes the same sequence.
Its ci-profile catch is tests/test_planted_faults.py's (block_stale_weights); conformance/test_graph_state.py's
block sequences (the same block again with new weights of the same shapes) catch it in every sequence."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.graphs import evaluate_graph_case
from conformance.harness import Harness
from golden.graphs.case import GraphCase, parse_graph_id
from results.outcome import Outcome

LAYER = ("GRAPH[llama_layer](type=q4_0,hd=16,heads=2,n=3,kv=32,p0=7,ff=64,attn=fa,eps=1e-05,mode=2,n_dims=16,"
         "freq_base=10000.0,data=uniform:14)")
# the next graph: one token at another position, new weights of the same shapes (another data seed)
LAYER_NEXT = LAYER.replace("n=3,", "n=1,").replace("p0=7", "p0=20").replace("uniform:14", "uniform:15")
MOE = "GRAPH[moe_ffn](type=q8_0,d=64,ff=32,e=8,k=2,n=3,data=uniform:16)"
MOE_NEXT = MOE.replace("n=3", "n=2").replace("uniform:16", "uniform:17")
STALE = "tests.plugins.faulty_graph_blocks:block_stale_weights"


def _outcomes(spec: str, ids: tuple[str, ...], tmp_path: Path) -> list[tuple[Outcome, str, bool]]:
    harness = Harness(spec, out_dir=str(tmp_path))
    try:
        records = [evaluate_graph_case(harness, parse_graph_id(i)) for i in ids]
    finally:
        harness.close()
    return [(r.outcome, r.message, bool((r.extra or {}).get("fused_only"))) for r in records]


@pytest.mark.parametrize(("first", "second"), [(LAYER, LAYER_NEXT), (MOE, MOE_NEXT)], ids=["llama_layer", "moe_ffn"])
def test_stale_weights_fail_the_next_graph_of_the_same_shapes_only_when_fused(first: str, second: str,
                                                                              tmp_path: Path) -> None:
    # the same graph again (same weights) is right from the cache; new weights of those shapes are not
    got = _outcomes(STALE, (first, first, second), tmp_path / "seq")
    assert [o for o, _, _ in got[:2]] == [Outcome.PASS, Outcome.PASS], got
    outcome, message, fused_only = got[2]
    assert outcome is Outcome.FAIL and fused_only and message.startswith("fails only when fused"), got[2]
    # alone in a fresh device process the cache is empty: the second graph passes
    assert _outcomes(STALE, (second,), tmp_path / "alone")[0][0] is Outcome.PASS


def test_the_unmodified_cpu_passes_the_stale_weights_sequences(tmp_path: Path) -> None:
    got = _outcomes("ggml:CPU", (LAYER, LAYER_NEXT, MOE, MOE_NEXT), tmp_path)
    assert [o for o, _, _ in got] == [Outcome.PASS] * 4, got


@pytest.mark.parametrize("pattern", ["llama_layer", "moe_ffn"])
def test_a_block_sequence_keeps_the_weight_shapes_and_changes_the_weights(pattern: str) -> None:
    from hypothesis import given, settings

    from conformance.graph_strategies import block_sequence
    from tests.plugins.faulty_graph_blocks import weight_inputs

    seen: list[int] = []

    @settings(max_examples=40, database=None, deadline=None)
    @given(block_sequence(pattern))
    def check(cases: list[GraphCase]) -> None:
        shapes = {tuple((c.graph.inputs[j].name, c.graph.inputs[j].spec.dtype, c.graph.inputs[j].spec.ne)
                        for j in weight_inputs(c)) for c in cases}
        assert len(shapes) == 1 and len(next(iter(shapes))) == (7 if pattern == "llama_layer" else 3)
        seeds = [c.data_seed for c in cases]
        assert all(a != b for a, b in zip(seeds, seeds[1:], strict=False)) and len(cases) >= 2
        seen.append(len({c.param("n") for c in cases}))

    check()
    assert max(seen) > 1  # some sequences also change the token count


@pytest.mark.slow
def test_the_stale_weights_are_caught_in_ci_only_after_the_sequence(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    results = tmp_path / "results.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance/test_graph_state.py", "-q", "-p", "no:cacheprovider",
         "--device", STALE, "-k", "test_graph_block_sequence", "--conform-profile", "ci-detect",
         "--results", str(results)],
        cwd=root, env=dict(os.environ, PYTHONPATH=str(root)), capture_output=True, text=True, timeout=600)
    tail = (proc.stdout + proc.stderr)[-1500:]
    assert proc.returncode == 1 and "2 failed" in proc.stdout, tail  # both blocks
    failing = [r for r in map(json.loads, results.read_text().splitlines())
               if r.get("type") == "case" and r["outcome"] == "fail"]
    assert failing and all(r["extra"]["state"]["confirmation"] == "only after the sequence" and r["extra"]["fused_only"]
                           for r in failing), tail

"""The model tier's KV-cache options (``conform model --cache-type-k/-v``, ``--ctx``, ``--parallel``) on ggml:CPU
with the tiny synthetic llama: each run is judged node by node, and the nodes the option adds (the quantized
cache writes, the context shift's in-place ROPE, a batch of two sequences) are among the judged ones.

Runs ggml 0.25.1's libllama from ``.backends/ggml-0.25.1-vulkan`` in a fresh interpreter per run, a prefill of
six ids and a few decode steps (2-4 s a run on the CPU).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.model_tier_support import conform_model, needs_libllama

pytestmark = [needs_libllama, pytest.mark.slow]  # each test loads libllama in a fresh interpreter: 3-10 s apiece


def _run(tmp_path: Path, *args: str) -> dict:
    proc = conform_model("--arch", "llama", "--no-cpu", "--out", str(tmp_path / "out"), *args)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "out" / "model.json").read_text())
    assert result["verdict"] == "pass", result["verdict"]
    assert set(result["counts"]) == {"pass"}, result["counts"]  # every computed node judged, none expected
    assert result["not_judged"] == [] and result["replayed_from_device"] == 0
    return result


@pytest.mark.parametrize(("type_v", "flash_attn"), [("q8_0", "on"), ("f16", "off")])
def test_a_q8_0_kv_cache_is_judged_where_it_is_written_and_read(tmp_path: Path, type_v: str, flash_attn: str) -> None:
    """q8_0 K (and V, which libllama allows only with flash attention): every SET_ROWS into the cache is
    judged block by block against the golden's q8_0 quantizer, and the attention reads the stored blocks."""
    result = _run(tmp_path, "--cache-type-k", "q8_0", "--cache-type-v", type_v, "--flash-attn", flash_attn)
    nodes = result["nodes"]
    writes = [n for n in nodes if n["op"] == "SET_ROWS"]
    q8_writes = [n for n in writes if n["shapes"].endswith("-> q8_0[64,256,1,1]")]
    # 2 layers x 3 steps of K writes, and of V writes where V is q8_0 too
    assert len(q8_writes) == 6 * (2 if type_v == "q8_0" else 1), [n["shapes"] for n in writes]
    assert {n["name"].split(" ")[0] for n in q8_writes} == ({"cache_k_l0", "cache_k_l1", "cache_v_l0", "cache_v_l1"}
                                                            if type_v == "q8_0" else {"cache_k_l0", "cache_k_l1"})
    assert all(n["status"] == "pass" and n["case_id"].startswith("SET_ROWS(type0=q8_0") for n in q8_writes)
    assert {n["step"] for n in q8_writes} == {0, 1, 2}
    # the products or the fused attention that read the q8_0 K cache are judged on the stored blocks
    readers = [n for n in nodes if n["op"] in ("MUL_MAT", "FLASH_ATTN_EXT") and "q8_0[32,256,2,1]" in n["shapes"]]
    assert {n["op"] for n in readers} == {"FLASH_ATTN_EXT" if flash_attn == "on" else "MUL_MAT"}
    assert len(readers) == 6 and all(n["status"] == "pass" for n in readers), [n["case_id"][:90] for n in readers]


def test_a_context_shift_ropes_the_k_cache_in_place_and_is_judged(tmp_path: Path) -> None:
    """--ctx 8 with a 6-token prompt: the third decode step finds no cell free, the run removes half of the
    tokens after the first and moves the rest back, and libllama's next decode first ropes each layer's K
    cache in place (a ROPE on a view of the cache, F16 in and out): those nodes are captured and judged."""
    result = _run(tmp_path, "--ctx", "8", "--decode", "3")
    nodes = result["nodes"]
    shift = [n for n in nodes if n["op"] == "ROPE" and n["name"].startswith("cache_k_l")]
    assert [n["name"].split(" ")[0] for n in shift] == ["cache_k_l0", "cache_k_l1"], [n["name"] for n in shift]
    assert all(n["status"] == "pass" and n["step"] == 3 for n in shift)
    assert all(n["shapes"].startswith("f16[16,2,256,1], i32[256,1,1,1] -> f16[16,2,256,1]") for n in shift), shift
    # the shift graph runs before the step's own graph: it comes right before the step's token embedding
    step3 = [n for n in nodes if n["step"] == 3]
    assert [n["op"] for n in step3[:3]] == ["ROPE", "ROPE", "GET_ROWS"]
    assert len(result["fed_tokens"]) == 4 and all(len(t) == 1 for t in result["fed_tokens"][1:])


def test_two_sequences_in_one_batch_pass_node_by_node(tmp_path: Path) -> None:
    """--parallel 2 --decode 4: sequence 0's 6-token prompt and sequence 1's 5 in one prefill batch of 11, then a
    token of each per step; midway (step 3) sequence 1 is removed and a new 4-token one takes its cells."""
    result = _run(tmp_path, "--parallel", "2", "--decode", "4")
    fed = result["fed_tokens"]
    assert [len(t) for t in fed] == [11, 2, 2, 5, 2], fed
    assert fed[0] == [1, 5, 9, 17, 33, 65, 1, 5, 9, 17, 33] and fed[3][1:] == [65, 33, 17, 9]
    nodes = result["nodes"]
    # every step's graph is one batch holding both sequences' tokens: its nodes carry a row per token
    embd = [n for n in nodes if n["op"] == "GET_ROWS" and n["name"] == "embd"]
    assert [n["shapes"].split(" -> ")[1] for n in embd] == [f"f32[64,{len(t)},1,1]" for t in fed]
    attention = [n for n in nodes if n["op"] == "SOFT_MAX"]
    assert len(attention) == 2 * len(fed) and all(n["status"] == "pass" for n in attention)
    # each decode step fed a greedy token to each sequence
    assert {(d["step"], d["seq"]) for d in result["decode"]} == {(1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (4, 0), (4, 1)}

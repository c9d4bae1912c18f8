"""Model blocks: one llama layer, built as llama.cpp's ``build_attn``/``build_ffn`` build it.

``llama_layer``: attention norm, Q/K/V projections (F16, Q8_0 or Q4_0 weights), RoPE on Q and K,
K and V written into F16 caches of ``kv`` ≥ 32 slots with SET_ROWS at the tokens' positions (the
caches hold an earlier prompt's entries), attention over the cache through FLASH_ATTN_EXT
(``attn=fa``) or K·Q → SOFT_MAX(mask, scale) → V·KQ (``attn=softmax``, V read transposed), the
output projection and residual add, then the FFN norm, SwiGLU FFN (gate and up, SWIGLU, down) and
the second residual. ``n`` tokens: 1 is decode, more is prefill; they sit at positions ``p0 ..
p0+n−1`` of the cache, and the causal mask lets token i see slots 0 .. p0+i.

The views llama.cpp takes (Q/K reshaped to heads, the cache seen as heads × slots, K and Q permuted
for the attention) are RESHAPE and PERMUTE nodes, built as ggml views; where llama.cpp makes a view
contiguous (V transposed, the attention output before the flattening reshape) there is a CONT node.
"""

from __future__ import annotations

import math

from golden.case import Ne, TensorSpec
from golden.graphs.graph import BLOCK_NMSE_FACTOR, CaseParams, Graph, GraphInput, GraphNode, Pattern
from golden.graphs.patterns.state import rope_params
from golden.spec import P

PATTERNS: list[Pattern] = []
MASK_PAD = 64  # mask rows padded as releases before 0.20 require (GGML_KQ_MASK_PAD); later ones ignore them


def _layer_shape(case: CaseParams) -> tuple[int, int, int, int, int, int, int]:
    hd, heads, n, kv, p0, ff = (case.param(k) for k in ("hd", "heads", "n", "kv", "p0", "ff"))
    wt = case.param("type")
    if kv < 32 or not 0 <= p0 or p0 + n > kv or n < 1:
        raise ValueError(f"llama_layer: need kv ≥ 32 and 0 ≤ p0, p0 + n ≤ kv (kv={kv}, p0={p0}, n={n})")
    if hd % 2 or hd < 2 or heads < 1 or ff < 1:
        raise ValueError("llama_layer: hd must be even, heads and ff ≥ 1")
    d = hd * heads
    if wt in ("q4_0", "q8_0") and (d % 32 or ff % 32):
        raise ValueError(f"llama_layer: {wt} weights need hd·heads ({d}) and ff ({ff}) multiples of 32")
    if case.param("attn") not in ("fa", "softmax"):
        raise ValueError(f"llama_layer: attn must be fa or softmax, not {case.param('attn')!r}")
    return hd, heads, n, kv, p0, ff, d


def _mask(n: int, kv: int, p0: int, alibi: bool = False) -> tuple[float, ...]:
    """llama.cpp's causal KQ mask: token i (at position p0 + i) sees slots 0 .. p0 + i, 0 there (ALiBi:
    −|p0 + i − j|, which the slope scales), −inf elsewhere and in the padding rows."""
    rows = max(MASK_PAD, n)
    return tuple((-float(abs(p0 + i - j)) if alibi else 0.0) if i < n and j <= p0 + i else -math.inf
                 for i in range(rows) for j in range(kv))


def _llama_layer(case: CaseParams) -> Graph:
    hd, heads, n, kv, p0, ff, d = _layer_shape(case)
    wt, eps = case.param("type"), case.param("eps")
    rope = rope_params(case, 1.0, 0.0)
    act: Ne = (d, n, 1, 1)
    heads_ne: Ne = (hd, heads, n, 1)
    cache_ne: Ne = (d, kv, 1, 1)
    positions = tuple(range(p0, p0 + n))
    inputs = (
        GraphInput("x", TensorSpec("f32", act, name="x")),
        GraphInput("attn_norm", TensorSpec("f32", (d, 1, 1, 1), name="attn_norm")),
        GraphInput("wq", TensorSpec(wt, (d, d, 1, 1), name="wq"), scale=1 / math.sqrt(d)),
        GraphInput("pos", TensorSpec("i32", (n, 1, 1, 1), name="pos"), values=positions),
        GraphInput("wk", TensorSpec(wt, (d, d, 1, 1), name="wk"), scale=1 / math.sqrt(d)),
        GraphInput("wv", TensorSpec(wt, (d, d, 1, 1), name="wv"), scale=1 / math.sqrt(d)),
        GraphInput("k_cache", TensorSpec("f16", cache_ne, name="k_cache"), written=True),
        GraphInput("slots", TensorSpec("i64", (n, 1, 1, 1), name="slots"), values=positions),
        GraphInput("v_cache", TensorSpec("f16", cache_ne, name="v_cache"), written=True),
        GraphInput("mask", TensorSpec("f16", (kv, max(MASK_PAD, n), 1, 1), name="mask"),
                   values=_mask(n, kv, p0)),
        GraphInput("wo", TensorSpec(wt, (d, d, 1, 1), name="wo"), scale=1 / math.sqrt(d)),
        GraphInput("ffn_norm", TensorSpec("f32", (d, 1, 1, 1), name="ffn_norm")),
        GraphInput("w_gate", TensorSpec(wt, (d, ff, 1, 1), name="w_gate"), scale=1 / math.sqrt(d)),
        GraphInput("w_up", TensorSpec(wt, (d, ff, 1, 1), name="w_up"), scale=1 / math.sqrt(d)),
        GraphInput("w_down", TensorSpec(wt, (ff, d, 1, 1), name="w_down"), scale=1 / math.sqrt(ff)),
    )
    swap12 = (("axes", (0, 2, 1, 3)),)
    scale = 1.0 / math.sqrt(hd)
    nodes = [
        GraphNode("norm", "RMS_NORM", ("x",), act, (("eps", eps),)),
        GraphNode("attn_in", "MUL", ("norm", "attn_norm"), act),
        GraphNode("q", "MUL_MAT", ("wq", "attn_in"), act),
        GraphNode("q_heads", "RESHAPE", ("q",), heads_ne, (("ne", heads_ne),)),
        GraphNode("q_rope", "ROPE", ("q_heads", "pos"), heads_ne, rope),
        GraphNode("k", "MUL_MAT", ("wk", "attn_in"), act),
        GraphNode("k_heads", "RESHAPE", ("k",), heads_ne, (("ne", heads_ne),)),
        GraphNode("k_rope", "ROPE", ("k_heads", "pos"), heads_ne, rope),
        GraphNode("v", "MUL_MAT", ("wv", "attn_in"), act),
        GraphNode("k_rows", "RESHAPE", ("k_rope",), act, (("ne", act),)),
        GraphNode("k_store", "SET_ROWS", ("k_cache", "k_rows", "slots"), cache_ne, dst="f16"),
        GraphNode("v_store", "SET_ROWS", ("v_cache", "v", "slots"), cache_ne, dst="f16"),
        GraphNode("k_all", "RESHAPE", ("k_store",), (hd, heads, kv, 1), (("ne", (hd, heads, kv, 1)),), dst="f16"),
        GraphNode("k_attn", "PERMUTE", ("k_all",), (hd, kv, heads, 1), swap12, dst="f16"),
        GraphNode("q_attn", "PERMUTE", ("q_rope",), (hd, n, heads, 1), swap12),
        GraphNode("v_all", "RESHAPE", ("v_store",), (hd, heads, kv, 1), (("ne", (hd, heads, kv, 1)),), dst="f16"),
    ]
    if case.param("attn") == "fa":
        nodes += [
            GraphNode("v_attn", "PERMUTE", ("v_all",), (hd, kv, heads, 1), swap12, dst="f16"),
            GraphNode("kqv", "FLASH_ATTN_EXT", ("q_attn", "k_attn", "v_attn", "mask"), (hd, heads, n, 1),
                      (("scale", scale), ("max_bias", 0.0), ("logit_softcap", 0.0), ("prec", "f32"),
                       ("mask", True), ("sinks", False))),
        ]
    else:
        nodes += [
            GraphNode("kq", "MUL_MAT", ("k_attn", "q_attn"), (kv, n, heads, 1)),
            GraphNode("kq_soft", "SOFT_MAX", ("kq", "mask"), (kv, n, heads, 1),
                      (("scale", scale), ("max_bias", 0.0), ("mask", True), ("sinks", False))),
            GraphNode("v_trans", "PERMUTE", ("v_all",), (kv, hd, heads, 1), (("axes", (1, 2, 0, 3)),), dst="f16"),
            GraphNode("v_cont", "CONT", ("v_trans",), (kv, hd, heads, 1), dst="f16"),  # as llama.cpp: cont(V^T)
            GraphNode("kqv_heads", "MUL_MAT", ("v_cont", "kq_soft"), (hd, n, heads, 1)),
            GraphNode("kqv_view", "PERMUTE", ("kqv_heads",), (hd, heads, n, 1), swap12),
            GraphNode("kqv", "CONT", ("kqv_view",), (hd, heads, n, 1)),
        ]
    nodes += [
        GraphNode("attn_flat", "RESHAPE", ("kqv",), act, (("ne", act),)),
        GraphNode("attn_out", "MUL_MAT", ("wo", "attn_flat"), act),
        GraphNode("resid", "ADD", ("attn_out", "x"), act),
        GraphNode("ffn_normed", "RMS_NORM", ("resid",), act, (("eps", eps),)),
        GraphNode("ffn_in", "MUL", ("ffn_normed", "ffn_norm"), act),
        GraphNode("gate", "MUL_MAT", ("w_gate", "ffn_in"), (ff, n, 1, 1)),
        GraphNode("up", "MUL_MAT", ("w_up", "ffn_in"), (ff, n, 1, 1)),
        GraphNode("glu", "SWIGLU", ("gate", "up"), (ff, n, 1, 1), form="split"),
        GraphNode("down", "MUL_MAT", ("w_down", "glu"), act),
        GraphNode("out", "ADD", ("down", "resid"), act),
    ]
    spans = (("norm", "attn_in"), ("q_heads", "q_rope"), ("k_rope", "k_rows", "k_store"),
             ("attn_out", "resid", "ffn_normed", "ffn_in"), ("gate", "up", "glu"))
    return Graph(inputs, tuple(nodes), ("out",), spans, nmse_vs_blocked=BLOCK_NMSE_FACTOR)


PATTERNS.append(Pattern(
    "llama_layer",
    {"type": P("weight dtype: f16, q8_0 or q4_0", str), "hd": P("head dim", int), "heads": P("heads", int),
     "n": P("tokens: 1 is decode, more is prefill", int), "kv": P("KV cache slots (≥ 32)", int),
     "p0": P("position (and cache slot) of the first token", int), "ff": P("FFN width", int),
     "attn": P("fa (FLASH_ATTN_EXT) or softmax (K·Q, SOFT_MAX, V·KQ)", str), "eps": P("RMS_NORM epsilon"),
     "mode": P("RoPE mode: 0 NORMAL or 2 NEOX", int), "n_dims": P("RoPE rotated dims (even, ≤ hd)", int),
     "freq_base": P("RoPE θ base")},
    _llama_layer, ("f16", "q8_0", "q4_0"),
    notes="one llama decoder layer over a KV cache",
    fused_by="Vulkan: RMS_NORM+MUL, ROPE+VIEW+SET_ROWS; CUDA: gate/up"))


# ---- one MoE FFN -----------------------------------------------------------------------------------------

def _moe_ffn(case: CaseParams) -> Graph:
    """llama.cpp's build_moe_ffn with softmax gating: router logits → SOFT_MAX → ARGSORT (desc) → the
    top-k view → GET_ROWS of the probabilities (the weights); gate and up MUL_MAT_IDs → SWIGLU → down
    MUL_MAT_ID; each expert's output times its weight, the k slices added up.

    The router logits are a graph input (as test-backend-ops' test_topk_moe takes them), each row a
    shuffle of evenly spaced values. Computed by a router MUL_MAT (the first version), two logits fell
    within their bounds in 14 of 132 ci-profile cases on ggml:CPU, and top-k is then a coin toss that
    no bound can judge (ARGSORT's propagation rule then allows any index there, and the row is not judged)."""
    d, ff, e, k, n, wt = (case.param(p) for p in ("d", "ff", "e", "k", "n", "type"))
    if not 1 <= k <= e or n < 1 or d < 1 or ff < 1:
        raise ValueError(f"moe_ffn: need 1 ≤ k ≤ e and n, d, ff ≥ 1 (k={k}, e={e})")
    if wt in ("q4_0", "q8_0") and (d % 32 or ff % 32):
        raise ValueError(f"moe_ffn: {wt} experts need d ({d}) and ff ({ff}) multiples of 32")
    act: Ne = (d, n, 1, 1)
    inputs = (
        GraphInput("logits", TensorSpec("f32", (e, n, 1, 1), name="logits"), spaced=True),
        GraphInput("x", TensorSpec("f32", act, name="x")),
        GraphInput("gate_exps", TensorSpec(wt, (d, ff, e, 1), name="gate_exps"), scale=1 / math.sqrt(d)),
        GraphInput("up_exps", TensorSpec(wt, (d, ff, e, 1), name="up_exps"), scale=1 / math.sqrt(d)),
        GraphInput("down_exps", TensorSpec(wt, (ff, d, e, 1), name="down_exps"), scale=1 / math.sqrt(ff)),
    )
    i32 = 4
    nodes = [
        GraphNode("probs", "SOFT_MAX", ("logits",), (e, n, 1, 1),
                  (("scale", 1.0), ("max_bias", 0.0), ("mask", False), ("sinks", False))),
        GraphNode("order", "ARGSORT", ("probs",), (e, n, 1, 1), (("order", "desc"),), dst="i32"),
        GraphNode("selected", "VIEW", ("order",), (k, n, 1, 1),
                  (("ne", (k, n, 1, 1)), ("nb", (i32, i32 * e, i32 * e * n, i32 * e * n)), ("offset", 0)), dst="i32"),
        GraphNode("probs3", "RESHAPE", ("probs",), (1, e, n, 1), (("ne", (1, e, n, 1)),)),
        GraphNode("weights", "GET_ROWS", ("probs3", "selected"), (1, k, n, 1)),
        GraphNode("x3", "RESHAPE", ("x",), (d, 1, n, 1), (("ne", (d, 1, n, 1)),)),
        GraphNode("gate", "MUL_MAT_ID", ("gate_exps", "x3", "selected"), (ff, k, n, 1)),
        GraphNode("up", "MUL_MAT_ID", ("up_exps", "x3", "selected"), (ff, k, n, 1)),
        GraphNode("glu", "SWIGLU", ("gate", "up"), (ff, k, n, 1), form="split"),
        GraphNode("experts", "MUL_MAT_ID", ("down_exps", "glu", "selected"), (d, k, n, 1)),
        GraphNode("weighted", "MUL", ("experts", "weights"), (d, k, n, 1)),
    ]
    f32 = 4
    for i in range(k):
        nodes.append(GraphNode(f"slot{i}", "VIEW", ("weighted",), act,
                               (("ne", act), ("nb", (f32, f32 * d * k, f32 * d * k * n, f32 * d * k * n)),
                                ("offset", f32 * d * i))))
    total = "slot0"
    for i in range(1, k):
        nodes.append(GraphNode(f"sum{i}", "ADD", (total, f"slot{i}"), act))
        total = f"sum{i}"
    spans = (("probs", "order", "selected", "probs3", "weights"), ("gate", "up", "glu"))
    return Graph(inputs, tuple(nodes), (total,), spans, nmse_vs_blocked=BLOCK_NMSE_FACTOR)


PATTERNS.append(Pattern(
    "moe_ffn",
    {"type": P("expert weight dtype: f16, q8_0 or q4_0", str), "d": P("model width", int),
     "ff": P("expert FFN width", int), "e": P("experts", int), "k": P("experts used per token", int),
     "n": P("tokens: 1 is decode, more is prefill", int)},
    _moe_ffn, ("f16", "q8_0", "q4_0"),
    notes="one mixture-of-experts FFN (softmax router, top-k, SwiGLU experts)",
    fused_by="Vulkan/CUDA: the TOPK_MOE chain; Vulkan: MUL_MAT_ID+MUL"))

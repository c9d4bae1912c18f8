"""Attention over a KV cache as llama.cpp's ``build_attn_mha`` builds it without flash attention.

::

    q_attn = PERMUTE(q, 0,2,1,3)                   [hd, n, heads]     (q as ROPE leaves it: [hd, heads, n])
    k_attn = PERMUTE(k_cache, 0,2,1,3)             [hd, kv, kv_heads] (the cache seen as heads × slots)
    kq     = MUL_MAT(k_attn, q_attn)               [kv, n, heads]     (heads / kv_heads query heads share a
                                                                       K head: GQA by MUL_MAT's broadcast)
    softcap (Gemma-2, Grok): SCALE(kq, 1/cap) → TANH → SCALE(cap)
    kq     = SOFT_MAX(kq, mask, scale = 1/sqrt(hd), max_bias (ALiBi)) (+ sinks: one logit per head, gpt-oss)
    kqv    = MUL_MAT(v_trans, kq)                  [hd, n, heads]     (the V cache stored transposed)
    out    = CONT(PERMUTE(kqv, 0,2,1,3))           [hd, heads, n]

Decode is one token (n = 1), prefill many; the tokens sit at slots ``p0 .. p0+n−1`` of a cache of
``kv`` slots holding an earlier prompt, and the causal mask lets token i see slots 0 .. p0+i (rows
padded to 64, as releases before 0.20 require); under ALiBi a visible slot holds −|i − j| (llama.cpp's
``use_alibi`` mask), which SOFT_MAX scales by the head's slope. The softcap's SCALE→TANH→SCALE is the span
CUDA fuses.

``flash_attention`` is the same attention with ``flash_attn`` on, as ``build_attn_mha`` builds it then::

    mask_f16 = CPY(mask)                           llama.cpp's F32 KQ mask cast to F16 (ggml_cast)
    out      = FLASH_ATTN_EXT(PERMUTE(q), PERMUTE(k_cache), PERMUTE(v_cache), mask_f16, 1/sqrt(hd),
                              max_bias, softcap) (+ sinks), prec f32     [hd, heads, n]
    out_flat = RESHAPE(out)                        [hd·heads, n]

V is read as stored (not transposed); the mask is the one above, and the DFS over the output visits it
after Q, K and V.
"""

from __future__ import annotations

import math

from golden.case import Ne, TensorSpec
from golden.graphs.graph import CaseParams, Graph, GraphInput, GraphNode, Pattern
from golden.graphs.patterns.blocks import MASK_PAD, _mask
from golden.spec import P

PATTERNS: list[Pattern] = []
SWAP12 = (("axes", (0, 2, 1, 3)),)


def _attention(case: CaseParams) -> Graph:
    hd, heads, kv_heads, n, kv, p0 = (case.param(k) for k in ("hd", "heads", "kv_heads", "n", "kv", "p0"))
    cache, max_bias, cap, sinks = case.param("type"), case.param("max_bias"), case.param("softcap"), case.param("sinks")
    _check_heads("attention", hd, heads, kv_heads, n, kv, p0)
    if not (max_bias >= 0 and cap >= 0 and isinstance(sinks, bool)):
        raise ValueError("attention: max_bias and softcap are ≥ 0 (0: off), sinks True or False")
    inputs = [
        GraphInput("q", TensorSpec("f32", (hd, heads, n, 1), name="q")),
        GraphInput("k_cache", TensorSpec(cache, (hd, kv_heads, kv, 1), name="k_cache")),
        GraphInput("v_trans", TensorSpec(cache, (kv, hd, kv_heads, 1), name="v_trans")),
        GraphInput("mask", TensorSpec("f16", (kv, max(MASK_PAD, n), 1, 1), name="mask"),
                   values=_mask(n, kv, p0, alibi=max_bias > 0)),
    ]
    scores: Ne = (kv, n, heads, 1)
    nodes = [
        GraphNode("k_attn", "PERMUTE", ("k_cache",), (hd, kv, kv_heads, 1), SWAP12, dst=cache),
        GraphNode("q_attn", "PERMUTE", ("q",), (hd, n, heads, 1), SWAP12),
        GraphNode("kq", "MUL_MAT", ("k_attn", "q_attn"), scores),
    ]
    logits = "kq"
    spans: tuple[tuple[str, ...], ...] = ()
    if cap:
        nodes += [GraphNode("kq_capped", "SCALE", ("kq",), scores, (("s", 1.0 / cap),)),
                  GraphNode("kq_tanh", "TANH", ("kq_capped",), scores),
                  GraphNode("kq_softcap", "SCALE", ("kq_tanh",), scores, (("s", float(cap)),))]
        logits, spans = "kq_softcap", (("kq_capped", "kq_tanh", "kq_softcap"),)
    srcs: tuple[str, ...] = (logits, "mask")
    if sinks:
        inputs.append(GraphInput("sinks", TensorSpec("f32", (heads, 1, 1, 1), name="sinks")))
        srcs += ("sinks",)
    nodes += [
        GraphNode("kq_soft", "SOFT_MAX", srcs, scores, (("scale", 1.0 / math.sqrt(hd)), ("max_bias", float(max_bias)),
                                                         ("mask", True), ("sinks", sinks))),
        GraphNode("kqv", "MUL_MAT", ("v_trans", "kq_soft"), (hd, n, heads, 1)),
        GraphNode("kqv_heads", "PERMUTE", ("kqv",), (hd, heads, n, 1), SWAP12),
        GraphNode("out", "CONT", ("kqv_heads",), (hd, heads, n, 1)),
    ]
    return Graph(tuple(inputs), tuple(nodes), ("out",), spans)


PATTERNS.append(Pattern(
    "attention",
    {"type": P("K and V cache dtype (f16: llama.cpp's default; f32)", str), "hd": P("head dim", int),
     "heads": P("query heads", int), "kv_heads": P("K/V heads (divides heads: GQA; = heads: MHA)", int),
     "n": P("tokens: 1 is decode, more is prefill", int), "kv": P("KV cache slots", int),
     "p0": P("cache slot of the first token (the causal mask's offset)", int),
     "max_bias": P("ALiBi max bias (0: off)"), "softcap": P("attention logit softcap (0: off)"),
     "sinks": P("one sink logit per head in the softmax's denominator", bool)},
    _attention, ("f16", "f32"), notes="attention without flash attention: K·Q → SOFT_MAX(mask, scale) → V·KQ",
    fused_by="CUDA: softcap SCALE+TANH+SCALE"))


def _check_heads(pattern: str, hd: int, heads: int, kv_heads: int, n: int, kv: int, p0: int) -> None:
    if hd < 1 or n < 1 or kv < 1 or not 0 <= p0 <= kv - n:
        raise ValueError(f"{pattern}: need hd, n, kv ≥ 1 and 0 ≤ p0 ≤ kv − n (kv={kv}, p0={p0}, n={n})")
    if kv_heads < 1 or heads % kv_heads:
        raise ValueError(f"{pattern}: kv_heads ({kv_heads}) must divide heads ({heads})")


def _flash_attention(case: CaseParams) -> Graph:
    hd, heads, kv_heads, n, kv, p0 = (case.param(k) for k in ("hd", "heads", "kv_heads", "n", "kv", "p0"))
    cache, max_bias, cap, sinks = case.param("type"), case.param("max_bias"), case.param("softcap"), case.param("sinks")
    _check_heads("flash_attention", hd, heads, kv_heads, n, kv, p0)
    if not (max_bias >= 0 and cap >= 0 and isinstance(sinks, bool)):
        raise ValueError("flash_attention: max_bias and softcap are ≥ 0 (0: off), sinks True or False")
    mask_ne: Ne = (kv, max(MASK_PAD, n), 1, 1)
    inputs = [
        GraphInput("q", TensorSpec("f32", (hd, heads, n, 1), name="q")),
        GraphInput("k_cache", TensorSpec(cache, (hd, kv_heads, kv, 1), name="k_cache")),
        GraphInput("v_cache", TensorSpec(cache, (hd, kv_heads, kv, 1), name="v_cache")),
        GraphInput("mask", TensorSpec("f32", mask_ne, name="mask"), values=_mask(n, kv, p0, alibi=max_bias > 0)),
    ]
    srcs: tuple[str, ...] = ("q_attn", "k_attn", "v_attn", "mask_f16")
    if sinks:
        inputs.append(GraphInput("sinks", TensorSpec("f32", (heads, 1, 1, 1), name="sinks")))
        srcs += ("sinks",)
    flat: Ne = (hd * heads, n, 1, 1)
    nodes = (
        GraphNode("q_attn", "PERMUTE", ("q",), (hd, n, heads, 1), SWAP12),
        GraphNode("k_attn", "PERMUTE", ("k_cache",), (hd, kv, kv_heads, 1), SWAP12, dst=cache),
        GraphNode("v_attn", "PERMUTE", ("v_cache",), (hd, kv, kv_heads, 1), SWAP12, dst=cache),
        GraphNode("mask_f16", "CPY", ("mask",), mask_ne, (("dst_ne", mask_ne),), dst="f16"),
        GraphNode("out", "FLASH_ATTN_EXT", srcs, (hd, heads, n, 1),
                  (("scale", 1.0 / math.sqrt(hd)), ("max_bias", float(max_bias)), ("logit_softcap", float(cap)),
                   ("prec", "f32"), ("mask", True), ("sinks", sinks))),
        GraphNode("out_flat", "RESHAPE", ("out",), flat, (("ne", flat),)),
    )
    return Graph(tuple(inputs), nodes, ("out_flat",))


PATTERNS.append(Pattern(
    "flash_attention",
    {"type": P("K and V cache dtype (f16: llama.cpp's default; f32)", str), "hd": P("head dim", int),
     "heads": P("query heads", int), "kv_heads": P("K/V heads (divides heads: GQA; = heads: MHA)", int),
     "n": P("tokens: 1 is decode, more is prefill", int), "kv": P("KV cache slots", int),
     "p0": P("cache slot of the first token (the causal mask's offset)", int),
     "max_bias": P("ALiBi max bias (0: off)"), "softcap": P("attention logit softcap (0: off)"),
     "sinks": P("one sink logit per head in the softmax's denominator", bool)},
    _flash_attention, ("f16", "f32"),
    notes="attention with flash attention: the F32 KQ mask cast to F16, FLASH_ATTN_EXT (prec f32)"))

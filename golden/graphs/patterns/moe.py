"""TOPK_MOE: a mixture-of-experts router, the chain ggml-vulkan and ggml-cuda fuse into one kernel.

As llama.cpp's ``build_moe_ffn`` builds it (node order from ``ggml_build_forward_expand`` over the
weights, so it is the order in Vulkan's ``topk_moe_*`` op lists)::

    logits   = MUL_MAT(router, x)          (router=mul_mat: the layer input by the router weight;
                                            router=input: the logits a graph input, as test_topk_moe)
    probs    = SOFT_MAX(logits) | SIGMOID(logits) | logits (softmax_weight) | SQRT(SOFTPLUS(logits))
                                                                         [n_expert, n_tokens]
    sel      = probs                       or ADD(probs, expert_bias)    (bias=True, any gating: llama.cpp
                                            adds exp_probs_b to whatever probs is)
    selected = VIEW(ARGSORT(sel, desc), first k of each row)             [k, n_tokens] I32
    weights  = GET_ROWS(RESHAPE(probs, [1, n_expert, n_tokens]), selected)  [1, k, n_tokens]
    softmax_weight (the late softmax, Qwen3/gpt-oss): RESHAPE to [k, n_tokens], SOFT_MAX, RESHAPE back
    norm:      RESHAPE to [k, n_tokens], SUM_ROWS, CLAMP(6.1035e-5, inf), DIV, RESHAPE back
    scale:     SCALE(weights, s)

The outputs are ``weights`` and ``selected`` (what build_moe_ffn hands to the expert FFN). With
``router=input`` the graph allocator run also keeps the ARGSORT that ``selected`` views (flagged
output, as before); with ``router=mul_mat`` it flags only the two outputs, as llama.cpp leaves the
ARGSORT to the allocator: its block is freed after its last reader, and ``selected`` is judged in
the other two runs. The views are graph nodes. Decode is one token, prefill many: Vulkan's overlap
bug (llama.cpp #19768) needed more than one row.
"""

from __future__ import annotations

from golden.case import TensorSpec
from golden.graphs.graph import CaseParams, Graph, GraphInput, GraphNode, Pattern
from golden.spec import P

PATTERNS: list[Pattern] = []
GATINGS = ("softmax", "sigmoid", "softmax_weight", "sqrt_softplus")  # llama.cpp's expert gating functions
ROUTERS = ("input", "mul_mat")  # where the logits come from: a graph input, or llama.cpp's router MUL_MAT
_SOFT_MAX_PARAMS = (("scale", 1.0), ("max_bias", 0.0), ("mask", False), ("sinks", False))
CLAMP_MIN = 6.103515625e-5  # llama.cpp's clamp of the weights' sum before the division (2^-14)


def _topk_moe(case: CaseParams) -> Graph:
    n_expert, k, n_tokens = case.param("n_expert"), case.param("k"), case.param("n_tokens")
    gating, with_bias, norm, scale = case.param("gating"), case.param("bias"), case.param("norm"), case.param("scale")
    if gating not in GATINGS:
        raise ValueError(f"topk_moe: gating must be one of {', '.join(GATINGS)}, not {gating!r}")
    if not 1 <= k <= n_expert:
        raise ValueError(f"topk_moe: k must be 1..n_expert ({n_expert}), not {k}")
    router, n_embd = case.param("router", "input"), case.param("n_embd")
    if router not in ROUTERS:
        raise ValueError(f"topk_moe: router must be one of {', '.join(ROUTERS)}, not {router!r}")
    if (router == "mul_mat") != (n_embd is not None) or (n_embd is not None and not n_embd >= 1):
        raise ValueError("topk_moe: n_embd (>= 1, the router MUL_MAT's dot-product length) goes with "
                         "router=mul_mat, and only with it")
    if not (isinstance(with_bias, bool) and isinstance(norm, bool)):
        raise ValueError("topk_moe: bias and norm are True or False")
    if not scale > 0:
        raise ValueError(f"topk_moe: scale must be > 0 (1.0: no SCALE node), not {scale!r}")
    logits_ne = (n_expert, n_tokens, 1, 1)
    nodes: list[GraphNode] = []
    if router == "mul_mat":  # the layer input by the router weight (ffn_gate_inp), ~1/sqrt(n_embd) as a model's
        inputs = [GraphInput("router_w", TensorSpec("f32", (n_embd, n_expert, 1, 1), name="router_w"),
                             scale=float(n_embd) ** -0.5),
                  GraphInput("x", TensorSpec("f32", (n_embd, n_tokens, 1, 1), name="x"))]
        nodes.append(GraphNode("logits", "MUL_MAT", ("router_w", "x"), logits_ne))
    else:
        inputs = [GraphInput("logits", TensorSpec("f32", logits_ne, name="logits"))]
    probs = "logits" if gating == "softmax_weight" else "probs"
    if gating == "softmax":
        nodes.append(GraphNode("probs", "SOFT_MAX", ("logits",), logits_ne, _SOFT_MAX_PARAMS))
    elif gating == "sigmoid":
        nodes.append(GraphNode("probs", "SIGMOID", ("logits",), logits_ne))
    elif gating == "sqrt_softplus":
        nodes += [GraphNode("softplus", "SOFTPLUS", ("logits",), logits_ne),
                  GraphNode("probs", "SQRT", ("softplus",), logits_ne)]
    # softmax_weight: select on the raw logits, softmax over the k chosen below
    nodes.append(GraphNode("probs_3d", "RESHAPE", (probs,), (1, n_expert, n_tokens, 1),
                           (("ne", (1, n_expert, n_tokens, 1)),), dst="f32"))
    selection = probs
    if with_bias:
        inputs.append(GraphInput("expert_bias", TensorSpec("f32", (n_expert, 1, 1, 1), name="expert_bias")))
        nodes.append(GraphNode("biased", "ADD", (probs, "expert_bias"), logits_ne))
        selection = "biased"
    nodes += [GraphNode("order", "ARGSORT", (selection,), logits_ne, (("order", "desc"),), dst="i32"),
              GraphNode("selected", "VIEW", ("order",), (k, n_tokens, 1, 1),
                        (("ne", (k, n_tokens, 1, 1)), ("nb", (4, 4 * n_expert, 4 * n_expert * n_tokens,
                                                              4 * n_expert * n_tokens)), ("offset", 0)), dst="i32"),
              GraphNode("weights", "GET_ROWS", ("probs_3d", "selected"), (1, k, n_tokens, 1))]
    last = "weights"
    if gating == "softmax_weight":
        flat = (k, n_tokens, 1, 1)
        nodes += [GraphNode("logits_k", "RESHAPE", ("weights",), flat, (("ne", flat),)),
                  GraphNode("weights_soft", "SOFT_MAX", ("logits_k",), flat, _SOFT_MAX_PARAMS),
                  GraphNode("weights_soft_3d", "RESHAPE", ("weights_soft",), (1, k, n_tokens, 1),
                            (("ne", (1, k, n_tokens, 1)),))]
        last = "weights_soft_3d"
    if norm:
        flat = (k, n_tokens, 1, 1)
        nodes += [GraphNode("weights_2d", "RESHAPE", (last,), flat, (("ne", flat),)),
                  GraphNode("weights_sum", "SUM_ROWS", ("weights_2d",), (1, n_tokens, 1, 1)),
                  GraphNode("sum_clamped", "CLAMP", ("weights_sum",), (1, n_tokens, 1, 1),
                            (("min", CLAMP_MIN), ("max", float("inf")))),
                  GraphNode("weights_norm", "DIV", ("weights_2d", "sum_clamped"), flat),
                  GraphNode("weights_3d", "RESHAPE", ("weights_norm",), (1, k, n_tokens, 1),
                            (("ne", (1, k, n_tokens, 1)),))]
        last = "weights_3d"
    if scale != 1.0:
        nodes.append(GraphNode("weights_scaled", "SCALE", (last,), (1, k, n_tokens, 1), (("s", float(scale)),)))
        last = nodes[-1].name
    span = tuple(n.name for n in nodes if n.op != "MUL_MAT")  # the fused kernels take the logits as their input
    return Graph(tuple(inputs), tuple(nodes), (last, "selected"), (span,), hold_view_sources=router == "input")


PATTERNS.append(Pattern(
    "topk_moe", {"type": P("dtype of the logits (f32: what the fused kernels take)", str),
                 "n_expert": P("experts (logits per token)", int), "k": P("experts used per token", int),
                 "n_tokens": P("tokens: 1 is decode, more is prefill", int),
                 "gating": P("softmax, sigmoid, softmax_weight (softmax over the k chosen logits) or "
                             "sqrt_softplus", str),
                 "bias": P("select on probs + a per-expert bias (exp_probs_b, DeepSeek-V3), weigh by probs", bool),
                 "norm": P("divide the k weights by their sum (clamped below at 2^-14)", bool),
                 "scale": P("SCALE the weights by this (1.0: no SCALE node)"),
                 "router": P("input (the logits a graph input, the default) or mul_mat (llama.cpp: MUL_MAT of the "
                             "layer input by the router weight; only the outputs flagged under the graph allocator)",
                             str, optional=True),
                 "n_embd": P("router=mul_mat: the layer input's width", int, optional=True)},
    _topk_moe, ("f32",), notes="MoE router: top-k experts and their weights",
    fused_by="Vulkan (5 modes), CUDA"))


# ---- MUL_MAT_ID (→ ADD_ID) → MUL: the routed experts, their biases, weighted by the router ----------------

def _mul_mat_id_mul(case: CaseParams) -> Graph:
    """``build_moe_ffn``'s ``experts = ggml_mul(mul_mat_id(...), weights)``: each token's n_used expert
    outputs scaled by its router weight; with ``bias=True`` gpt-oss's per-expert bias comes between them
    (``ggml_add_id(experts, bias, ids)`` on the same ids); ``mul=False`` leaves out the weighting (the
    up/gate projections). Vulkan fuses MUL_MAT_ID+ADD_ID(+MUL) and MUL_MAT_ID+MUL."""
    k, m, n_expert, n_used, n_tokens = (case.param(p) for p in ("k", "m", "n_expert", "n_used", "n_tokens"))
    wt, src_rows = case.param("type"), case.param("src_rows")
    with_bias, weighted = case.param("bias", False), case.param("mul", True)
    if not 1 <= n_used <= n_expert:
        raise ValueError(f"mul_mat_id_mul: n_used must be 1..n_expert ({n_expert}), not {n_used}")
    if src_rows not in (1, n_used):
        raise ValueError(f"mul_mat_id_mul: src_rows must be 1 (one input row shared by the slots) or n_used, "
                         f"not {src_rows}")
    if not (isinstance(with_bias, bool) and isinstance(weighted, bool)) or not (with_bias or weighted):
        raise ValueError("mul_mat_id_mul: bias and mul are True or False, and at least one is True "
                         "(MUL_MAT_ID alone is an op case)")
    out = (m, n_used, n_tokens, 1)
    inputs = [GraphInput("experts", TensorSpec(wt, (k, m, n_expert, 1), name="experts")),
              GraphInput("x", TensorSpec("f32", (k, src_rows, n_tokens, 1), name="x")),
              GraphInput("ids", TensorSpec("i32", (n_used, n_tokens, 1, 1), name="ids"), fill=f"topk:{n_expert}")]
    nodes = [GraphNode("n0", "MUL_MAT_ID", ("experts", "x", "ids"), out)]
    if with_bias:
        inputs.append(GraphInput("expert_bias", TensorSpec("f32", (m, n_expert, 1, 1), name="expert_bias")))
        nodes.append(GraphNode(f"n{len(nodes)}", "ADD_ID", (nodes[-1].name, "expert_bias", "ids"), out))
    if weighted:
        inputs.append(GraphInput("weights", TensorSpec("f32", (1, n_used, n_tokens, 1), name="weights")))
        nodes.append(GraphNode(f"n{len(nodes)}", "MUL", (nodes[-1].name, "weights"), out))
    names = [n.name for n in nodes]
    return Graph(tuple(inputs), tuple(nodes), (names[-1],), (tuple(names),))


PATTERNS.append(Pattern(
    "mul_mat_id_mul", {"type": P("expert weight dtype (activations f32)", str), "k": P("dot-product length", int),
                       "m": P("expert output rows", int), "n_expert": P("experts", int),
                       "n_used": P("experts per token", int), "n_tokens": P("tokens: 1 is decode", int),
                       "src_rows": P("input rows per token: 1 (shared, the up/gate input) or n_used", int),
                       "bias": P("ADD_ID of a bias row per expert after MUL_MAT_ID (default False)", bool,
                                 optional=True),
                       "mul": P("MUL by the router weights at the end (default True)", bool, optional=True)},
    _mul_mat_id_mul, ("f32", "f16"), notes="MoE experts (+ per-expert bias) weighted by the router: "
                                           "add_id(mul_mat_id(...), b, ids)·w",
    fused_by="Vulkan (MUL_MAT_ID+ADD_ID(+MUL), MUL_MAT_ID+MUL)"))

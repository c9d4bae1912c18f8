"""Hypothesis strategies for graph cases: one per pattern of ``golden/graphs/patterns/``.

Each draws the pattern's params (shapes with decode = one row and prefill rows, eps, broadcast and
argument-order variants, chain length) and the data; Hypothesis shrinks them towards one row, the
smallest sizes, the plain variants and the shortest chain.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from conformance.strategies import f32, one_in, row_size
from golden.graphs.case import GraphCase
from golden.graphs.patterns.moe import GATINGS
from golden.graphs.registry import patterns

ParamsDraw = Callable[[st.DrawFn, str], list[tuple[str, Any]]]
PARAMS: dict[str, ParamsDraw] = {}
DATA = ("uniform", "dense")  # "special" (NaN/inf) needs the bound's non-finite rules first: not drawn yet


def _params(*names: str) -> Callable[[ParamsDraw], ParamsDraw]:
    def add(fn: ParamsDraw) -> ParamsDraw:
        for name in names:
            PARAMS[name] = fn
        return fn
    return add


def _ne(draw: st.DrawFn, max_ne0: int = 4096) -> tuple[int, int, int, int]:
    ne0 = draw(row_size(max_ne0=max_ne0))
    rows = 1 if not draw(st.booleans()) else draw(st.sampled_from((2, 3, 7, 32)))  # decode, or prefill
    ne2 = 2 if one_in(draw, 6) else 1
    return (ne0, rows, ne2, 1)


def _weight_and_order(draw: st.DrawFn) -> list[tuple[str, Any]]:
    w = draw(st.sampled_from(("row", "full")))
    order = draw(st.sampled_from(("xw", "wx"))) if w == "full" else "xw"
    return [("w", w), ("order", order)]


def _eps(draw: st.DrawFn) -> float:
    return f32(draw(st.sampled_from((1e-6, 1e-5, 1e-3))))


@_params("rms_norm_mul", "rms_norm_mul_add")
def _rms_norm_mul(draw: st.DrawFn, pattern: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = [("ne", _ne(draw)), *_weight_and_order(draw), ("eps", _eps(draw))]
    if pattern.endswith("_add"):
        out.append(("b", draw(st.sampled_from(("row", "full")))))
    return out


@_params("add_rms_norm", "add_rms_norm_mul")
def _add_rms_norm(draw: st.DrawFn, pattern: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = [("ne", _ne(draw)), ("b", draw(st.sampled_from(("full", "row")))),
                                  ("eps", _eps(draw))]
    if pattern.endswith("_mul"):
        out += _weight_and_order(draw)
    return out


@_params("add_chain", "mul_chain")
def _chain(draw: st.DrawFn, pattern: str) -> list[tuple[str, Any]]:
    return [("ne", _ne(draw, 1024)), ("n", draw(st.integers(2, 8))), ("b", draw(st.sampled_from(("full", "row"))))]


def _tokens(draw: st.DrawFn) -> int:
    return 1 if not draw(st.booleans()) else draw(st.integers(2, 16))


@_params("mul_mat_add")
def _mul_mat_add(draw: st.DrawFn, pattern: str) -> list[tuple[str, Any]]:
    bias = draw(st.sampled_from(("vec", "full")))
    order = draw(st.sampled_from(("mb", "bm"))) if bias == "full" else "mb"
    return [("k", draw(row_size(max_ne0=1024))), ("m", draw(st.integers(1, 96))), ("n", _tokens(draw)),
            ("bias", bias), ("order", order)]


@_params("softcap")
def _softcap(draw: st.DrawFn, pattern: str) -> list[tuple[str, Any]]:
    return [("ne", _ne(draw)), ("cap", f32(draw(st.sampled_from((30.0, 50.0, 1.0, 7.5)))))]


@_params("gate_up_glu")
def _gate_up_glu(draw: st.DrawFn, pattern: str) -> list[tuple[str, Any]]:
    return [("k", draw(row_size(max_ne0=1024))), ("f", draw(st.integers(1, 96))), ("n", _tokens(draw))]


# ---- norms.py and misc.py ----------------------------------------------------------------------------

@_params("norm_mul_add")
def _norm_mul_add(draw: st.DrawFn, pattern: str) -> list[tuple[str, Any]]:
    w = draw(st.sampled_from(("row", "full")))
    order = draw(st.sampled_from(("xw", "wx"))) if w == "full" else "xw"
    return [("ne", _ne(draw)), ("w", w), ("b", draw(st.sampled_from(("row", "full")))), ("order", order),
            ("eps", _eps(draw))]


@_params("group_norm_mul_add")
def _group_norm_mul_add(draw: st.DrawFn, pattern: str) -> list[tuple[str, Any]]:
    # [W, H, C, 1] as stable-diffusion's GroupNorm: channels ne2, groups of one or more channels
    channels = draw(st.sampled_from((1, 4, 6, 32)))
    ne = (draw(st.sampled_from((1, 3, 8, 17))), draw(st.sampled_from((1, 2, 8))), channels, 1)
    w = draw(st.sampled_from(("channel", "full")))
    order = draw(st.sampled_from(("xw", "wx"))) if w == "full" else "xw"
    return [("ne", ne), ("n_groups", draw(st.integers(1, channels))), ("w", w),
            ("b", draw(st.sampled_from(("channel", "full")))), ("order", order), ("eps", _eps(draw))]


@_params("unary_mul")
def _unary_mul(draw: st.DrawFn, pattern: str) -> list[tuple[str, Any]]:
    return [("ne", _ne(draw)), ("unary", draw(st.sampled_from(("SILU", "SIGMOID", "SOFTPLUS")))),
            ("b", draw(st.sampled_from(("full", "row"))))]


@_params("ssm_conv_silu")
def _ssm_conv_silu(draw: st.DrawFn, pattern: str) -> list[tuple[str, Any]]:
    return [("d_conv", draw(st.sampled_from((4, 3, 2)))), ("d_inner", draw(st.sampled_from((1, 7, 64, 1536)))),
            ("n_t", _tokens(draw)), ("n_s", draw(st.sampled_from((1, 2)))), ("bias", draw(st.booleans()))]


# ---- moe.py -------------------------------------------------------------------------------------------

# patterns whose suite test is split by one param, one test per value (test_graph[topk_moe-f32-softmax]):
# each value is drawn at the ci profile's full size and a failure names it in the test id
VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {"topk_moe": ("gating", GATINGS)}
VariantDraw = Callable[[st.DrawFn, str], list[tuple[str, Any]]]
VARIANT_PARAMS: dict[str, VariantDraw] = {}


def _topk_moe(draw: st.DrawFn, gating: str) -> list[tuple[str, Any]]:
    # Vulkan fuses power-of-two expert counts up to 512; the others (DeepSeek's 6 of 64 are used, Qwen's 60,
    # 96 and 3 here) must still be right, unfused, also with several tokens under the late softmax
    n_expert = draw(st.sampled_from((8, 6, 32, 128, 60, 4, 256, 3, 96)))
    k = draw(st.sampled_from(tuple(sorted({1, 2, 4, 6, 8} & set(range(1, n_expert + 1))))))
    n_tokens = 1 if not draw(st.booleans()) else draw(st.sampled_from((2, 3, 7, 32, 512)))
    scale = f32(draw(st.sampled_from((1.0, 2.5, 0.5))))
    # router: llama.cpp's form (the logits from the router MUL_MAT, only the outputs flagged) or the logits
    # as a graph input (test-backend-ops' form); bias: exp_probs_b, which llama.cpp adds under any gating
    router = draw(st.sampled_from(("mul_mat", "input")))
    out = [("n_expert", n_expert), ("k", k), ("n_tokens", n_tokens), ("gating", gating), ("bias", draw(st.booleans())),
           ("norm", draw(st.booleans())), ("scale", scale)]
    if router == "mul_mat":
        out += [("router", router), ("n_embd", draw(st.sampled_from((64, 16, 128, 33))))]
    return out


VARIANT_PARAMS["topk_moe"] = _topk_moe


@_params("mul_mat_id_mul")
def _mul_mat_id_mul(draw: st.DrawFn, pattern: str) -> list[tuple[str, Any]]:
    n_expert = draw(st.sampled_from((4, 8, 32, 3)))
    n_used = draw(st.integers(1, min(n_expert, 8)))
    return [("k", draw(row_size(max_ne0=512))), ("m", draw(st.integers(1, 64))), ("n_expert", n_expert),
            ("n_used", n_used), ("n_tokens", _tokens(draw)), ("src_rows", draw(st.sampled_from((1, n_used)))),
            *_moe_tail(draw)]


def _moe_tail(draw: st.DrawFn) -> list[tuple[str, Any]]:
    # MUL_MAT_ID→MUL (the default: left out of the id), →ADD_ID→MUL (gpt-oss) or →ADD_ID alone
    tail = draw(st.sampled_from(("mul", "bias_mul", "bias")))
    return [] if tail == "mul" else [("bias", True)] + ([] if tail == "bias_mul" else [("mul", False)])


# ---- attention.py ----------------------------------------------------------------------------------------

@_params("attention", "flash_attention")
def _attention(draw: st.DrawFn, pattern: str) -> list[tuple[str, Any]]:
    """Heads of 64/128 (and odd sizes), MHA or GQA (2..8 query heads per K/V head), decode or prefill,
    a cache of 32..256 slots with the tokens anywhere in it; ALiBi, softcap and sinks each a third of
    the time."""
    hd = draw(st.sampled_from((64, 128, 32, 80, 8)))
    kv_heads = draw(st.sampled_from((1, 2, 4)))
    heads = kv_heads * draw(st.sampled_from((1, 2, 4, 8)))
    n = 1 if not draw(st.booleans()) else draw(st.sampled_from((2, 3, 7, 32)))
    kv = max(n, draw(st.sampled_from((32, 64, 256, 33))))
    return [("hd", hd), ("heads", heads), ("kv_heads", kv_heads), ("n", n), ("kv", kv),
            ("p0", draw(st.integers(0, kv - n))),
            ("max_bias", f32(8.0 if one_in(draw, 3) else 0.0)),
            ("softcap", f32(draw(st.sampled_from((30.0, 50.0))) if one_in(draw, 3) else 0.0)),
            ("sinks", one_in(draw, 3))]


# ---- rope.py ------------------------------------------------------------------------------------------

def _rope_head(draw: st.DrawFn) -> list[tuple[str, Any]]:
    head_dim = draw(st.sampled_from((64, 128, 2, 80, 256)))
    n_dims = draw(st.sampled_from((head_dim, head_dim // 2))) if head_dim > 2 else head_dim
    n_tokens = 1 if not draw(st.booleans()) else draw(st.sampled_from((2, 5, 32)))
    return [("head_dim", head_dim), ("n_head", draw(st.sampled_from((1, 2, 8)))), ("n_tokens", n_tokens),
            ("mode", draw(st.sampled_from((0, 2)))), ("n_dims", n_dims),
            ("freq_base", f32(draw(st.sampled_from((10000.0, 1000000.0)))))]


def _cache(draw: st.DrawFn, n_tokens: int) -> list[tuple[str, Any]]:
    n_kv = max(n_tokens, draw(st.sampled_from((32, 64, 256))))
    return [("n_kv", n_kv), ("idx", draw(st.sampled_from(("i64", "i32"))))]


@_params("rms_norm_mul_rope")
def _rms_norm_mul_rope(draw: st.DrawFn, pattern: str) -> list[tuple[str, Any]]:
    head = _rope_head(draw)
    set_rows = draw(st.booleans())
    out = [*head, ("eps", _eps(draw)), ("set_rows", set_rows)]
    return out + (_cache(draw, dict(head)["n_tokens"]) if set_rows else [])


@_params("rope_set_rows")
def _rope_set_rows(draw: st.DrawFn, pattern: str) -> list[tuple[str, Any]]:
    head = _rope_head(draw)
    return [*head, *_cache(draw, dict(head)["n_tokens"])]


@_params("rope_inplace_view")
def _rope_inplace_view(draw: st.DrawFn, pattern: str) -> list[tuple[str, Any]]:
    head_dim = draw(st.sampled_from((64, 128, 4, 80)))
    n_rot = draw(st.sampled_from((head_dim // 2, head_dim, 2)))
    return [("head_dim", head_dim), ("n_head", draw(st.sampled_from((1, 2, 8)))),
            ("n_kv", draw(st.sampled_from((32, 1, 7, 256)))), ("n_rot", n_rot), ("mode", draw(st.sampled_from((0, 2)))),
            ("freq_base", f32(draw(st.sampled_from((10000.0, 1000000.0)))))]


class MissingGraphPiece(LookupError):
    """The suite lacks something a registered graph pattern needs (a harness error, never a skip)."""


def has_strategy(pattern: str) -> bool:
    """Whether the suite can draw ``pattern``'s params (one strategy, or one per value of its split param)."""
    return pattern in VARIANT_PARAMS if pattern in VARIANTS else pattern in PARAMS


@functools.cache
def graph_strategy(pattern: str, signature: str, variant: str | None = None) -> st.SearchStrategy[GraphCase]:
    """Graph cases of ``pattern`` whose ``type`` is ``signature``; for a pattern of ``VARIANTS``, those
    whose split param is ``variant`` (None: any of its values)."""
    if pattern not in patterns():
        raise KeyError(f"unknown graph pattern {pattern!r}")
    if not has_strategy(pattern):
        raise MissingGraphPiece(f"graph pattern {pattern}: the suite lacks its parameter strategy: add a function "
                                f"decorated @_params({pattern!r}) to conformance/graph_strategies.py (README \"Adding "
                                f"a graph pattern\", step 2)")
    if pattern in VARIANTS:
        values = VARIANTS[pattern][1]
        if variant is None:
            return st.one_of([graph_strategy(pattern, signature, v) for v in values])
        if variant not in values:
            raise KeyError(f"graph pattern {pattern}: no variant {variant!r} (known: {', '.join(values)})")
    elif variant is not None:
        raise KeyError(f"graph pattern {pattern} has no variants")

    def draw_params(draw: st.DrawFn) -> list[tuple[str, Any]]:
        return VARIANT_PARAMS[pattern](draw, variant) if variant is not None else PARAMS[pattern](draw, pattern)

    @st.composite
    def cases(draw: st.DrawFn) -> GraphCase:
        params = [("type", signature), *draw_params(draw)]
        data = "uniform" if pattern in BLOCK_PATTERNS else draw(st.sampled_from(DATA))
        return GraphCase(pattern, tuple(params), draw(st.integers(0, 2**16)), data)

    return cases()


# ---- state between nodes and between graphs (golden/graphs/patterns/state.py) ----------------------------

def _rope_common(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """A llama-like head (head_dim 64/128 or small), n_dims = head_dim or a part of it, and the
    freq_scale/ext_factor values of linear and YaRN context extension."""
    head_dim = draw(st.sampled_from((8, 64, 128, 2, 32)))
    n_dims = head_dim if not one_in(draw, 4) else max(2, head_dim // 2)
    heads, tokens = draw(st.integers(1, 8)), (1 if not draw(st.booleans()) else draw(st.integers(2, 7)))
    return [("ne", (head_dim, heads, tokens, 1)), ("n_dims", n_dims), ("mode", draw(st.sampled_from((0, 2)))),
            ("freq_base", f32(draw(st.sampled_from((10000.0, 500000.0))))),
            ("freq_scale", f32(draw(st.sampled_from((1.0, 0.25, 0.5))))),
            ("ext_factor", f32(draw(st.sampled_from((0.0, 1.0)))))]


def _position_offset(draw: st.DrawFn) -> int:
    return draw(st.one_of(st.integers(0, 64), st.integers(0, 4096)))


@_params("rope_pair")
def _rope_pair(draw: st.DrawFn, pattern: str) -> list[tuple[str, Any]]:
    p_q = _position_offset(draw)
    p_k = draw(st.integers(0, 4096).filter(lambda p: p != p_q))  # the point: other positions
    return [*_rope_common(draw), ("pos", (p_q, p_k)), ("second", draw(st.sampled_from(("same", "freq_scale",
                                                                                        "ext_factor"))))]


SEQ_LAYOUTS = ("contiguous", "pad[0,1,0,0]", "pad[0,0,1,0]", "offs[3]")  # same shape, other strides


@_params("rope_seq")
def _rope_seq(draw: st.DrawFn, pattern: str) -> list[tuple[str, Any]]:
    return [*_rope_common(draw), ("p0", _position_offset(draw)), ("lay", draw(st.sampled_from(SEQ_LAYOUTS)))]


# what a step of a state sequence changes in the previous graph: nothing but the data, one param, the
# positions or the strides (shapes stay, so a cache keyed on shapes or addresses would hit)
SEQ_STEPS = ("data", "freq_scale", "ext_factor", "positions", "strides", "same")


def _next_graph(draw: st.DrawFn, case: GraphCase) -> GraphCase:
    step = draw(st.sampled_from(SEQ_STEPS))
    params = dict(case.params)
    seed = case.data_seed
    if step == "data":
        seed = draw(st.integers(0, 2**16).filter(lambda s: s != case.data_seed))
    elif step == "freq_scale":
        params["freq_scale"] = f32(draw(st.sampled_from([v for v in (1.0, 0.25, 0.5, 2.0)
                                                        if v != params["freq_scale"]])))
    elif step == "ext_factor":
        params["ext_factor"] = f32(0.0 if params["ext_factor"] else 1.0)
    elif step == "positions":
        params["p0"] = draw(st.integers(0, 4096).filter(lambda p: p != params["p0"]))
    elif step == "strides":
        params["lay"] = draw(st.sampled_from([lay for lay in SEQ_LAYOUTS if lay != params["lay"]]))
    return GraphCase(case.pattern, tuple((k, params[k]) for k, _ in case.params), seed, case.distribution)


@st.composite
def state_sequence(draw: st.DrawFn, max_steps: int = 6) -> list[GraphCase]:
    """A ``rope_seq`` graph, then 1..max_steps graphs each differing from the one before in one thing
    (``SEQ_STEPS``; "same" repeats the graph as it was)."""
    first = draw(graph_strategy("rope_seq", "f32"))
    cases = [first]
    for _ in range(draw(st.integers(1, max_steps))):
        cases.append(_next_graph(draw, cases[-1]))
    return cases


# ---- model blocks (golden/graphs/patterns/blocks.py) ----------------------------------------------------

@_params("llama_layer")
def _llama_layer(draw: st.DrawFn, pattern: str) -> list[tuple[str, Any]]:
    """Small llama-like layers: head dim 16..128, 1..4 heads (hd·heads a multiple of 32 for the
    quantized weights), decode or a short prefill, a cache of 32..96 slots with the tokens anywhere
    in it, both attention paths."""
    hd = draw(st.sampled_from((32, 16, 64, 128)))
    heads = draw(st.sampled_from((2, 1, 4))) if hd >= 32 else draw(st.sampled_from((2, 4)))
    n = 1 if not draw(st.booleans()) else draw(st.integers(2, 7))
    kv = draw(st.sampled_from((32, 48, 96)))
    p0 = draw(st.integers(0, kv - n))
    n_dims = hd if not one_in(draw, 4) else hd // 2
    return [("hd", hd), ("heads", heads), ("n", n), ("kv", kv), ("p0", p0), ("ff", draw(st.sampled_from((64, 96)))),
            ("attn", draw(st.sampled_from(("fa", "softmax")))), ("eps", _eps(draw)),
            ("mode", draw(st.sampled_from((0, 2)))), ("n_dims", n_dims),
            ("freq_base", f32(draw(st.sampled_from((10000.0, 500000.0)))))]


@_params("moe_ffn")
def _moe_ffn(draw: st.DrawFn, pattern: str) -> list[tuple[str, Any]]:
    """Small MoE FFNs: 4..32 experts, 1..8 used (one, and the 2/4/8 of Mixtral, Qwen-MoE, DeepSeek),
    decode or a short prefill."""
    e = draw(st.sampled_from((8, 4, 16, 32)))
    k = min(e, draw(st.sampled_from((2, 1, 4, 8))))
    n = 1 if not draw(st.booleans()) else draw(st.integers(2, 7))
    return [("d", draw(st.sampled_from((64, 32, 128)))), ("ff", draw(st.sampled_from((32, 64, 96)))), ("e", e),
            ("k", k), ("n", n)]


# the blocks' weights are drawn at a model's scale (1/sqrt(fan-in)); "dense" would scale them by 8 and
# give attention logits of hundreds, where a first-order bound says nothing
BLOCK_PATTERNS = ("llama_layer", "moe_ffn")


# ---- block sequences: the same block again with new weights (conformance/test_graph_state.py) -------------

# what a step of a block sequence changes: the weights (a new data seed: every weight, same shapes), and with
# "tokens" the token count (and position) too, as a decode follows a prefill; the weight shapes never change,
# so a weight cache keyed on a tensor's name or address, not invalidated, hits
BLOCK_STEPS = ("weights", "tokens")


def _next_block(draw: st.DrawFn, case: GraphCase) -> GraphCase:
    params = dict(case.params)
    seed = draw(st.integers(0, 2**16).filter(lambda s: s != case.data_seed))
    if draw(st.sampled_from(BLOCK_STEPS)) == "tokens":
        n = params["n"] = draw(st.integers(1, 7))
        if "p0" in params:  # llama_layer: the tokens anywhere in its cache
            params["p0"] = draw(st.integers(0, params["kv"] - n))
    return GraphCase(case.pattern, tuple((k, params[k]) for k, _ in case.params), seed, case.distribution)


@st.composite
def block_sequence(draw: st.DrawFn, pattern: str, max_steps: int = 2) -> list[GraphCase]:
    """A ``pattern`` block (one of ``BLOCK_PATTERNS``, any of its weight dtypes), then 1..max_steps graphs of
    the same block with new weights of the same shapes (``BLOCK_STEPS``)."""
    if pattern not in BLOCK_PATTERNS:
        raise KeyError(f"block_sequence: {pattern!r} is not a block pattern ({', '.join(BLOCK_PATTERNS)})")
    signature = draw(st.sampled_from(patterns()[pattern].signatures))
    cases = [draw(graph_strategy(pattern, signature))]
    for _ in range(draw(st.integers(1, max_steps))):
        cases.append(_next_block(draw, cases[-1]))
    return cases

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


# ---- norms.py and misc.py (issue 23, item 5) ---------------------------------------------------------

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


# ---- moe.py (issue 23, item 5) ------------------------------------------------------------------------

@_params("topk_moe")
def _topk_moe(draw: st.DrawFn, pattern: str) -> list[tuple[str, Any]]:
    # Vulkan fuses power-of-two expert counts up to 512 (others must still be right, unfused)
    n_expert = draw(st.sampled_from((8, 4, 32, 128, 256, 6, 60)))
    k = draw(st.sampled_from(tuple(sorted({1, 2, 4, 6, 8} & set(range(1, n_expert + 1))))))
    n_tokens = 1 if not draw(st.booleans()) else draw(st.sampled_from((2, 3, 7, 32, 512)))
    gating = draw(st.sampled_from(("softmax", "sigmoid")))
    bias = gating == "sigmoid" and draw(st.booleans())
    scale = f32(draw(st.sampled_from((1.0, 2.5, 0.5))))
    return [("n_expert", n_expert), ("k", k), ("n_tokens", n_tokens), ("gating", gating), ("bias", bias),
            ("norm", draw(st.booleans())), ("scale", scale)]


@_params("mul_mat_id_mul")
def _mul_mat_id_mul(draw: st.DrawFn, pattern: str) -> list[tuple[str, Any]]:
    n_expert = draw(st.sampled_from((4, 8, 32, 3)))
    n_used = draw(st.integers(1, min(n_expert, 8)))
    return [("k", draw(row_size(max_ne0=512))), ("m", draw(st.integers(1, 64))), ("n_expert", n_expert),
            ("n_used", n_used), ("n_tokens", _tokens(draw)), ("src_rows", draw(st.sampled_from((1, n_used))))]


# ---- rope.py (issue 23, item 5) -----------------------------------------------------------------------

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


@functools.cache
def graph_strategy(pattern: str, signature: str) -> st.SearchStrategy[GraphCase]:
    """Graph cases of ``pattern`` whose ``type`` is ``signature``."""
    if pattern not in patterns():
        raise KeyError(f"unknown graph pattern {pattern!r}")
    draw_params = PARAMS[pattern]

    @st.composite
    def cases(draw: st.DrawFn) -> GraphCase:
        params = [("type", signature), *draw_params(draw, pattern)]
        return GraphCase(pattern, tuple(params), draw(st.integers(0, 2**16)), draw(st.sampled_from(DATA)))

    return cases()

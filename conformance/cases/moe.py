"""Mixture-of-experts and outer-product ops: MUL_MAT_ID (experts routed by I32 ids), ADD_ID (a bias per
routed expert) and OUT_PROD.

MUL_MAT_ID's kernels switch on the number of tokens (one token: a matrix-vector path; more than 32:
batched or chunked paths) and on how many rows each expert receives, so tokens are drawn as 1,
2..8 and 33..64, n_expert_used 1..8 with src1 rows for every slot or broadcast (a divisor of
n_expert_used), and fewer experts than slots now and then (repeats are forced). The ids are routing
tables a model produces: top-k distinct experts per token, repeats within a token, most tokens on
one expert, unused experts. Sizes stay small: each routed (token, slot) pair is a K-long dot product
whose error model the golden evaluates in float64.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import strategies as st

from conformance.cases.quant import format_row_sizes
from conformance.cases.registry import register
from conformance.data import plain_input
from conformance.strategies import (
    ROW_KEEPING_PERMS,
    finish,
    input_layouts,
    layouts,
    many_weight_rows,
    one_in,
    partial_tiles,
    row_size,
    spec,
)
from golden import catalogue
from golden.case import Layout, OpCase
from golden.dtypes import DRAWN_QUANT_TYPES
from golden.spec import GRID_BLOCKS, GRID_ROWS, Signature

ROUTED_ELEMENTS = 1 << 18  # tokens · slots · N · K: the routed pairs the error model expands
EXPERT_ELEMENTS = 1 << 15
QUANT_K = (32, 64, 96, 256, 512, 544, 1024)
TRANSPOSED_IDS = ((1, 0, 2, 3),)  # ids stored [n_tokens, n_expert_used] and viewed transposed


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def _mul_mat_id(draw: st.DrawFn, op: str, sig: Signature, quantized: bool) -> OpCase:
    if quantized and sig.srcs[0] not in DRAWN_QUANT_TYPES:  # a weight format: its block edges (cases/quant.py)
        k = draw(format_row_sizes(sig.srcs[0]))
    else:
        k = draw(st.sampled_from(QUANT_K)) if quantized else draw(row_size(max_ne0=1024))
    n_used = draw(st.integers(1, 8))
    n_expert = draw(st.one_of(st.integers(n_used, n_used + 4), st.integers(1, 10)))
    tokens = draw(st.one_of(st.just(1), st.integers(2, 8), st.integers(33, 64)))
    b_rows = draw(st.sampled_from([n_used, 1] + _divisors(n_used)))
    n = draw(st.integers(1, max(1, min(16, ROUTED_ELEMENTS // (tokens * n_used * k),
                                       EXPERT_ELEMENTS // (n_expert * k)))))
    tiles = partial_tiles(draw)  # the partial-tile regimes: K and expert rows (few tokens, one or two experts)
    if tiles and not quantized:
        k, n, _ = tiles
        n_expert, n_used, tokens = min(n_expert, 2), min(n_used, 2), min(tokens, 3)
        b_rows = b_rows if n_used % b_rows == 0 else 1
    if quantized:  # ggml-cann takes quantized experts only contiguous
        experts_layout, b_layout = Layout(), draw(st.one_of(st.just(Layout()), layouts(perms=ROW_KEEPING_PERMS)))
    else:
        experts_layout = draw(input_layouts(catalogue.get(op).input_layouts))
        b_layout = draw(layouts(perms=ROW_KEEPING_PERMS))
    inputs = (spec(sig.srcs[0], (k, n, n_expert, 1), experts_layout),
              spec(sig.srcs[1], (k, b_rows, tokens, 1), b_layout),
              spec("i32", (n_used, tokens, 1, 1), draw(layouts(perms=TRANSPOSED_IDS))))
    case = finish(draw, OpCase(op, inputs, dst=sig.dst))
    # the grid-limit regime, drawn last: two experts of vocabulary-many rows, one token routed to one or
    # both (float experts only, as MUL_MAT's)
    grid_k = many_weight_rows(draw)
    if grid_k is None or quantized or tiles:  # a partial-tile case stays one
        return case
    used = min(n_used, 2)
    return replace(case, inputs=(spec(sig.srcs[0], (grid_k, GRID_ROWS + 2, 2, 1)), spec(sig.srcs[1], (grid_k, 1, 1, 1)),
                                 spec("i32", (used, 1, 1, 1))))


def mul_mat_id_case(op: str, sig: Signature) -> st.SearchStrategy[OpCase]:
    return _mul_mat_id(op, sig, quantized=False)


def mul_mat_id_quant_case(op: str, sig: Signature) -> st.SearchStrategy[OpCase]:
    return _mul_mat_id(op, sig, quantized=True)


def routing_table(rng: np.random.Generator, n_expert: int, n_used: int, n_tokens: int) -> np.ndarray:
    """Expert ids (n_tokens, n_used) in one of the shapes routers produce."""
    kind = int(rng.integers(0, 4))
    if kind <= 1 and n_expert >= n_used:  # top-k: distinct experts per token, in score order
        return np.argsort(rng.random((n_tokens, n_expert)), axis=1)[:, :n_used]
    if kind == 2:  # nearly every token on the same one or two experts (a hot expert)
        return rng.integers(0, min(2, n_expert), size=(n_tokens, n_used))
    ids = rng.integers(0, n_expert, size=(n_tokens, n_used))  # repeats within a token
    if n_used > 1:
        ids[:, -1] = ids[:, 0]
    return ids


def mul_mat_id_inputs(case: OpCase, rng: np.random.Generator) -> list[np.ndarray]:
    experts, b, ids = case.inputs
    table = routing_table(rng, experts.ne[2], ids.ne[0], ids.ne[1])
    return [plain_input(rng, experts, case), plain_input(rng, b, case),
            table.astype(np.int32).reshape(ids.np_shape)]


@st.composite
def add_id_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    """MUL_MAT_ID's output shapes (decode, a few tokens, a prefill batch) plus a bias row per expert."""
    n = draw(row_size(max_ne0=1024))
    n_used = draw(st.integers(1, 8))
    n_expert = draw(st.one_of(st.integers(n_used, n_used + 4), st.integers(1, 10)))
    tokens = draw(st.one_of(st.just(1), st.integers(2, 8), st.integers(33, 64)))
    if one_in(draw, 2):  # just past the grid limit (golden.spec.GRID_BLOCKS): rows of 512 or more, more tokens
        n = max(n, 512)
        tokens = max(tokens, GRID_BLOCKS // (n * n_used) + 1)
    inputs = (spec(sig.srcs[0], (n, n_used, tokens, 1), draw(input_layouts(catalogue.get(op).input_layouts))),
              spec(sig.srcs[1], (n, n_expert, 1, 1), draw(layouts(perms=ROW_KEEPING_PERMS))),
              spec("i32", (n_used, tokens, 1, 1), draw(layouts(perms=TRANSPOSED_IDS))))
    return finish(draw, OpCase(op, inputs, dst=sig.dst))


def add_id_inputs(case: OpCase, rng: np.random.Generator) -> list[np.ndarray]:
    a, bias, ids = case.inputs
    table = routing_table(rng, bias.ne[1], ids.ne[0], ids.ne[1])
    return [plain_input(rng, a, case), plain_input(rng, bias, case), table.astype(np.int32).reshape(ids.np_shape)]


@st.composite
def _out_prod(draw: st.DrawFn, op: str, sig: Signature, quantized: bool) -> OpCase:
    m = draw(st.sampled_from(QUANT_K[:5])) if quantized else draw(row_size(max_ne0=512))
    k = draw(row_size(max_ne0=4096))
    a2, a3 = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    r2, r3 = (1, 1) if draw(st.booleans()) else (draw(st.integers(1, 3)), draw(st.integers(1, 2)))
    planes = a2 * r2 * a3 * r3
    n = draw(st.integers(1, max(1, min(48, EXPERT_ELEMENTS // (k * planes), EXPERT_ELEMENTS // (m * planes)))))
    if m * k * a2 * a3 > EXPERT_ELEMENTS:
        k = max(1, EXPERT_ELEMENTS // (m * a2 * a3))
    tiles = partial_tiles(draw)  # the partial-tile regimes: K, the rows of a and of b, unbroadcast
    if tiles and not quantized:
        k, m, n = tiles
        a2 = a3 = r2 = r3 = 1
    a_layout = Layout() if quantized else draw(input_layouts(catalogue.get(op).input_layouts))
    inputs = (spec(sig.srcs[0], (m, k, a2, a3), a_layout),
              spec(sig.srcs[1], (n, k, a2 * r2, a3 * r3), draw(input_layouts(catalogue.InputLayouts.ANY))))
    case = finish(draw, OpCase(op, inputs, dst=sig.dst))
    # the grid-limit regime, drawn last: a 257 × 256 output (65,792 elements) of a short product (float only:
    # a quantized a's rows are whole blocks)
    grid_k = many_weight_rows(draw)
    if grid_k is None or quantized or tiles:  # a partial-tile case stays one
        return case
    return replace(case, inputs=(spec(sig.srcs[0], (257, grid_k, 1, 1)), spec(sig.srcs[1], (256, grid_k, 1, 1))))


def out_prod_case(op: str, sig: Signature) -> st.SearchStrategy[OpCase]:
    return _out_prod(op, sig, quantized=False)


def out_prod_quant_case(op: str, sig: Signature) -> st.SearchStrategy[OpCase]:
    return _out_prod(op, sig, quantized=True)


register("MUL_MAT_ID", group="mul_mat_id", draw=mul_mat_id_case, quantized=mul_mat_id_quant_case,
         make_inputs=mul_mat_id_inputs)
register("ADD_ID", group="add_id", draw=add_id_case, make_inputs=add_id_inputs)
register("OUT_PROD", group="out_prod", draw=out_prod_case, quantized=out_prod_quant_case)

"""Quantized signatures: GET_ROWS from Q, CPY F32/F16 → Q, same-type DUP/CONT of Q, and MUL_MAT with Q
weights (Q4_0/Q8_0, and for GET_ROWS and MUL_MAT every weight format of golden.dtypes.DRAWN_WEIGHT_TYPES).
Quantized tensors keep whole blocks per row."""

from __future__ import annotations

import functools

from hypothesis import strategies as st

from conformance.cases.movement import cpy_destination
from conformance.cases.registry import register
from conformance.strategies import ROW_KEEPING_PERMS, finish, layouts, one_in, spec, weight_names
from golden import dtypes
from golden.case import Layout, OpCase
from golden.dtypes import DRAWN_QUANT_TYPES, QUANT_TYPES
from golden.spec import Signature

FINITE = st.sampled_from(["uniform", "dense", "wide"])
QUANT_ROW_SIZE_LIST = (32, 64, 96, 256, 512, 544, 1024, 2048, 4096)
QUANT_ROW_SIZES = st.sampled_from(QUANT_ROW_SIZE_LIST)


@functools.cache
def _quant_row_sizes(max_elements: int) -> st.SearchStrategy[int]:
    return st.sampled_from([n for n in QUANT_ROW_SIZE_LIST if n <= max_elements])


@st.composite
def quant_shape(draw: st.DrawFn, max_elements: int = 1 << 15) -> tuple[int, int, int, int]:
    ne0 = draw(_quant_row_sizes(max_elements))
    budget = max(1, max_elements // ne0)
    ne1 = draw(st.integers(1, min(9, budget)))
    ne2 = draw(st.integers(1, max(1, min(3, budget // ne1))))
    return (ne0, ne1, ne2, 1)


def quant_layout() -> st.SearchStrategy[Layout]:
    """Whole blocks: no permute; row/plane padding and offsets in whole blocks."""
    return QUANT_LAYOUTS


QUANT_LAYOUTS = st.one_of(
    st.just(Layout()),
    st.builds(lambda p0, p1, o: Layout(pad=(32 * p0, p1, 0, 0), offset=32 * o),
              st.integers(0, 2), st.integers(0, 2), st.integers(0, 2)),
)


def permuted_quant_layout() -> st.SearchStrategy[Layout]:
    """A permute that keeps dim 0 innermost (whole rows of blocks move), with row/plane padding."""
    return st.builds(lambda perm, p1, p2: Layout(perm=perm, pad=(0, p1, p2, 0)),
                     st.sampled_from(ROW_KEEPING_PERMS), st.integers(0, 2), st.integers(0, 1))


# Weight formats beyond Q4_0/Q8_0 (golden.dtypes.DRAWN_WEIGHT_TYPES) as src0 of GET_ROWS and MUL_MAT (and
# MUL_MAT_ID, conformance/cases/moe.py): row lengths where the 32-element block and the 256-element super-block
# edges fall (odd multiples of 32 for 32-block formats, odd multiples of 256 for K-quants), weight rows that are
# and are not multiples of the backends' row tiles (32, 64, 128), and src1 columns on both sides of the
# matrix-vector path (ggml-vulkan takes it for up to 8 columns, its tiled mul_mm beyond)
FORMAT_ROW_SIZES: dict[int, tuple[int, ...]] = {
    32: (32, 96, 160, 256, 288, 512, 544, 768, 1056, 2048),
    64: (64, 192, 256, 320, 512, 576, 768, 1088, 2048),  # Q2_0: odd multiples of 64, and of 256
    128: (128, 384, 640, 768, 1152, 2048),  # Q1_0: odd multiples of 128
    256: (256, 512, 768, 1280, 2304, 4096),
}
TILE_ROWS = (31, 32, 33, 63, 64, 65, 127, 128)
FORMAT_MATMUL_ELEMENTS = 1 << 17  # weight elements of one format case (k · rows), the golden's float64 budget


def format_row_sizes(qtype: str) -> st.SearchStrategy[int]:
    return st.sampled_from(FORMAT_ROW_SIZES[dtypes.block_size(qtype)])


def format_layout(qtype: str) -> st.SearchStrategy[Layout]:
    """Whole blocks of ``qtype``: no permute, or one that keeps dim 0 innermost; padding in whole blocks."""
    block = dtypes.block_size(qtype)
    return st.one_of(
        st.just(Layout()),
        st.builds(lambda p0, p1, o: Layout(pad=(block * p0, p1, 0, 0), offset=block * o),
                  st.integers(0, 2), st.integers(0, 2), st.integers(0, 2)),
        permuted_quant_layout())


def format_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    """GET_ROWS or MUL_MAT with ``sig.srcs[0]`` one of the weight formats beyond Q4_0/Q8_0."""
    qtype = sig.srcs[0]
    k = draw(format_row_sizes(qtype))
    if op == "GET_ROWS":
        block = dtypes.block_size(qtype)
        ne = (k, draw(st.one_of(st.integers(1, 9), st.sampled_from([block + 1, 1001]))), draw(st.integers(1, 2)), 1)
        ne = (k, min(ne[1], max(1, FORMAT_MATMUL_ELEMENTS // k)), ne[2], 1)
        rows = spec("i32", (draw(st.integers(1, 12)), ne[2], ne[3], 1))
        return finish(draw, OpCase(op, (spec(qtype, ne, draw(format_layout(qtype))), rows), dst=sig.dst))
    m = min(draw(st.one_of(st.integers(1, 16), st.sampled_from(TILE_ROWS))), max(1, FORMAT_MATMUL_ELEMENTS // k))
    n = draw(st.one_of(st.integers(1, 8), st.integers(9, 40)))
    a2, r2 = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    weights = spec(qtype, (k, m, a2, 1), draw(format_layout(qtype)), draw(weight_names))
    src1 = spec(sig.srcs[1], (k, n, a2 * r2, 1))
    return finish(draw, OpCase(op, (weights, src1), dst=sig.dst))


@st.composite
def quant_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    if op in ("GET_ROWS", "MUL_MAT") and sig.srcs[0] not in DRAWN_QUANT_TYPES:
        return format_case(draw, op, sig)
    if op == "GET_ROWS":
        # a tall table now and then: over a thousand rows of one or two blocks (embedding tables)
        # (both drawn, then one chosen: the choices do not depend on the branch, so a failure shrinks)
        tall = (draw(st.sampled_from([32, 64])), draw(st.sampled_from([1001, 1024, 2048])), 1, 1)
        usual = draw(quant_shape())
        ne = tall if one_in(draw, 3) else usual
        n_rows = draw(st.integers(1, 12))
        data = spec(sig.srcs[0], ne, draw(quant_layout()))
        rows = spec("i32", (n_rows, ne[2], ne[3], 1))
        return finish(draw, OpCase(op, (data, rows), dst=sig.dst))
    if op == "CPY" and sig.srcs[0] in QUANT_TYPES:  # dequantizing copy: any whole-block source, any destination
        ne = draw(quant_shape())
        src = spec(sig.srcs[0], ne, draw(st.one_of(quant_layout(), permuted_quant_layout())))
        return finish(draw, OpCase(op, (src,), params=draw(cpy_destination(ne)), dst=sig.dst))
    if op == "CPY":
        ne = draw(quant_shape())
        src = spec(sig.srcs[0], ne, draw(layouts(perms=ROW_KEEPING_PERMS)))  # source rows contiguous
        params = (("dst_ne", ne), ("dst_pad", (0, 0, 0, 0)), ("dst_offset", 0))  # ggml: contiguous Q dst
        # no NaN/inf: one non-finite value poisons its whole block's scale
        return finish(draw, OpCase(op, (src,), params=params, dst=sig.dst), distribution=FINITE)
    if op in ("DUP", "CONT"):
        ne = draw(quant_shape())
        return finish(draw, OpCase(op, (spec(sig.srcs[0], ne, draw(quant_layout())),), dst=sig.dst))
    # MUL_MAT: K a multiple of 32 up to 4096, blocked broadcast of the weights over dims 2 and 3; the
    # weights permuted now and then (ggml_mul_mat takes any layout whose rows are whole: dim 0 stays)
    k = draw(QUANT_ROW_SIZES)
    m = draw(st.integers(1, 16))
    n = draw(st.integers(1, 8))
    a2, a3, r2 = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 3))
    weights = spec(sig.srcs[0], (k, m, a2, a3), draw(st.one_of(quant_layout(), permuted_quant_layout())),
                   draw(weight_names))
    src1 = spec(sig.srcs[1], (k, n, a2 * r2, a3))
    return finish(draw, OpCase(op, (weights, src1), dst=sig.dst))


register("GET_ROWS", "CPY", "DUP", "CONT", "MUL_MAT", quantized=quant_case)

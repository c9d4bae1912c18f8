"""ggml constructors for the movement, resample and sequence ops (see golden/catalogue.py).

The view-family ops (NONE, VIEW, RESHAPE, PERMUTE, TRANSPOSE) compute nothing by themselves, so
each is followed by ``ggml_cont``: the device's strided copy of the view is what gets checked.
"""

from __future__ import annotations

import ctypes as C
from collections.abc import Callable

from device.ggml.graph import P_CTX, P_TENSOR, Builder, GraphBuilder, prototype
from device.ggml.lib import TensorP
from golden import dtypes
from golden.case import Layout, OpCase, TensorSpec
from golden.geometry import storage_of
from golden.resample import ScaleMode

SORT_ORDER = {"asc": 0, "desc": 1}  # enum ggml_sort_order

prototype("ggml_pad_circular", P_TENSOR, P_CTX, P_TENSOR, C.c_int, C.c_int, C.c_int, C.c_int)
prototype("ggml_pad_ext_circular", P_TENSOR, P_CTX, P_TENSOR, *(C.c_int,) * 8)


def _then_cont(view: Callable[[GraphBuilder, TensorP, OpCase], TensorP]) -> Builder:
    def build(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
        return g.lib.ggml_cont(g.ctx, view(g, srcs[0], case))

    return build


def _view(g: GraphBuilder, a: TensorP, case: OpCase) -> TensorP:
    ne, nb = case.param("ne"), case.param("nb")
    return g.lib.ggml_view_4d(g.ctx, a, ne[0], ne[1], ne[2], ne[3], nb[1], nb[2], nb[3], case.param("offset"))


def _cont(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    if case.form == "cont_4d":
        return g.lib.ggml_cont_4d(g.ctx, srcs[0], *case.param("ne"))
    return g.lib.ggml_cont(g.ctx, srcs[0])


def _cpy(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    """The destination is made here: plain, or a strided view inside a padded allocation, permuted or not."""
    pad, offset = case.param("dst_pad", (0, 0, 0, 0)), case.param("dst_offset", 0)
    perm = tuple(case.param("dst_perm", (0, 1, 2, 3)))
    layout = Layout(perm=perm, pad=tuple(pad), offset=offset)
    dst_spec = TensorSpec(case.dst, tuple(case.param("dst_ne")), layout)
    if dst_spec.layout.is_contiguous:
        dst = g.new_tensor(case.dst, dst_spec.ne)
    else:
        st = storage_of(dst_spec)
        n_elems = st.base_nbytes // dtypes.type_size(case.dst) * dtypes.block_size(case.dst)
        base = g.new_tensor(case.dst, (n_elems,))
        dst = g.lib.ggml_view_4d(g.ctx, base, *st.view_ne, *st.view_nb[1:], st.offset_bytes)
        if st.perm != (0, 1, 2, 3):
            dst = g.lib.ggml_permute(g.ctx, dst, *st.perm)
    return g.lib.ggml_cpy(g.ctx, srcs[0], dst)


def _repeat(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    shape_of = g.new_tensor(case.inputs[0].dtype, tuple(case.param("ne")))  # only its shape is used
    return g.lib.ggml_repeat(g.ctx, srcs[0], shape_of)


def _acc(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    a, b = srcs
    args = (case.param("nb1"), case.param("nb2"), case.param("nb3"), case.param("offset"))
    if case.form == "inplace":
        # in place on a copy: the in-place kernel runs and src0 itself stays checkable
        return g.lib.ggml_acc_inplace(g.ctx, g.lib.ggml_dup(g.ctx, a), b, *args)
    return g.lib.ggml_acc(g.ctx, a, b, *args)


def _pad(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    lp, rp = case.param("lp"), case.param("rp")
    both = (lp[0], rp[0], lp[1], rp[1], lp[2], rp[2], lp[3], rp[3])
    if case.form == "pad_ext":
        return g.lib.ggml_pad_ext(g.ctx, srcs[0], *both)
    if case.form == "pad_ext_circular":
        return g.call("ggml_pad_ext_circular", g.ctx, srcs[0], *both)
    if case.form == "circular":
        return g.call("ggml_pad_circular", g.ctx, srcs[0], *rp)
    return g.lib.ggml_pad(g.ctx, srcs[0], *rp)


def _upscale(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    mode = ScaleMode.of(case).word  # ggml_scale_mode | ggml_scale_flag bits
    if case.form == "interpolate":
        ne = case.param("ne")
        return g.lib.ggml_interpolate(g.ctx, srcs[0], ne[0], ne[1], ne[2], ne[3], mode)
    return g.lib.ggml_upscale(g.ctx, srcs[0], case.param("sf"), mode)


def _arange(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    return g.lib.ggml_arange(g.ctx, case.param("start"), case.param("stop"), case.param("step"))


# the views themselves: a graph case's view node is one of these, not followed by ggml_cont, so a
# backend's fusion matcher sees the VIEW / RESHAPE / PERMUTE / TRANSPOSE node llama.cpp's graph has
VIEWS: dict[str, Callable[[GraphBuilder, TensorP, OpCase], TensorP]] = {
    "VIEW": _view,
    "RESHAPE": lambda g, a, case: g.lib.ggml_reshape_4d(g.ctx, a, *case.param("ne")),
    "PERMUTE": lambda g, a, case: g.lib.ggml_permute(g.ctx, a, *case.param("axes")),
    "TRANSPOSE": lambda g, a, case: g.lib.ggml_transpose(g.ctx, a),
}

BUILDERS: dict[str, Builder] = {
    "NONE": _then_cont(lambda g, a, case: a),
    **{op: _then_cont(view) for op, view in VIEWS.items()},
    "DUP": lambda g, srcs, case: g.lib.ggml_dup(g.ctx, srcs[0]),
    "CONT": _cont,
    "CPY": _cpy,
    "REPEAT": _repeat,
    "CONCAT": lambda g, srcs, case: g.lib.ggml_concat(g.ctx, srcs[0], srcs[1], case.param("dim")),
    "GET_ROWS": lambda g, srcs, case: g.lib.ggml_get_rows(g.ctx, srcs[0], srcs[1]),
    "ACC": _acc,
    "PAD": _pad,
    "UPSCALE": _upscale,
    "ARANGE": _arange,
    "ARGSORT": lambda g, srcs, case: g.lib.ggml_argsort(g.ctx, srcs[0], SORT_ORDER[case.param("order")]),
    "SUM_ROWS": lambda g, srcs, case: g.lib.ggml_sum_rows(g.ctx, srcs[0]),
}

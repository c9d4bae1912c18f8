"""ggml constructors for the construction ops: FILL, TRI, DIAG, SET, PAD_REFLECT_1D.

In-place forms (form=inplace) run on a ``ggml_dup`` of the input: the in-place kernel is what is
checked, and the input tensor itself stays readable for the harness's integrity check.
"""

from __future__ import annotations

import ctypes as C

from device.ggml.graph import P_CTX, P_TENSOR, Builder, GraphBuilder, prototype
from device.ggml.lib import TensorP
from golden.case import OpCase
from golden.construction import TRI_TYPES

prototype("ggml_fill", P_TENSOR, P_CTX, P_TENSOR, C.c_float)
prototype("ggml_fill_inplace", P_TENSOR, P_CTX, P_TENSOR, C.c_float)
prototype("ggml_tri", P_TENSOR, P_CTX, P_TENSOR, C.c_int)
prototype("ggml_diag", P_TENSOR, P_CTX, P_TENSOR)
prototype("ggml_set", P_TENSOR, P_CTX, P_TENSOR, P_TENSOR, C.c_size_t, C.c_size_t, C.c_size_t, C.c_size_t)
prototype("ggml_set_inplace", P_TENSOR, P_CTX, P_TENSOR, P_TENSOR, C.c_size_t, C.c_size_t, C.c_size_t, C.c_size_t)
prototype("ggml_pad_reflect_1d", P_TENSOR, P_CTX, P_TENSOR, C.c_int, C.c_int)


def _fill(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    if case.form == "inplace":
        return g.call("ggml_fill_inplace", g.ctx, g.lib.ggml_dup(g.ctx, srcs[0]), case.param("c"))
    return g.call("ggml_fill", g.ctx, srcs[0], case.param("c"))


def _set(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    a, b = srcs
    args = (case.param("nb1"), case.param("nb2"), case.param("nb3"), case.param("offset"))
    if case.form == "inplace":
        return g.call("ggml_set_inplace", g.ctx, g.lib.ggml_dup(g.ctx, a), b, *args)
    return g.call("ggml_set", g.ctx, a, b, *args)


BUILDERS: dict[str, Builder] = {
    "FILL": _fill,
    "TRI": lambda g, srcs, case: g.call("ggml_tri", g.ctx, srcs[0], TRI_TYPES[case.param("tri_type")]),
    "DIAG": lambda g, srcs, case: g.call("ggml_diag", g.ctx, srcs[0]),
    "SET": _set,
    "PAD_REFLECT_1D": lambda g, srcs, case: g.call("ggml_pad_reflect_1d", g.ctx, srcs[0], case.param("p0"),
                                                   case.param("p1")),
}

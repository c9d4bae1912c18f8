"""ggml constructors for the reductions and scans: SUM, MEAN, ARGMAX, COUNT_EQUAL, L2_NORM, CUMSUM."""

from __future__ import annotations

import ctypes as C

from device.ggml.graph import P_CTX, P_TENSOR, Builder, GraphBuilder, prototype
from device.ggml.lib import TensorP
from golden.case import OpCase

prototype("ggml_sum", P_TENSOR, P_CTX, P_TENSOR)
prototype("ggml_mean", P_TENSOR, P_CTX, P_TENSOR)
prototype("ggml_argmax", P_TENSOR, P_CTX, P_TENSOR)
prototype("ggml_count_equal", P_TENSOR, P_CTX, P_TENSOR, P_TENSOR)
prototype("ggml_l2_norm", P_TENSOR, P_CTX, P_TENSOR, C.c_float)
prototype("ggml_cumsum", P_TENSOR, P_CTX, P_TENSOR)


def _one(fn: str) -> Builder:
    def build(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
        return g.call(fn, g.ctx, srcs[0])

    return build


def _count_equal(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    return g.call("ggml_count_equal", g.ctx, srcs[0], srcs[1])


def _l2_norm(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    return g.call("ggml_l2_norm", g.ctx, srcs[0], case.param("eps"))


BUILDERS: dict[str, Builder] = {
    "SUM": _one("ggml_sum"),
    "MEAN": _one("ggml_mean"),
    "ARGMAX": _one("ggml_argmax"),
    "COUNT_EQUAL": _count_equal,
    "L2_NORM": _l2_norm,
    "CUMSUM": _one("ggml_cumsum"),
}

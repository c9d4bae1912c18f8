"""ggml constructors for the mixture-of-experts and outer-product ops: MUL_MAT_ID takes the experts,
src1 and the I32 ids in case order; ADD_ID takes a, the per-expert bias and the ids (ggml releases before
ggml_add_id lack the symbol, so the op is unsupported there); OUT_PROD takes a and b."""

from __future__ import annotations

from device.ggml.graph import P_CTX, P_TENSOR, Builder, GraphBuilder, prototype
from device.ggml.lib import TensorP
from golden.case import OpCase

prototype("ggml_mul_mat_id", P_TENSOR, P_CTX, P_TENSOR, P_TENSOR, P_TENSOR)
prototype("ggml_add_id", P_TENSOR, P_CTX, P_TENSOR, P_TENSOR, P_TENSOR)
prototype("ggml_out_prod", P_TENSOR, P_CTX, P_TENSOR, P_TENSOR)


def _mul_mat_id(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    return g.call("ggml_mul_mat_id", g.ctx, srcs[0], srcs[1], srcs[2])


def _add_id(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    return g.call("ggml_add_id", g.ctx, srcs[0], srcs[1], srcs[2])


def _out_prod(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    return g.call("ggml_out_prod", g.ctx, srcs[0], srcs[1])


BUILDERS: dict[str, Builder] = {"MUL_MAT_ID": _mul_mat_id, "ADD_ID": _add_id, "OUT_PROD": _out_prod}

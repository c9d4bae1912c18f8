"""ggml constructors for the math ops with an op of their own (not GGML_OP_UNARY): SQRT, SIN, COS,
LOG (one input), SUB (src1 broadcast by tiling) and ADD1 (src1 a one-element tensor)."""

from __future__ import annotations

from device.ggml.graph import P_CTX, P_TENSOR, Builder, GraphBuilder, prototype
from device.ggml.lib import TensorP
from device.ggml.ops_elementwise import in_place_copy, second_source
from golden.case import OpCase

ONE_INPUT = {"SQRT": "ggml_sqrt", "SIN": "ggml_sin", "COS": "ggml_cos", "LOG": "ggml_log"}
TWO_INPUTS = {"SUB": "ggml_sub", "ADD1": "ggml_add1"}  # ggml_add1 is marked deprecated in ggml.h, still built

for _fn in ONE_INPUT.values():
    prototype(_fn, P_TENSOR, P_CTX, P_TENSOR)
    prototype(_fn + "_inplace", P_TENSOR, P_CTX, P_TENSOR)
for _fn in TWO_INPUTS.values():
    prototype(_fn, P_TENSOR, P_CTX, P_TENSOR, P_TENSOR)


def _one(fn_name: str) -> Builder:
    def build(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
        if case.form == "inplace":  # see ops_elementwise: on a copy, so the input stays checkable
            return g.call(fn_name + "_inplace", g.ctx, in_place_copy(g, srcs[0]))
        return g.call(fn_name, g.ctx, srcs[0])

    return build


def _two(fn_name: str) -> Builder:
    def build(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
        return g.call(fn_name, g.ctx, srcs[0], second_source(srcs, case))

    return build


BUILDERS: dict[str, Builder] = {
    **{op: _one(fn) for op, fn in ONE_INPUT.items()},
    **{op: _two(fn) for op, fn in TWO_INPUTS.items()},
}

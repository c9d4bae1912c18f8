"""ggml constructors for the elementwise and unary ops (ADD, MUL, DIV, SCALE, SQR, CLAMP,
LEAKY_RELU and the GGML_OP_UNARY family: one line of :data:`UNARY_OPS` per op)."""

from __future__ import annotations

from device.ggml.graph import Builder, GraphBuilder
from device.ggml.lib import TensorP
from golden.case import OpCase

# enum ggml_unary_op (ggml.h): each unary op is one ggml_unary(ctx, a, op) call
UNARY_OPS = {
    "ABS": 0,
    "TANH": 4,
    "RELU": 6,
    "GELU": 8,
    "GELU_QUICK": 9,
    "SILU": 10,
    "HARDSWISH": 11,
    "HARDSIGMOID": 12,
    "SGN": 1,
    "NEG": 2,
    "STEP": 3,
    "ELU": 5,
    "SIGMOID": 7,
    "EXP": 13,
    "SOFTPLUS": 15,
    "GELU_ERF": 16,
}


def _binary(fn_name: str) -> Builder:
    def build(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
        return getattr(g.lib, fn_name)(g.ctx, srcs[0], srcs[1])

    return build


def _unary(op: str) -> Builder:
    def build(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
        return g.lib.ggml_unary(g.ctx, srcs[0], UNARY_OPS[op])

    return build


def _scale(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    bias = case.param("bias", 0.0)
    if bias == 0.0:
        return g.lib.ggml_scale(g.ctx, srcs[0], case.param("s"))
    return g.lib.ggml_scale_bias(g.ctx, srcs[0], case.param("s"), bias)


def _sqr(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    return g.lib.ggml_sqr(g.ctx, srcs[0])


def _clamp(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    return g.lib.ggml_clamp(g.ctx, srcs[0], case.param("min"), case.param("max"))


def _leaky_relu(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    return g.lib.ggml_leaky_relu(g.ctx, srcs[0], case.param("slope"), False)


BUILDERS: dict[str, Builder] = {
    "ADD": _binary("ggml_add"),
    "MUL": _binary("ggml_mul"),
    "DIV": _binary("ggml_div"),
    "SCALE": _scale,
    "SQR": _sqr,
    "CLAMP": _clamp,
    "LEAKY_RELU": _leaky_relu,
    **{op: _unary(op) for op in UNARY_OPS},
}

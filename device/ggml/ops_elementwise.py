"""ggml constructors for the elementwise and unary ops (ADD, MUL, DIV, SCALE, SQR, CLAMP,
LEAKY_RELU and the GGML_OP_UNARY family: one line of :data:`UNARY_OPS` per op).

Case forms: ``self`` gives a binary op its src0 as src1 too (``ggml_add(ctx, a, a)``); ``inplace``
runs the ``ggml_*_inplace`` constructor on a ``ggml_dup`` of the input, so the in-place kernel (output
aliasing its input) is what is checked and the input itself stays readable.
"""

from __future__ import annotations

import ctypes as C

from device.ggml.graph import P_CTX, P_TENSOR, Builder, GraphBuilder, GraphBuildError, prototype
from device.ggml.lib import TensorP
from golden.case import OpCase

prototype("ggml_unary_inplace", P_TENSOR, P_CTX, P_TENSOR, C.c_int)
prototype("ggml_scale_inplace", P_TENSOR, P_CTX, P_TENSOR, C.c_float)
prototype("ggml_scale_bias_inplace", P_TENSOR, P_CTX, P_TENSOR, C.c_float, C.c_float)
prototype("ggml_sqr_inplace", P_TENSOR, P_CTX, P_TENSOR)
prototype("ggml_unary_op_name", C.c_char_p, C.c_int)

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


_CHECKED_NUMBERS: set[tuple[int, str]] = set()  # (library, op) whose enum number the library confirmed


def unary_op_number(g: GraphBuilder, op: str) -> int:
    """The op's ``enum ggml_unary_op`` number, checked against the loaded library's own name for it the
    first time (ggml has renumbered the enum between releases: GELU_ERF went from 14 to 16)."""
    number = UNARY_OPS[op]
    key = (id(g.lib), op)
    if key not in _CHECKED_NUMBERS:
        raw = g.call("ggml_unary_op_name", number)
        name = raw.decode(errors="replace") if raw else None
        if name != op:
            raise GraphBuildError(f"harness error: this ggml names enum ggml_unary_op {number} {name!r}, not {op}; "
                                  "UNARY_OPS in device/ggml/ops_elementwise.py follows another ggml.h")
        _CHECKED_NUMBERS.add(key)
    return number


def second_source(srcs: list[TensorP], case: OpCase) -> TensorP:
    """src1, or src0 itself for form=self (the case's src1 then holds the same values, unused here)."""
    return srcs[0] if case.form == "self" else srcs[1]


def in_place_copy(g: GraphBuilder, a: TensorP) -> TensorP:
    """The tensor an in-place form works on: a copy of the input, so the input stays checkable."""
    return g.lib.ggml_dup(g.ctx, a)


def _binary(fn_name: str) -> Builder:
    def build(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
        return getattr(g.lib, fn_name)(g.ctx, srcs[0], second_source(srcs, case))

    return build


def _unary(op: str) -> Builder:
    def build(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
        number = unary_op_number(g, op)
        if case.form == "inplace":
            return g.call("ggml_unary_inplace", g.ctx, in_place_copy(g, srcs[0]), number)
        return g.lib.ggml_unary(g.ctx, srcs[0], number)

    return build


def _scale(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    bias = case.param("bias", 0.0)
    if case.form == "inplace":
        a = in_place_copy(g, srcs[0])
        if bias == 0.0:
            return g.call("ggml_scale_inplace", g.ctx, a, case.param("s"))
        return g.call("ggml_scale_bias_inplace", g.ctx, a, case.param("s"), bias)
    if bias == 0.0:
        return g.lib.ggml_scale(g.ctx, srcs[0], case.param("s"))
    return g.lib.ggml_scale_bias(g.ctx, srcs[0], case.param("s"), bias)


def _sqr(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    if case.form == "inplace":
        return g.call("ggml_sqr_inplace", g.ctx, in_place_copy(g, srcs[0]))
    return g.lib.ggml_sqr(g.ctx, srcs[0])


def _clamp(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    return g.lib.ggml_clamp(g.ctx, srcs[0], case.param("min"), case.param("max"))


def _leaky_relu(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    if case.form == "inplace":
        return g.lib.ggml_leaky_relu(g.ctx, in_place_copy(g, srcs[0]), case.param("slope"), True)
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

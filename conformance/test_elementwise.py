"""Elementwise and unary ops: ADD, MUL, DIV, SCALE, SQR, CLAMP, LEAKY_RELU, GELU, GELU_QUICK,
SILU, TANH, RELU, HARDSIGMOID, HARDSWISH."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.strategies import f32, finish, layouts, layouts_for, shapes, spec, tiling_shape
from conformance.suite import op_signatures
from golden import catalogue
from golden.case import OpCase
from golden.catalogue import Signature

BINARY = ("ADD", "MUL", "DIV")
UNARY = ("GELU", "GELU_QUICK", "SILU", "TANH", "RELU", "HARDSIGMOID", "HARDSWISH", "SQR")
PARAMETRIC = ("SCALE", "CLAMP", "LEAKY_RELU")

interesting_floats = st.one_of(
    st.sampled_from([0.0, 1.0, -1.0, 0.5, 1e-3, 1e3, -0.0]),
    st.floats(-4.0, 4.0, allow_nan=False, width=32),
)


@st.composite
def binary_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    ne = draw(shapes())
    a = spec(sig.srcs[0], ne, draw(layouts()))
    b = spec(sig.srcs[1], draw(tiling_shape(ne)), draw(layouts(perms=())))  # src1 may be arbitrarily strided
    return finish(draw, OpCase(op, (a, b), out_dtype=sig.dst))


@st.composite
def unary_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    ne = draw(shapes())
    params: tuple = ()
    if op == "SCALE":
        bias = draw(st.one_of(st.just(0.0), interesting_floats))
        params = (("s", f32(draw(interesting_floats))), ("bias", f32(bias)))
    elif op == "CLAMP":
        lo, hi = draw(interesting_floats), draw(interesting_floats)
        params = (("min", f32(lo)), ("max", f32(hi)))  # lo > hi is allowed: every output is min
    elif op == "LEAKY_RELU":
        params = (("slope", f32(draw(st.one_of(st.sampled_from([0.0, 0.01, 0.1, 1.0]), interesting_floats)))),)
    lay = draw(layouts_for(catalogue.get(op).layouts))
    return finish(draw, OpCase(op, (spec(sig.srcs[0], ne, lay),), params=params, out_dtype=sig.dst))


@pytest.mark.parametrize(("op", "sig"), op_signatures(BINARY))
@given(data=st.data())
def test_binary(conform, op: str, sig: Signature, data: st.DataObject) -> None:
    conform.check(data.draw(binary_case(op, sig), label="case"))


@pytest.mark.parametrize(("op", "sig"), op_signatures(UNARY + PARAMETRIC))
@given(data=st.data())
def test_unary(conform, op: str, sig: Signature, data: st.DataObject) -> None:
    conform.check(data.draw(unary_case(op, sig), label="case"))

"""Elementwise and unary ops: the binary family's default (ADD, MUL, DIV), the unary family's
default (every one-input activation), and the unary ops with parameters (SCALE, CLAMP, LEAKY_RELU)."""

from __future__ import annotations

from hypothesis import strategies as st

from conformance.cases import family_default, register
from conformance.strategies import f32, finish, input_layouts, shapes, spec, tiling_shape
from golden import catalogue
from golden.case import OpCase
from golden.spec import InputLayouts, Signature

interesting_floats = st.one_of(
    st.sampled_from([0.0, 1.0, -1.0, 0.5, 1e-3, 1e3, -0.0]),
    st.floats(-4.0, 4.0, allow_nan=False, width=32),
)


@st.composite
def binary_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    ne = draw(shapes())
    a = spec(sig.srcs[0], ne, draw(input_layouts(catalogue.get(op).input_layouts)))
    b = spec(sig.srcs[1], draw(tiling_shape(ne)), draw(input_layouts(InputLayouts.ANY)))
    return finish(draw, OpCase(op, (a, b), out_dtype=sig.dst))


def _no_params(draw: st.DrawFn) -> tuple:
    return ()


def _scale_params(draw: st.DrawFn) -> tuple:
    bias = draw(st.one_of(st.just(0.0), interesting_floats))
    return (("s", f32(draw(interesting_floats))), ("bias", f32(bias)))


def _clamp_params(draw: st.DrawFn) -> tuple:
    lo, hi = draw(interesting_floats), draw(interesting_floats)
    return (("min", f32(lo)), ("max", f32(hi)))  # lo > hi is allowed: every output is min


def _leaky_relu_params(draw: st.DrawFn) -> tuple:
    return (("slope", f32(draw(st.one_of(st.sampled_from([0.0, 0.01, 0.1, 1.0]), interesting_floats)))),)


UNARY_PARAMS = {"SCALE": _scale_params, "CLAMP": _clamp_params, "LEAKY_RELU": _leaky_relu_params}


@st.composite
def unary_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    ne = draw(shapes())
    params = UNARY_PARAMS.get(op, _no_params)(draw)
    lay = draw(input_layouts(catalogue.get(op).input_layouts))
    return finish(draw, OpCase(op, (spec(sig.srcs[0], ne, lay),), params=params, out_dtype=sig.dst))


family_default("binary", group="binary", draw=binary_case)
family_default("unary", group="unary", draw=unary_case)


@st.composite
def add1_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    """ADD1: a padded-1-d a and a one-element b (ggml_add1 asserts ggml_is_scalar(b)) at any offset."""
    a = spec(sig.srcs[0], draw(shapes()), draw(input_layouts(catalogue.get(op).input_layouts)))
    b = spec(sig.srcs[1], (1, 1, 1, 1), draw(input_layouts(InputLayouts.ANY)))
    return finish(draw, OpCase(op, (a, b), out_dtype=sig.dst))


register("ADD1", group="binary", draw=add1_case)

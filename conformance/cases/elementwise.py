"""Elementwise and unary ops: the binary family's default (ADD, MUL, DIV), the unary family's
default (every one-input activation), and the unary ops with parameters (SCALE, CLAMP, LEAKY_RELU).

Case forms: a binary op whose two sources share a dtype sometimes gets src0 as src1 too (form=self,
``ggml_add(ctx, a, a)``); the ops with a ``ggml_*_inplace`` constructor sometimes run it (form=inplace,
on a copy of a contiguous input: the copy's layout is the kernel's). Now and then a case is a big
tensor: 16M elements in the nightly profile (one case in 128), just over 65,536 in dev and ci (one in 2)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from conformance.cases.registry import family_default, register
from conformance.strategies import (
    alias_branch,
    f32,
    finish,
    input_layouts,
    nightly_sizes,
    one_in,
    shapes,
    spec,
    tiling_shape,
)
from conformance.verdict import Metrics, compare
from golden import catalogue
from golden.case import Layout, Ne, OpCase
from golden.spec import GRID_BLOCKS, InputLayouts, Signature
from golden.tolerance import Tolerance
from golden.unary import clamp_undefined_choices

interesting_floats = st.one_of(
    st.sampled_from([0.0, 1.0, -1.0, 0.5, 1e-3, 1e3, -0.0]),
    st.floats(-4.0, 4.0, allow_nan=False, width=32),
)


@st.composite
def elementwise_shape(draw: st.DrawFn) -> Ne:
    """Usually :func:`shapes`; now and then a big tensor: 2^24 elements or about, where 32-bit index
    arithmetic and multi-block grids begin, in one nightly draw in 128 (each takes seconds). Hypothesis'
    examples are correlated, so this is not one case in 128: a 400-example test drew none in 29 of 40
    random seeds, the others 1-6; a nightly reaches it in some of its elementwise tests, not in each.
    In one dev or ci case in 2: just over 65,536 elements (the grid-limit regime, kept cheap)."""
    nightly = nightly_sizes()
    usual = draw(shapes())
    big_ne0 = draw(BIG_ROWS)  # drawn either way: the choices do not depend on the branch (shrinking)
    if not one_in(draw, 128 if nightly else 2):
        return usual
    if nightly:
        return (big_ne0, max(1, (1 << 24) // big_ne0), 1, 1)
    # just past the grid limit (golden.spec.GRID_BLOCKS): the fewest rows of big_ne0 that exceed it
    return (big_ne0, GRID_BLOCKS // big_ne0 + 1, 1, 1)


BIG_ROWS = st.sampled_from([4096, 4097, 16384, 65536])


ELEMENTWISE_SHAPE = elementwise_shape()  # one strategy object (a new one per draw costs Hypothesis' checks)


@st.composite
def binary_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    ne = draw(ELEMENTWISE_SHAPE)
    a = spec(sig.srcs[0], ne, draw(input_layouts(catalogue.get(op).input_layouts)))
    b = spec(sig.srcs[1], draw(tiling_shape(ne)), draw(input_layouts(InputLayouts.ANY)))
    if sig.srcs[0] == sig.srcs[1] and one_in(draw, 6):  # src1 is src0 itself (b drawn anyway: shrinking)
        case = finish(draw, OpCase(op, (a, a), dst=sig.dst, form="self"))
    else:
        case = finish(draw, OpCase(op, (a, b), dst=sig.dst))
    return alias_branch(draw, case, every=3)  # b a view into a's allocation (overlapping sources)


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
    ne = draw(ELEMENTWISE_SHAPE)
    params = UNARY_PARAMS.get(op, _no_params)(draw)
    drawn_layout = draw(input_layouts(catalogue.get(op).input_layouts))  # drawn either way: shrinking
    form = "inplace" if catalogue.get(op).inplace_form and one_in(draw, 4) else ""
    lay = Layout() if form else drawn_layout
    return finish(draw, OpCase(op, (spec(sig.srcs[0], ne, lay),), params=params, dst=sig.dst,
                               form=form))


family_default("binary", group="binary", draw=binary_case)
family_default("unary", group="unary", draw=unary_case)


@st.composite
def add1_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    """ADD1: a padded-1-d a and a one-element b (ggml_add1 asserts ggml_is_scalar(b)) at any offset."""
    a = spec(sig.srcs[0], draw(ELEMENTWISE_SHAPE), draw(input_layouts(catalogue.get(op).input_layouts)))
    b = spec(sig.srcs[1], (1, 1, 1, 1), draw(input_layouts(InputLayouts.ANY)))
    return finish(draw, OpCase(op, (a, b), dst=sig.dst))


register("ADD1", group="binary", draw=add1_case)


def judge_clamp(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray, device: np.ndarray,
                tol: Tolerance) -> Metrics:
    """CLAMP's elementwise verdict, with the device's choice standing where ggml leaves the value open
    (NaN input, min > max: see golden.unary.clamp_undefined_choices)."""
    out = np.asarray(device, dtype=np.float64)
    if out.size == np.size(golden):
        golden = clamp_undefined_choices(inputs[0], case.param("min"), case.param("max"), out)
    return compare(case, inputs, golden, out, tol)


register("CLAMP", judge=judge_clamp)

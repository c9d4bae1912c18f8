"""Construction ops: FILL, TRI, DIAG, SET, PAD_REFLECT_1D: strategies (test group ``construction``).

Every strategy constructs a valid case; tensors stay at or under 32k elements but in the grid-limit
branch (one case in about 3: just over 65,536 elements, strategies.grid_shape). The regimes: FILL
constants at the F16 overflow and rounding edges, ±0, ±inf and NaN; every TRI type on 1×1 up to
odd and 32/128-sized matrices (the data's NaN/inf must vanish outside the triangle); DIAG of any
layout; SET into a sub-block or a free-form strided run of a, in place or not, with a and b in any
layout; PAD_REFLECT_1D with the paddings at 0 and at their limit ne0 − 1.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from conformance.cases.movement import factorisation, grown
from conformance.cases.registry import register
from conformance.strategies import GRID_EVERY, f32, finish, grid_shape, input_layouts, one_in, row_size, shapes, spec
from golden import catalogue, dtypes
from golden.case import Layout, Ne, OpCase
from golden.construction import TRI_TYPES
from golden.spec import InputLayouts, Signature

MAX_ELEMENTS = 1 << 15


def _count(ne: tuple[int, ...]) -> int:
    return int(np.prod(ne))


def _layout(op: str) -> st.SearchStrategy[Layout]:
    return input_layouts(catalogue.get(op).input_layouts)


GRID_SIDE = 257  # an n × n matrix of 66,049 elements: past golden.spec.GRID_BLOCKS
SHORT_GRID_ROWS = st.sampled_from((1, 257, 4096))  # PAD_REFLECT_1D's paddings reach ne0 − 1: rows kept short


def draw_grid(draw: st.DrawFn, short: bool = False) -> Ne | None:
    """strategies.grid_shape, with rows of at most 4,096 where ``short``."""
    return grid_shape(draw, rows=SHORT_GRID_ROWS) if short else grid_shape(draw)


# f32 constants where storing them goes wrong: F16 overflow (65520 rounds to inf, 65519 to 65504),
# F16 subnormals and the tie below them (2^-25 rounds to 0), F32 extremes, ±0, ±inf, NaN
FILL_CONSTANTS = (0.0, -0.0, 1.0, -1.0, 0.1, 65504.0, 65519.0, 65520.0, -1e5, 2.0**-24, 2.0**-25, 3 * 2.0**-26,
                  1e-45, 3.4028234663852886e38, float("inf"), float("-inf"), float("nan"))


@st.composite
def fill_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    ne = draw(shapes(max_elements=MAX_ELEMENTS))
    ne = draw_grid(draw) or ne  # the grid-limit regime
    c = f32(draw(st.one_of(st.sampled_from(FILL_CONSTANTS), st.floats(width=32))))
    form = draw(st.sampled_from(["", "inplace"]))
    src = spec(sig.srcs[0], ne, draw(_layout("FILL")))
    return finish(draw, OpCase("FILL", (src,), params=(("c", c),), dst=sig.dst, form=form))


@st.composite
def tri_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    n = draw(row_size(max_ne0=181))  # n² ≤ 32k
    if one_in(draw, GRID_EVERY):  # the grid-limit regime: 257² = 66,049 elements
        n = GRID_SIDE
    outer = MAX_ELEMENTS // (n * n)
    ne2 = draw(st.integers(1, max(1, min(4, outer))))
    ne3 = draw(st.integers(1, max(1, min(3, outer // ne2))))
    tri_type = draw(st.sampled_from(sorted(TRI_TYPES)))
    src = spec("f32", (n, n, ne2, ne3), draw(_layout("TRI")))
    return finish(draw, OpCase("TRI", (src,), params=(("tri_type", tri_type),)))


@st.composite
def diag_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    n = draw(row_size(max_ne0=181))
    if one_in(draw, GRID_EVERY):  # the grid-limit regime: a 257 × 257 output
        n = GRID_SIDE
    outer = MAX_ELEMENTS // (n * n)
    ne2 = draw(st.integers(1, max(1, min(4, outer))))
    ne3 = draw(st.integers(1, max(1, min(3, outer // ne2))))
    src = spec("f32", (n, 1, ne2, ne3), draw(_layout("DIAG")))
    return finish(draw, OpCase("DIAG", (src,)))


@st.composite
def set_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    """b written into a sub-block of a (every k-th row/plane/batch), or into a free-form strided run of
    the result's flat storage; byte strides and offset as ggml_set takes them."""
    dtype = sig.srcs[0]
    ne_b: Ne = draw(shapes(max_elements=MAX_ELEMENTS // 8, max_outer=4))
    big = draw_grid(draw)  # the grid-limit regime: b (and so a) past 65,536 elements, b packed in a
    ne_b = big or ne_b
    if draw(st.booleans()):
        step = [1] + [1 if big else draw(st.integers(1, 2)) for _ in range(3)]
        spread = tuple(ne_b[d] * step[d] for d in range(4))
        room = draw(grown(spread, most=3, budget=MAX_ELEMENTS // 2))  # type: ignore[arg-type]
        ne_a = tuple(spread[d] + room[d] for d in range(4))
        start = [draw(st.integers(0, ne_a[d] - (ne_b[d] - 1) * step[d] - 1)) for d in range(4)]
        a_nb = (1, ne_a[0], ne_a[0] * ne_a[1], ne_a[0] * ne_a[1] * ne_a[2])
        nb = [a_nb[d] * step[d] for d in range(4)]
        offset = sum(start[d] * a_nb[d] for d in range(4))
    else:
        gaps = draw(st.lists(st.integers(0, 4), min_size=3, max_size=3))
        nb = [1, ne_b[0] + gaps[0]]
        nb += [nb[1] * ne_b[1] + gaps[1]]
        nb += [nb[2] * ne_b[2] + gaps[2]]
        offset = draw(st.integers(0, 6))
        extent = offset + sum((ne_b[d] - 1) * nb[d] for d in range(4)) + 1
        ne_a = draw(factorisation(extent + draw(st.integers(0, 3))))
    es = dtypes.type_size(dtype)
    params = (("nb1", es * nb[1]), ("nb2", es * nb[2]), ("nb3", es * nb[3]), ("offset", es * offset))
    a = spec(dtype, ne_a, draw(_layout("SET")))  # type: ignore[arg-type]
    b = spec(sig.srcs[1], ne_b, draw(input_layouts(InputLayouts.ANY)))
    form = draw(st.sampled_from(["", "inplace"]))
    return finish(draw, OpCase("SET", (a, b), params=params, dst=sig.dst, form=form))


@st.composite
def pad_reflect_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    ne = draw(shapes(max_ne0=2048, max_elements=MAX_ELEMENTS // 3))
    ne = draw_grid(draw, short=True) or ne  # the grid-limit regime
    edge = st.sampled_from([0, ne[0] - 1])
    p0, p1 = (draw(st.one_of(edge, st.integers(0, ne[0] - 1))) for _ in range(2))
    src = spec("f32", ne, draw(_layout("PAD_REFLECT_1D")))
    return finish(draw, OpCase("PAD_REFLECT_1D", (src,), params=(("p0", p0), ("p1", p1))))


register("FILL", group="construction", draw=fill_case)
register("TRI", group="construction", draw=tri_case)
register("DIAG", group="construction", draw=diag_case)
register("SET", group="construction", draw=set_case)
register("PAD_REFLECT_1D", group="construction", draw=pad_reflect_case)

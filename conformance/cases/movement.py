"""Data movement, resample and sequence ops: NONE, VIEW, RESHAPE, PERMUTE, TRANSPOSE, DUP, CONT,
CPY, REPEAT, CONCAT, GET_ROWS, ACC, PAD, UPSCALE, ARANGE, ARGSORT, SUM_ROWS: strategies, the input
makers for GET_ROWS indices and ARGSORT ties, and ARGSORT's permutation verdict.

Every strategy constructs a valid case (the catalogue's validators reject invalid ones); tensors
stay at or under 32k elements so the ci profile runs in about a minute on two cores, but in the
grid-limit branches (one case in about 3: just over 65,536 elements, or 65,537 GET_ROWS indices).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import replace

import numpy as np
from hypothesis import strategies as st

from conformance.cases.registry import register
from conformance.data import plain_input
from conformance.strategies import (
    ALL_PERMS,
    GRID_EVERY,
    OFFSETS,
    PADS,
    divisor_of,
    f32,
    finish,
    grid_shape,
    input_layouts,
    long_row_branch,
    many_rows_branch,
    nightly_sizes,
    one_in,
    shapes,
    spec,
)
from conformance.verdict import Metrics
from golden import catalogue
from golden.case import Layout, Ne, OpCase
from golden.spec import GRID_BLOCKS, InputLayouts, Signature
from golden.tolerance import Tolerance

MAX_ELEMENTS = 1 << 15
ALL_AXES: tuple[Ne, ...] = tuple((a, b, c, d) for a, b, c, d in itertools.permutations(range(4)))
NO_NAN_INF = st.sampled_from(["uniform", "dense", "wide"])


def _count(ne: Ne) -> int:
    return ne[0] * ne[1] * ne[2] * ne[3]


def _layout(op: str) -> st.SearchStrategy[Layout]:
    return input_layouts(catalogue.get(op).input_layouts)


@functools.lru_cache(maxsize=4096)
def factorisation(n: int) -> st.SearchStrategy[Ne]:
    """Four sizes whose product is ``n`` (a reshape target), in any order."""
    return _factorisation(n)


@st.composite
def _factorisation(draw: st.DrawFn, n: int) -> Ne:
    dims = []
    rest = n
    for _ in range(3):
        d = draw(divisor_of(rest))
        dims.append(d)
        rest //= d
    dims.append(rest)
    return draw(_arrangements(tuple(sorted(dims))))


@functools.lru_cache(maxsize=4096)
def _arrangements(dims: Ne) -> st.SearchStrategy[Ne]:
    """Every distinct order of four sizes (one draw; the sorted order first)."""
    return st.sampled_from(sorted(set(itertools.permutations(dims))))


@st.composite
def grown(draw: st.DrawFn, ne: Ne, *, most: int, budget: int = MAX_ELEMENTS) -> Ne:
    """Extra sizes per dim (0..most each) that keep ``ne + extra`` within ``budget`` elements."""
    size, extra = list(ne), []
    for d in range(4):
        others = _count(tuple(size)) // size[d]  # type: ignore[arg-type]
        e = draw(st.integers(0, max(0, min(most, budget // others - size[d]))))
        size[d] += e
        extra.append(e)
    return tuple(extra)  # type: ignore[return-value]


# ---- the view family: the view then ggml_cont ---------------------------------------------------
@st.composite
def view_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    dtype = sig.srcs[0]
    if op == "VIEW":
        return draw(strided_view_case(dtype))
    ne = draw(shapes(max_elements=MAX_ELEMENTS // 2))
    big = grid_shape(draw)  # DUP and CONT: the grid-limit regime (the views' ggml_cont is theirs)
    if big and op in ("DUP", "CONT"):
        ne = big
    params: tuple = ()
    form = ""
    if op == "PERMUTE":
        params = (("axes", draw(st.sampled_from(ALL_AXES))),)
    elif op == "RESHAPE":
        params = (("ne", draw(factorisation(_count(ne)))),)
    elif op == "CONT" and draw(st.booleans()):
        form, params = "cont_4d", (("ne", draw(factorisation(_count(ne)))),)
    src = spec(dtype, ne, draw(_layout(op)))
    return finish(draw, OpCase(op, (src,), params=params, dst=sig.dst, form=form))


@st.composite
def strided_view_case(draw: st.DrawFn, dtype: str) -> OpCase:
    """A view with gaps between rows, planes and batches (row stride 0 now and then) at an offset,
    of a contiguous source just big enough to hold it."""
    from golden.dtypes import type_size

    ne = draw(shapes(max_elements=MAX_ELEMENTS // 8))
    gaps = draw(st.lists(st.integers(0, 5), min_size=3, max_size=3))
    nb1 = draw(st.sampled_from([0, ne[0] + gaps[0]])) if ne[0] <= 4 else ne[0] + gaps[0]
    nb2 = max(nb1, 1) * ne[1] + gaps[1]
    nb3 = nb2 * ne[2] + gaps[2]
    offset = draw(st.integers(0, 7))
    extent = offset + (ne[0] - 1) + (ne[1] - 1) * nb1 + (ne[2] - 1) * nb2 + (ne[3] - 1) * nb3 + 1
    extent = max(extent, offset + _count(ne))  # ggml sizes the view as if it were contiguous
    src_ne = draw(factorisation(extent + draw(st.integers(0, 3))))
    es = type_size(dtype)
    params = (("ne", ne), ("nb", (es, nb1 * es, nb2 * es, nb3 * es)), ("offset", offset * es))
    return finish(draw, OpCase("VIEW", (spec(dtype, src_ne),), params=params, dst=dtype))


# ---- CPY: conversions, reshaping and strided destinations ----------------------------------------
@functools.lru_cache(maxsize=4096)
def cpy_destination(ne: Ne) -> st.SearchStrategy[tuple]:
    """CPY's destination params for a source of shape ``ne`` (one strategy object per shape)."""
    return _cpy_destination(ne)


@st.composite
def _cpy_destination(draw: st.DrawFn, ne: Ne) -> tuple:
    """CPY's destination params for a source of shape ``ne``: the same shape or another of as many
    elements; contiguous, a padded view at an offset, or a permuted view (ggml_cpy takes any)."""
    dst_ne = draw(factorisation(_count(ne))) if draw(st.booleans()) else ne
    kind = draw(DESTINATION_KINDS)
    dst_pad = draw(PADS) if kind != "contiguous" else (0, 0, 0, 0)
    dst_offset = draw(OFFSETS) if kind != "contiguous" else 0
    params: tuple = (("dst_ne", dst_ne), ("dst_pad", dst_pad), ("dst_offset", dst_offset))
    if kind == "permuted":
        params += (("dst_perm", draw(ANY_PERM)),)
    return params


DESTINATION_KINDS = st.sampled_from(["contiguous", "strided", "permuted"])
ANY_PERM = st.sampled_from(ALL_PERMS)


@st.composite
def cpy_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    ne = draw(shapes(max_elements=MAX_ELEMENTS // 2))
    params = draw(cpy_destination(ne))
    case = OpCase("CPY", (spec(sig.srcs[0], ne, draw(_layout("CPY"))),), params=params, dst=sig.dst)
    case = finish(draw, case)
    if sig.dst == "i32":  # a NaN or inf cast to I32 is undefined behaviour in C: draw finite values
        case = replace(case, distribution=draw(NO_NAN_INF))
    big = grid_shape(draw)  # the grid-limit regime, drawn last: a packed source just past 65,536 elements
    if big:
        case = replace(case, inputs=(spec(sig.srcs[0], big),), params=draw(cpy_destination(big)))
    return case


# ---- REPEAT, CONCAT, PAD, UPSCALE: outputs of a new shape ----------------------------------------
@st.composite
def repeat_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    ne = draw(shapes(max_elements=MAX_ELEMENTS // 8, max_outer=4))
    ne = grid_shape(draw) or ne  # the grid-limit regime (no room left to repeat: every rep is 1)
    reps, budget = [], MAX_ELEMENTS // _count(ne)
    for _ in range(4):
        r = draw(st.integers(1, max(1, min(4, budget))))
        reps.append(r)
        budget //= r
    target = tuple(n * r for n, r in zip(ne, reps, strict=True))
    src = spec(sig.srcs[0], ne, draw(_layout("REPEAT")))
    return finish(draw, OpCase("REPEAT", (src,), params=(("ne", target),), dst=sig.dst))


@st.composite
def equal_extents_shape(draw: st.DrawFn, dim: int, *, budget: int) -> Ne:
    """A shape whose dim ``dim`` has the same extent (> 1) as another dim: with b the same shape, a
    concatenation along either is valid and only the values show which one the device took."""
    other = draw(st.sampled_from([d for d in range(4) if d != dim]))
    n = draw(st.sampled_from([2, 3, 4, 5, 7, 8, 16, 31]))
    rest = max(1, budget // (n * n))
    ne = list(draw(shapes(max_ne0=rest, max_elements=rest, max_outer=5)))
    ne[dim] = ne[other] = n
    return tuple(ne)  # type: ignore[return-value]


@st.composite
def concat_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    dim = draw(st.integers(0, 3))
    if draw(st.booleans()):  # equal extents: the joined dim's size shared by another dim, b shaped as a
        ne_a = draw(equal_extents_shape(dim, budget=MAX_ELEMENTS // 4))
        ne_b = ne_a
    else:
        ne_a = draw(shapes(max_elements=MAX_ELEMENTS // 4, max_outer=5))
        ne_b = tuple(draw(st.integers(1, max(1, min(2 * ne_a[d], 64)))) if d == dim else ne_a[d]
                     for d in range(4))  # type: ignore[assignment]
    a = spec(sig.srcs[0], ne_a, draw(_layout("CONCAT")))
    b = spec(sig.srcs[1], ne_b, draw(_layout("CONCAT")))
    case = finish(draw, OpCase("CONCAT", (a, b), params=(("dim", dim),), dst=sig.dst))
    big = grid_shape(draw)  # the grid-limit regime, drawn last: two packed halves just past 65,536 elements each
    return replace(case, inputs=(spec(sig.srcs[0], big), spec(sig.srcs[1], big))) if big else case


@st.composite
def wrapping_pads(draw: st.DrawFn, ne: tuple[int, ...], *, budget: int, dims: tuple[int, ...] | None = None) -> Ne:
    """Circular paddings for a tensor now ``ne`` big, with the corners of the source's ``dims``: 0,
    one short of the dim, the dim, one past it, twice it plus one; all within ``budget`` elements."""
    size, pads = list(ne), []
    for d, n in enumerate(dims or ne):
        room = max(0, budget // (_count(tuple(size)) // size[d]) - size[d])  # type: ignore[arg-type]
        corners = [p for p in (0, n - 1, n, n + 1, 2 * n + 1) if 0 <= p <= room]
        p = draw(st.one_of(st.sampled_from(corners), st.integers(0, min(room, 3 * n))))
        size[d] += p
        pads.append(p)
    return tuple(pads)  # type: ignore[return-value]


@st.composite
def pad_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    ne = draw(shapes(max_elements=MAX_ELEMENTS // 4, max_outer=5))
    ne = grid_shape(draw) or ne  # the grid-limit regime (no room left to pad: every padding is 0)
    form = draw(st.sampled_from(["", "pad_ext", "circular", "pad_ext_circular"]))
    if "circular" in form:  # paddings at and beyond the dim: they wrap around once or several times
        rp = draw(wrapping_pads(ne, budget=MAX_ELEMENTS // 2))
        padded = tuple(n + r for n, r in zip(ne, rp, strict=True))
        lp = draw(wrapping_pads(padded, budget=MAX_ELEMENTS // 2, dims=ne)) if form == "pad_ext_circular" else (0,) * 4
    else:
        rp = draw(grown(ne, most=3, budget=MAX_ELEMENTS // 2))
        padded = tuple(n + r for n, r in zip(ne, rp, strict=True))
        lp = draw(grown(padded, most=2, budget=MAX_ELEMENTS // 2)) if form == "pad_ext" else (0, 0, 0, 0)  # type: ignore[arg-type]
    src = spec("f32", ne, draw(_layout("PAD")))
    return finish(draw, OpCase("PAD", (src,), params=(("lp", lp), ("rp", rp)), form=form))


# antialias twice: its filter shows only when shrinking, which it gets about half the time
UPSCALE_KINDS = st.sampled_from(["bilinear", "bicubic", "antialias", "nearest", "antialias"])


@st.composite
def upscale_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    ne = draw(shapes(max_ne0=512, max_elements=MAX_ELEMENTS // 8, max_outer=5))
    src = spec("f32", ne, draw(_layout("UPSCALE")))
    kind = draw(UPSCALE_KINDS)  # antialias: bilinear only
    mode = (("mode", "bilinear" if kind == "antialias" else kind), ("align_corners", draw(st.booleans())),
            ("antialias", kind == "antialias"))
    # interpolating modes are drawn without NaN/inf (see the UPSCALE notes)
    values = NO_NAN_INF if kind != "nearest" else None
    most_sf = min(4, int((MAX_ELEMENTS / _count(ne)) ** 0.5))
    big = grid_shape(draw)  # the grid-limit regime: an output of just over 65,536 elements
    if big:
        case = OpCase("UPSCALE", (src,), params=(("ne", big), *mode), form="interpolate")
        return finish(draw, case, distribution=values)
    # antialias mostly shrinks (below), where its filter acts; now and then it enlarges
    if most_sf >= 2 and draw(st.booleans()) and (kind != "antialias" or draw(st.booleans())):
        sf = draw(st.integers(2, most_sf))  # ggml_upscale asserts a factor > 1
        return finish(draw, OpCase("UPSCALE", (src,), params=(("sf", sf), *mode)), distribution=values)
    out: list[int] = []
    for n in ne:  # up to about twice each size, or down to 1, within the element budget
        room = MAX_ELEMENTS // max(1, _count((*out, 1, 1, 1, 1)[:4]))  # type: ignore[arg-type]
        # the antialias filter acts only when shrinking: its sizes shrink here (sf above enlarges)
        top = n if kind == "antialias" else 2 * n + 3
        out.append(draw(st.integers(1, max(1, min(top, room)))))
    case = OpCase("UPSCALE", (src,), params=(("ne", tuple(out)), *mode), form="interpolate")
    return finish(draw, case, distribution=values)


# ---- GET_ROWS and ACC ----------------------------------------------------------------------------
TALL_TABLE_ROWS: tuple[int, ...] = (1001, 1024, 1025, 2048, 4097, 8191)  # past 1,000 rows: embedding tables are tall
NIGHTLY_TABLE_ROWS = (32000, 65536, 65537, 70000)  # vocabularies of real models


@functools.cache
def _table_rows(edges: tuple[int, ...]) -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(edges), st.integers(1001, max(edges)))


@st.composite
def tall_table(draw: st.DrawFn) -> Ne:
    """A tall, narrow table within the element budget: over a thousand rows of a few elements (tens of
    thousands of rows in the nightly profile)."""
    budget, edges = MAX_ELEMENTS // 2, TALL_TABLE_ROWS
    if nightly_sizes():
        budget, edges = 1 << 21, TALL_TABLE_ROWS + NIGHTLY_TABLE_ROWS
    ne1 = draw(_table_rows(edges))
    ne0 = min(draw(st.integers(1, 16)), max(1, budget // ne1))  # fixed bounds, clamped: shrinking
    return (ne0, ne1, 1, 1)


TALL_TABLE = tall_table()
MANY_INDICES = GRID_BLOCKS + 1  # more indices than a grid dimension has blocks


@st.composite
def get_rows_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    # both branches drawn, bounds fixed and clamped: the choices do not depend on the branch (shrinking)
    tall, tall_rows = draw(TALL_TABLE), draw(st.integers(1, 64))
    usual = draw(shapes(max_elements=MAX_ELEMENTS // 2, max_outer=6))
    usual_rows = min(draw(st.integers(1, 12)), max(1, MAX_ELEMENTS // _count((usual[0], 1, usual[2], usual[3]))))
    ne, n_rows = (tall, tall_rows) if one_in(draw, 3) else (usual, usual_rows)
    if one_in(draw, GRID_EVERY):  # the grid regimes: 65,537 indices into rows of one or two elements
        ne, n_rows = (min(tall[0], 2), tall[1], 1, 1), MANY_INDICES
    data = spec(sig.srcs[0], ne, draw(_layout("GET_ROWS")))
    rows = spec("i32", (n_rows, ne[2], ne[3], 1), draw(input_layouts(InputLayouts.ANY)))
    return finish(draw, OpCase("GET_ROWS", (data, rows), dst=sig.dst))


@st.composite
def acc_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    """b added to a sub-block of a (every k-th row/plane/batch), or to a free-form strided run of
    a's flat storage; byte strides and offset as ggml_acc takes them."""
    ne_b = draw(shapes(max_elements=MAX_ELEMENTS // 8, max_outer=4))
    big = grid_shape(draw)  # the grid-limit regime: b (and so a) past 65,536 elements, b packed in a
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
    params = (("nb1", 4 * nb[1]), ("nb2", 4 * nb[2]), ("nb3", 4 * nb[3]), ("offset", 4 * offset))
    a = spec("f32", ne_a)  # type: ignore[arg-type]
    b = spec("f32", ne_b, draw(input_layouts(InputLayouts.ANY)))
    form = draw(st.sampled_from(["", "inplace"]))
    return finish(draw, OpCase("ACC", (a, b), params=params, form=form))


# ---- ARANGE, ARGSORT, SUM_ROWS -------------------------------------------------------------------
@st.composite
def arange_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    start = f32(draw(st.one_of(st.sampled_from([0.0, 1.0, -7.3, 0.1]), st.floats(-1000, 1000, width=32))))
    step = f32(draw(st.one_of(st.sampled_from([1.0, 0.1, 0.37, 2.0, 0.013]), st.floats(f32(1e-3), 64, width=32))))
    n = draw(st.one_of(st.sampled_from([1, 2, 31, 32, 33, 512, 1024]), st.integers(1, 4096)))
    if one_in(draw, GRID_EVERY):  # the grid-limit regime: just over 65,536 values
        n += GRID_BLOCKS
    frac = draw(st.sampled_from([0.0, 0.25, 0.5, 0.999]))
    stop = f32(start + (n - 1 + frac) * step + step * 0.5)
    if not stop > start:  # a large start swallows a tiny span in f32: take the next f32 up
        stop = float(np.nextafter(np.float32(start), np.float32(np.inf)))
    params = (("start", start), ("stop", stop), ("step", step))
    return finish(draw, OpCase("ARANGE", (), params=params))


LONG_ROWS = (1025, 1536, 2047, 2048, 3000, 4096, 4097, 6000, 8192)  # past one 1,024-wide block
NIGHTLY_LONG_ROWS = (16384, 32768, 65537, 131072)  # vocabulary-wide rows (top-k sampling)


@st.composite
def long_rows(draw: st.DrawFn) -> Ne:
    """Rows longer than 1,024 (where one block of threads no longer covers a row), over 4,096 now and
    then; up to 131k in the nightly profile. One or two rows."""
    edges = LONG_ROWS + (NIGHTLY_LONG_ROWS if nightly_sizes() else ())
    ne0 = draw(st.one_of(st.sampled_from(edges), st.integers(1025, max(edges))))
    return (ne0, draw(st.integers(1, 2)), 1, 1)


@st.composite
def reduced_rows(draw: st.DrawFn, *, max_elements: int) -> Ne:
    """Half the time a row longer than 1,024 elements, else any shape (ARGSORT, SUM_ROWS)."""
    long, usual = draw(long_rows()), draw(shapes(max_elements=max_elements))  # both: shrinking
    return long if draw(st.booleans()) else usual


@st.composite
def argsort_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    ne = draw(reduced_rows(max_elements=MAX_ELEMENTS // 2))
    order = draw(st.sampled_from(["asc", "desc"]))
    src = spec("f32", ne, draw(_layout("ARGSORT")))
    case = finish(draw, OpCase("ARGSORT", (src,), params=(("order", order),), dst="i32"))
    # one signature only: a larger share keeps the 4,096-row regime in each 30-example draw
    return many_rows_branch(draw, long_row_branch(draw, case, every=3))


@st.composite
def sum_rows_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    ne = draw(reduced_rows(max_elements=MAX_ELEMENTS))
    case = finish(draw, OpCase("SUM_ROWS", (spec("f32", ne, draw(_layout("SUM_ROWS"))),)))
    return many_rows_branch(draw, long_row_branch(draw, case))


def get_rows_inputs(case: OpCase, rng: np.random.Generator) -> list[np.ndarray]:
    """Data as usual; indices uniform in ``[0, ne1)``, at least one repeated when there are two, and the
    table's last row among them when there are three (where a truncated table or an off-by-one shows)."""
    data_spec, index_spec = case.inputs
    data = plain_input(rng, data_spec, case)
    rows = rng.integers(0, data_spec.ne[1], size=index_spec.np_shape, dtype=np.int32)
    if rows.size >= 2:
        rows.flat[-1] = rows.flat[0]  # a duplicate: the same row gathered twice
    if rows.size >= 3:
        rows.flat[1] = data_spec.ne[1] - 1
    return [data, rows]


def argsort_inputs(case: OpCase, rng: np.random.Generator) -> list[np.ndarray]:
    """About half the rows drawn from a handful of values, so they are full of ties (std::sort is
    unstable from 17 elements on: tied indices come back in no particular order)."""
    (spec,) = case.inputs
    x = plain_input(rng, spec, case)
    rows = x.reshape(-1, spec.ne[0])
    tied = rng.random(rows.shape[0]) < 0.5
    rows[tied] = rng.integers(-3, 4, size=(int(tied.sum()), spec.ne[0])) * 0.5
    return [rows.reshape(spec.np_shape)]


def _ggml_index(flat: int, shape: tuple[int, ...]) -> list[int]:
    return [int(i) for i in reversed(np.unravel_index(flat, shape))]


def judge_argsort(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray, device: np.ndarray,
                  tol: Tolerance | None = None) -> Metrics:
    """An exact check: ``tol`` (the row handed to every comparator) bounds nothing here."""
    x = np.asarray(inputs[0], dtype=np.float64)
    g = np.asarray(golden, dtype=np.int64)
    d = np.asarray(device, dtype=np.int64)
    m = Metrics(n=int(g.size))
    if d.shape != g.shape:
        m.passed, m.error_ratio = False, float("inf")
        m.detail = f"shape mismatch: device {d.shape} vs golden {g.shape} (numpy order)"
        return m
    if g.size == 0:
        return m
    ne0 = g.shape[-1]
    in_range = (d >= 0) & (d < ne0)
    is_perm = np.all(np.sort(np.where(in_range, d, -1), axis=-1) == np.arange(ne0), axis=-1, keepdims=True)
    want = np.take_along_axis(x, g, axis=-1)
    got = np.take_along_axis(x, np.where(in_range, d, 0), axis=-1)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    bad = ~(in_range & same & is_perm)
    m.n_bad = int(bad.sum())
    m.passed = m.n_bad == 0
    if not m.passed:
        flat = int(np.argmax(bad.ravel()))
        m.worst_index = _ggml_index(flat, g.shape)
        m.error_ratio = float("inf")
        m.worst_device, m.worst_golden = float(d.flat[flat]), float(g.flat[flat])
        rows_not_perm = int((~is_perm).sum())
        where = "[" + ",".join(map(str, m.worst_index)) + "]"
        m.detail = (
            f"out{where}={int(d.flat[flat])} selects value {float(got.flat[flat])!r}, but the sorted row has "
            f"{float(want.flat[flat])!r} there (golden index {int(g.flat[flat])}); {m.n_bad}/{m.n} positions wrong, "
            f"{rows_not_perm} row(s) not a permutation of 0..{ne0 - 1}"
        )
    return m


register("NONE", "VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE", "DUP", "CONT", group="layout_ops", draw=view_case)
register("CPY", group="cpy", draw=cpy_case)
register("REPEAT", group="resizing", draw=repeat_case)
register("CONCAT", group="resizing", draw=concat_case)
register("PAD", group="resizing", draw=pad_case)
register("UPSCALE", group="resizing", draw=upscale_case)
register("GET_ROWS", group="gather_scatter", draw=get_rows_case, make_inputs=get_rows_inputs)
register("ACC", group="gather_scatter", draw=acc_case)
register("ARANGE", group="sequences", draw=arange_case)
register("ARGSORT", group="sequences", draw=argsort_case, make_inputs=argsort_inputs, judge=judge_argsort)
register("SUM_ROWS", group="sequences", draw=sum_rows_case)

"""Hypothesis strategies shared by every op family: shapes, layouts, tiling broadcasts, data.

Strategies construct valid values rather than filtering invalid ones, and take keyword-only
bounds. Shapes lean towards the sizes where kernels break (1, odd, around 32, 512 and 1024).

Shrinking: a failure must reach the smallest case (few elements, a contiguous layout, plain data).
Hypothesis shrinks the recorded choices towards each one's simplest value, so (1) the simplest
choice comes first (sizes from 1, layouts from contiguous, ``uniform`` data before ``special``);
(2) the number and bounds of the choices do not depend on earlier values: a choice drawn only in
some branch, or with bounds set by an earlier size, shifts every later choice when the shrinker
changes that earlier one, and the attempt then ends short (an invalid example) or means something
else. Draw every choice, then clamp or ignore it (:func:`_shapes`, :func:`_layouts`).
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st

from conformance.data import DISTRIBUTIONS
from golden import dtypes
from golden.case import Layout, Ne, OpCase, TensorSpec
from golden.geometry import storage_of
from golden.spec import GRID_BLOCKS, GRID_ROWS, InputLayouts

EDGE_ROW_SIZES = (1, 2, 3, 5, 7, 16, 31, 32, 33, 63, 64, 127, 128, 255, 256, 511, 512, 513, 1023, 1024, 1025,
                  2047, 2048, 3000, 4096)
IDENTITY: Ne = (0, 1, 2, 3)
# permutations that keep dim 0 innermost (ops whose rows must stay contiguous accept these)
ROW_KEEPING_PERMS: tuple[Ne, ...] = ((0, 2, 1, 3), (0, 1, 3, 2), (0, 3, 2, 1), (0, 2, 3, 1), (0, 3, 1, 2))
ALL_PERMS: tuple[Ne, ...] = ROW_KEEPING_PERMS + ((1, 0, 2, 3), (2, 0, 1, 3), (1, 2, 0, 3), (3, 1, 2, 0))


def _draws_independent_of_imports() -> None:
    """Hypothesis (6.131 on) sometimes draws a constant found in the source of the local modules
    loaded so far (``sys.modules``), so a derandomized draw changed with what else a process had
    imported: the regime coverage test drew other binary-op cases once tests/test_capabilities.py
    was collected with it, and a plug-in device module changes the suite's draws. The pool is held
    empty, so a test's draws depend on the test alone (Hypothesis's built-in constants still apply)."""
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants
    except ImportError:  # a Hypothesis without source constants: nothing to pin
        return
    if hasattr(providers, "_get_local_constants"):
        empty = Constants()
        providers._get_local_constants = lambda: empty


_draws_independent_of_imports()


NIGHTLY_MIN_EXAMPLES = 400  # the nightly profile's max_examples


def nightly_sizes() -> bool:
    """Whether the running test has the nightly profile's size (its settings are the loaded profile's in
    the suite): strategies then draw their big regimes at full size (70k-row tables, 200k-wide softmax
    rows, 16M-element tensors, 4096×8192 weights); dev and ci draw small instances of the same regimes."""
    return settings().max_examples >= NIGHTLY_MIN_EXAMPLES


def one_in(draw: st.DrawFn, n: int) -> bool:
    """True in about one draw of ``n``; False is what Hypothesis shrinks to (a failure found in a rare
    regime shrinks within it, while the common branch stays the minimal example)."""
    return draw(st.integers(1, n)) == n


def f32(value: float) -> float:
    """A float parameter as ggml stores it (op params are f32)."""
    return float(np.float32(value))


# Strategy objects are built once per distinct argument set and reused: Hypothesis validates a
# new strategy object on its first draw, which used to cost more than the draws themselves.
@functools.cache
def _edge_or_anywhere(max_ne0: int, multiple_of: int) -> st.SearchStrategy[int]:
    edge = tuple(n for n in EDGE_ROW_SIZES if n <= max_ne0 and n % multiple_of == 0) or (multiple_of,)
    top = max(1, max_ne0 // multiple_of)
    anywhere = st.integers(1, top) if multiple_of == 1 else st.integers(1, top).map(lambda k: k * multiple_of)
    return st.one_of(st.sampled_from(edge), anywhere)


def row_size(*, max_ne0: int = 4096, multiple_of: int = 1) -> st.SearchStrategy[int]:
    """A row size from the edge list (sizes where kernels break) or anywhere up to ``max_ne0``."""
    return _edge_or_anywhere(max_ne0, multiple_of)


@functools.cache
def _outer_dim(max_outer: int) -> st.SearchStrategy[int]:
    return st.integers(1, max(1, max_outer))


@st.composite
def _shapes(draw: st.DrawFn, max_ne0: int, max_elements: int, max_outer: int, multiple_of: int) -> Ne:
    ne0 = draw(_edge_or_anywhere(max_ne0, multiple_of))
    budget = max(1, max_elements // ne0)
    outer = []
    for _ in range(3):
        # drawn with fixed bounds and clamped to the budget: a smaller ne0 changes no later choice
        d = min(draw(_outer_dim(max_outer)), budget)
        outer.append(d)
        budget = max(1, budget // d)
    return (ne0, outer[0], outer[1], outer[2])


@functools.cache
def shapes(*, max_ne0: int = 4096, max_elements: int = 1 << 15, max_outer: int = 7, multiple_of: int = 1,
           ) -> st.SearchStrategy[Ne]:
    """A 4-d ggml shape: a row size from the edge list or anywhere, and small outer dims."""
    return _shapes(max_ne0, max_elements, max_outer, multiple_of)


LAYOUT_KINDS = st.sampled_from(["contiguous", "contiguous", "permuted", "view", "permuted_view"])
# every padding of up to 3 elements per dim, no padding first (one draw; shrinks towards less padding)
PADS: st.SearchStrategy[Ne] = st.sampled_from(sorted(itertools.product(range(4), repeat=4), key=lambda p: (sum(p), p)))
OFFSETS = st.integers(0, 5)


@st.composite
def _layouts(draw: st.DrawFn, perms: tuple[Ne, ...], allow_view: bool) -> Layout:
    # every choice is drawn whatever the kind (see the module's note on shrinking); the kind says
    # which of them the layout uses, so shrinking the kind to contiguous drops the rest in one step
    kind = draw(LAYOUT_KINDS)
    perm = draw(_perm_choice(perms)) if perms else IDENTITY
    pad, offset = draw(PADS), draw(OFFSETS)
    permuted = kind in ("permuted", "permuted_view")
    view = kind in ("view", "permuted_view") and allow_view
    return Layout(perm=perm if permuted else IDENTITY, pad=pad if view else (0, 0, 0, 0), offset=offset if view else 0)


@functools.cache
def _perm_choice(perms: tuple[Ne, ...]) -> st.SearchStrategy[Ne]:
    return st.sampled_from(perms)


@functools.cache
def layouts(*, perms: tuple[Ne, ...] = ROW_KEEPING_PERMS, allow_view: bool = True) -> st.SearchStrategy[Layout]:
    """Contiguous most often; otherwise a permute, a padded-stride view with offset, or both."""
    return _layouts(perms, allow_view)


@functools.lru_cache(maxsize=8192)
def _tile_choice(n: int) -> st.SearchStrategy[int]:
    """1, the full size, or any divisor of ``n`` (1 and ``n`` weighted up; 1 first, where shrinking goes)."""
    return st.sampled_from((1, n) + divisors(n) if n <= 4096 else (1, n))


@st.composite
def _tiling_shape(draw: st.DrawFn, ne: Ne) -> Ne:
    return tuple(draw(_tile_choice(n)) if n > 1 else 1 for n in ne)  # type: ignore[return-value]


@functools.lru_cache(maxsize=8192)
def tiling_shape(ne: Ne) -> st.SearchStrategy[Ne]:
    """A shape that ggml_can_repeat tiles up to ``ne``: each dim a divisor (1, full, or between)."""
    return _tiling_shape(ne)


@functools.lru_cache(maxsize=8192)
def divisor_of(n: int) -> st.SearchStrategy[int]:
    """Any divisor of ``n`` (1 first)."""
    return st.sampled_from(divisors(n))


@functools.lru_cache(maxsize=1 << 16)
def divisors(n: int) -> tuple[int, ...]:
    """The divisors of ``n`` in increasing order."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(small + [n // d for d in reversed(small) if d * d != n])


def input_layouts(kind: InputLayouts) -> st.SearchStrategy[Layout]:
    """Every layout ggml's constructor accepts for the op (``OpSpec.input_layouts``): the full domain,
    whatever one backend's kernel mishandles (those are that backend's known bugs)."""
    if kind is InputLayouts.CONTIGUOUS:
        return CONTIGUOUS_ONLY
    if kind is InputLayouts.PADDED_ROWS:
        return padded_rows()
    if kind is InputLayouts.ANY:
        return layouts(perms=ALL_PERMS)
    return layouts(perms=ROW_KEEPING_PERMS)


CONTIGUOUS_ONLY = st.just(Layout())
_PADDED_ROWS = st.builds(lambda p, o: Layout(pad=(p, 0, 0, 0), offset=o), st.integers(0, 3), OFFSETS)


def padded_rows() -> st.SearchStrategy[Layout]:
    """Rows at a uniform stride (padding in dim 0) at an offset, planes packed, no permute."""
    return _PADDED_ROWS


# Weight tensor names as llama.cpp gives them: ggml-cann picks its NZ weight path (GGML_CANN_WEIGHT_NZ,
# on by default) by matching such names, a path unnamed test tensors never reach.
weight_names = st.sampled_from(["", "blk.0.attn_q.weight", "blk.3.ffn_up.weight", "blk.1.attn_output.weight",
                                "output.weight"])


# plain data first (what a shrunk failure shows unless the fault needs more), special values last
DISTRIBUTION_ORDER = ("uniform", "dense", "wide", "special")
distributions = st.sampled_from([d for d in DISTRIBUTION_ORDER if d in DISTRIBUTIONS]
                                + sorted(set(DISTRIBUTIONS) - set(DISTRIBUTION_ORDER)))
data_seeds = st.integers(0, 2**32 - 1)


# rows at or past the largest common block size (golden.spec.ROW_BLOCKS), for the row>=4096 regime
LONG_ROWS = st.sampled_from((4096, 4097, 6000, 8192))


def long_row_branch(draw: st.DrawFn, case: OpCase, *, inputs: tuple[int, ...] = (0,), every: int = 6,
                    max_elements: int = 1 << 15) -> OpCase:
    """In about one case of ``every``, the rows of ``inputs`` lengthened to a block of 4,096 or more
    (outer dims cut to keep ``max_elements``). Drawn after every other choice of the case, and the
    simplest value of both choices keeps the case as drawn: the existing draws and the shrink target
    do not change, and a failure found here shrinks back to ordinary rows if it can."""
    take, ne0 = one_in(draw, every), draw(LONG_ROWS)
    if not take:
        return case
    from dataclasses import replace

    changed = list(case.inputs)
    for i in inputs:
        t = changed[i]
        budget, outer = max(1, max_elements // ne0), []
        for d in t.ne[1:]:
            outer.append(min(d, budget))
            budget = max(1, budget // outer[-1])
        changed[i] = replace(t, ne=(ne0, outer[0], outer[1], outer[2]))
    return replace(case, inputs=tuple(changed))


# row lengths of the grid-limit shapes: a column, rows of a few tiles, and one row past the limit
GRID_NE0 = st.sampled_from((1, 257, 4096, 4097, GRID_BLOCKS + 1))
# the share of cases an op's grid-limit branch takes in every profile: low, so the ci profile stays small
# on average, and enough that 30 examples reach it on any seed (tests/test_regime_coverage.py)
GRID_EVERY = 3


def grid_shape(draw: st.DrawFn, *, every: int = GRID_EVERY, rows: st.SearchStrategy[int] = GRID_NE0) -> Ne | None:
    """In about one draw of ``every``, a 2-d shape of just over golden.spec.GRID_BLOCKS elements (the
    fewest rows of a drawn length that exceed it), else None. Both choices are drawn either way and
    the simplest keeps the usual case (see the module's note on shrinking)."""
    take, ne0 = one_in(draw, every), draw(rows)
    if not take:
        return None
    return (ne0, GRID_BLOCKS // ne0 + 1, 1, 1)


# row lengths of the many-rows shapes (golden.spec.many_rows): short rows, so a case stays near 65,536 elements
MANY_ROWS_NE0 = st.sampled_from((1, 2, 3, 5))


def many_rows_branch(draw: st.DrawFn, case: OpCase, *, inputs: tuple[int, ...] = (0,),
                     every: int = GRID_EVERY) -> OpCase:
    """In about one case of ``every``, more rows in input ``inputs[0]`` than one grid dimension has blocks
    (golden.spec.GRID_ROWS): its rows shortened to a few elements and its dim 1 lengthened until dims 1-3
    hold more than that; the other ``inputs`` (a mask, labels) take the same row length and the same
    change of dim 1, so their shapes keep their relation to it. A case whose rows are already longer than
    1,024 (the long-row regimes) is left as drawn, so neither branch takes the other's share. Drawn after
    every other choice; the simplest value keeps the case as drawn (see long_row_branch)."""
    take, ne0 = one_in(draw, every), draw(MANY_ROWS_NE0)
    if not take or case.inputs[inputs[0]].ne[0] > 1024:
        return case
    from dataclasses import replace

    first = case.inputs[inputs[0]].ne
    rows = GRID_ROWS // (first[2] * first[3]) + 1
    changed = list(case.inputs)
    for i in inputs:
        t = changed[i]
        changed[i] = replace(t, ne=(ne0, t.ne[1] - first[1] + rows, t.ne[2], t.ne[3]))
    return replace(case, inputs=tuple(changed))


# dot-product lengths of the many-weight-rows shapes: short, so a case of 65,537 rows stays near a million weights
GRID_K = st.sampled_from((4, 16, 17))


# a lower share than GRID_EVERY: products have several signatures to reach it in, and these cases are the
# largest of the ci profile (conformance/test_regimes.py draws the regime in every run whatever the share)
WEIGHT_ROWS_EVERY = 8
# the (op, regime) pairs whose branch draws float signatures only (quantized weights of these sizes would be
# millions of elements of blocks): conformance/test_regimes.py draws them from those signatures
FLOAT_ONLY_REGIMES = frozenset({("MUL_MAT", "rows>65535"), ("MUL_MAT_ID", "rows>65535"),
                                ("OUT_PROD", "elements>65536")})


def many_weight_rows(draw: st.DrawFn, *, every: int = WEIGHT_ROWS_EVERY) -> int | None:
    """In about one draw of ``every``, a short dot-product length K for a product with more weight rows
    than one grid dimension has blocks (golden.matmul.WEIGHT_ROWS_PAST_GRID: a vocabulary projection),
    else None; both choices drawn either way (shrinking)."""
    take, k = one_in(draw, every), draw(GRID_K)
    return k if take else None


# partial tiles of matrix products (golden.matmul's regimes): K past 32- and 256-wide blocks and not a
# multiple of 32, weight rows past a 64-row output tile, src1 columns past 32 (the matrix-matrix path)
PARTIAL_K = st.sampled_from((257, 300, 383, 511))
PARTIAL_ROWS = st.sampled_from((65, 100, 129))
PARTIAL_COLS = st.sampled_from((33, 47, 65, 100))
TILE_EVERY = GRID_EVERY  # the share of an op's cases its partial-tile branch takes


def partial_tiles(draw: st.DrawFn, *, every: int = TILE_EVERY) -> tuple[int, int, int] | None:
    """In about one draw of ``every``, (K, rows, columns) of a matrix product with a partial last tile
    in each, else None; every choice drawn either way (shrinking)."""
    take, k, rows, cols = one_in(draw, every), draw(PARTIAL_K), draw(PARTIAL_ROWS), draw(PARTIAL_COLS)
    return (k, rows, cols) if take else None


ALIAS_OFFSETS = st.integers(0, 64)


def alias_branch(draw: st.DrawFn, case: OpCase, *, source: int = 0, target: int = 1, every: int = 8) -> OpCase:
    """In about one case of ``every``, input ``target`` made a view into input ``source``'s allocation
    (``Layout.alias``) at a drawn element offset: overlapping sources, as test-backend-ops runs them.
    Its drawn padding and permute are kept where the view still fits, else dropped. Drawn after every
    other choice; the simplest value keeps the case as drawn. Nothing changes where the inputs'
    dtypes differ or the view cannot fit."""
    take, offset = one_in(draw, every), draw(ALIAS_OFFSETS)
    src, dst = case.inputs[source], case.inputs[target]
    if not take or case.form or src.dtype != dst.dtype or dtypes.is_quantized(src.dtype):
        return case
    if src.layout.alias is not None:
        return case
    from dataclasses import replace

    have = storage_of(src).base_nbytes
    for layout in (replace(dst.layout, alias=source, offset=offset), Layout(alias=source, offset=offset),
                   Layout(alias=source)):
        if storage_of(replace(dst, layout=layout)).base_nbytes <= have:
            inputs = list(case.inputs)
            inputs[target] = replace(dst, layout=layout)
            return replace(case, inputs=tuple(inputs))
    return case


def special_branch(draw: st.DrawFn, case: OpCase, *, every: int = 6) -> OpCase:
    """In about one case of ``every``, the case's data switched to ``special`` values: a second way
    into the special-values regime for ops whose other draws make the distribution's own choice
    rarely land there. Drawn after every other choice; its simplest value keeps the case as drawn."""
    if not one_in(draw, every):
        return case
    from dataclasses import replace

    return replace(case, distribution="special")


def spec(dtype: str, ne: Ne, layout: Layout | None = None, name: str = "") -> TensorSpec:
    return TensorSpec(dtype, ne, layout or Layout(), name)


def finish(draw: st.DrawFn, case: OpCase, *, distribution: st.SearchStrategy[str] | None = None) -> OpCase:
    """Attach a drawn data seed and distribution to a case."""
    from dataclasses import replace

    chosen = distribution if distribution is not None else distributions
    return replace(case, data_seed=draw(data_seeds), distribution=draw(chosen))

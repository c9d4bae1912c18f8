"""Hypothesis strategies shared by every op family: shapes, layouts, tiling broadcasts, data.

Strategies construct valid values rather than filtering invalid ones, and take keyword-only
bounds. Shapes lean towards the sizes where kernels break (1, odd, around 32, 512 and 1024).
"""

from __future__ import annotations

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st

from conformance.data import DISTRIBUTIONS
from golden.case import Layout, Ne, OpCase, TensorSpec
from golden.spec import InputLayouts

EDGE_ROW_SIZES = (1, 2, 3, 5, 7, 16, 31, 32, 33, 63, 64, 127, 128, 255, 256, 511, 512, 513, 1023, 1024, 1025,
                  2047, 2048, 3000, 4096)
IDENTITY: Ne = (0, 1, 2, 3)
# permutations that keep dim 0 innermost (ops whose rows must stay contiguous accept these)
ROW_KEEPING_PERMS: tuple[Ne, ...] = ((0, 2, 1, 3), (0, 1, 3, 2), (0, 3, 2, 1), (0, 2, 3, 1), (0, 3, 1, 2))
ALL_PERMS: tuple[Ne, ...] = ROW_KEEPING_PERMS + ((1, 0, 2, 3), (2, 0, 1, 3), (1, 2, 0, 3), (3, 1, 2, 0))


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


@st.composite
def row_size(draw: st.DrawFn, *, max_ne0: int = 4096, multiple_of: int = 1) -> int:
    edge = [n for n in EDGE_ROW_SIZES if n <= max_ne0 and n % multiple_of == 0] or [multiple_of]
    anywhere = st.integers(1, max(1, max_ne0 // multiple_of)).map(lambda k: k * multiple_of)
    return draw(st.one_of(st.sampled_from(edge), anywhere))


@st.composite
def shapes(
    draw: st.DrawFn, *, max_ne0: int = 4096, max_elements: int = 1 << 15, max_outer: int = 7, multiple_of: int = 1,
) -> Ne:
    """A 4-d ggml shape: a row size from the edge list or anywhere, and small outer dims."""
    ne0 = draw(row_size(max_ne0=max_ne0, multiple_of=multiple_of))
    budget = max(1, max_elements // ne0)
    outer = []
    for _ in range(3):
        hi = max(1, min(max_outer, budget))
        d = draw(st.integers(1, hi))
        outer.append(d)
        budget = max(1, budget // d)
    return (ne0, outer[0], outer[1], outer[2])


@st.composite
def layouts(draw: st.DrawFn, *, perms: tuple[Ne, ...] = ROW_KEEPING_PERMS, allow_view: bool = True) -> Layout:
    """Contiguous most often; otherwise a permute, a padded-stride view with offset, or both."""
    kind = draw(st.sampled_from(["contiguous", "contiguous", "permuted", "view", "permuted_view"]))
    perm = IDENTITY
    pad: Ne = (0, 0, 0, 0)
    offset = 0
    if kind in ("permuted", "permuted_view") and perms:
        perm = draw(st.sampled_from(perms))
    if kind in ("view", "permuted_view") and allow_view:
        pad = tuple(draw(st.lists(st.integers(0, 3), min_size=4, max_size=4)))  # type: ignore[assignment]
        offset = draw(st.integers(0, 5))
    return Layout(perm=perm, pad=pad, offset=offset)


@st.composite
def tiling_shape(draw: st.DrawFn, ne: Ne) -> Ne:
    """A shape that ggml_can_repeat tiles up to ``ne``: each dim a divisor (1, full, or between)."""
    out = []
    for n in ne:
        divisors = [d for d in range(1, n + 1) if n % d == 0] if n <= 4096 else [1, n]
        out.append(draw(st.sampled_from([1, n] + divisors)))
    return tuple(out)  # type: ignore[return-value]


def input_layouts(kind: InputLayouts) -> st.SearchStrategy[Layout]:
    """Every layout ggml's constructor accepts for the op (``OpSpec.input_layouts``): the full domain,
    whatever one backend's kernel mishandles (those are that backend's known bugs)."""
    if kind is InputLayouts.CONTIGUOUS:
        return st.just(Layout())
    if kind is InputLayouts.PADDED_ROWS:
        return padded_rows()
    if kind is InputLayouts.ANY:
        return layouts(perms=ALL_PERMS)
    return layouts(perms=ROW_KEEPING_PERMS)


def padded_rows() -> st.SearchStrategy[Layout]:
    """Rows at a uniform stride (padding in dim 0) at an offset, planes packed, no permute."""
    return st.builds(lambda p, o: Layout(pad=(p, 0, 0, 0), offset=o), st.integers(0, 3), st.integers(0, 5))


# Weight tensor names as llama.cpp gives them: ggml-cann picks its NZ weight path (GGML_CANN_WEIGHT_NZ,
# on by default) by matching such names, a path unnamed test tensors never reach.
weight_names = st.sampled_from(["", "blk.0.attn_q.weight", "blk.3.ffn_up.weight", "blk.1.attn_output.weight",
                                "output.weight"])


distributions = st.sampled_from(sorted(DISTRIBUTIONS))
data_seeds = st.integers(0, 2**32 - 1)


def spec(dtype: str, ne: Ne, layout: Layout | None = None, name: str = "") -> TensorSpec:
    return TensorSpec(dtype, ne, layout or Layout(), name)


def finish(draw: st.DrawFn, case: OpCase, *, distribution: st.SearchStrategy[str] | None = None) -> OpCase:
    """Attach a drawn data seed and distribution to a case."""
    from dataclasses import replace

    chosen = distribution if distribution is not None else distributions
    return replace(case, data_seed=draw(data_seeds), distribution=draw(chosen))

"""GLU ops (REGLU, GEGLU, SWIGLU, GEGLU_ERF, GEGLU_QUICK): the case strategy and the input maker.

One-source signatures draw the fused form (``swapped`` both ways, an odd ne0 now and then whose last
element is unused), two-source signatures the split form. Every source gets a layout
``ggml_is_contiguous_1`` accepts (padded rows at an offset). Row halves (nc) come from the edge sizes
(1, odd, around 32/512/1024, up to 4096).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from conformance.cases.registry import register
from conformance.data import DISTRIBUTIONS, floats
from conformance.strategies import finish, input_layouts, one_in, shapes, spec
from golden import catalogue, dtypes
from golden.case import OpCase
from golden.glu import ACTIVATIONS, GATE_SAFE_ACTIVATION, SPLIT
from golden.spec import GRID_BLOCKS, Signature

MAX_ELEMENTS = 1 << 15
BIG_ROWS = st.sampled_from([4096, 4097, 16384])


@st.composite
def glu_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    layouts = input_layouts(catalogue.get(op).input_layouts)
    big_nc = draw(BIG_ROWS)  # drawn either way: the choices do not depend on the branch (shrinking)
    # one case in 2: just past the grid limit (golden.spec.GRID_BLOCKS) in output elements
    usual = draw(shapes(max_elements=MAX_ELEMENTS // 2))
    ne = (big_nc, GRID_BLOCKS // big_nc + 1, 1, 1) if one_in(draw, 2) else usual
    if len(sig.srcs) == 2:
        srcs = (spec(sig.srcs[0], ne, draw(layouts)), spec(sig.srcs[1], ne, draw(layouts)))
        return finish(draw, OpCase(op, srcs, dst=sig.dst, form=SPLIT))
    nc, ne1, ne2, ne3 = ne
    ne0 = 2 * nc + draw(st.sampled_from([0, 0, 0, 1]))  # an odd row leaves its last element out
    src = spec(sig.srcs[0], (ne0, ne1, ne2, ne3), draw(layouts))
    return finish(draw, OpCase(op, (src,), params=(("swapped", draw(st.booleans())),), dst=sig.dst))


def _activation_and_gate(case: OpCase, xs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Views of the activation input and the gate inside the drawn arrays (so they can be edited)."""
    if case.form == SPLIT:
        return xs[0], xs[1]
    a = xs[0]
    nc = a.shape[-1] // 2
    first, second = a[..., :nc], a[..., nc : 2 * nc]
    return (second, first) if case.param("swapped") else (first, second)


def glu_inputs(case: OpCase, rng: np.random.Generator) -> list[np.ndarray]:
    """The case's distribution for both halves (specials included), except that a non-finite gate
    meets only an activation of at least 2^-14: 0·inf and 0·NaN have no agreed value (see golden/glu.py)."""
    op = catalogue.get(case.op)
    xs = [floats(rng, t, case.distribution, op.specials, op.max_abs_input) for t in case.inputs]
    x, g = _activation_and_gate(case, xs)
    with np.errstate(over="ignore", invalid="ignore"):
        act = ACTIVATIONS[case.op](x)
        unsafe = ~np.isfinite(g) & ~(np.abs(act) >= GATE_SAFE_ACTIVATION)
    if unsafe.any():
        lo, hi = DISTRIBUTIONS[case.distribution]
        g[unsafe] = dtypes.round_to(rng.uniform(lo, hi, size=int(unsafe.sum())), case.inputs[-1].dtype)
    return xs


register("REGLU", "GEGLU", "SWIGLU", "GEGLU_ERF", "GEGLU_QUICK", group="glu", draw=glu_case, make_inputs=glu_inputs)

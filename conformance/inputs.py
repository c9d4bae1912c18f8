"""A case's input arrays: the op's own maker where its case module has one, else plain data.

Kept apart from ``conformance/data.py`` (the data primitives the case modules build on), which the
case modules import: the dispatch over ``conformance.cases`` lives here, above both.
"""

from __future__ import annotations

import numpy as np

from conformance import cases
from conformance.data import plain_input
from golden.case import OpCase
from golden.geometry import aliased_values


def make_inputs(case: OpCase, entry: cases.OpCases | None = None) -> list[np.ndarray]:
    """The case's inputs; ``entry``: the op's suite entry where the caller has resolved it already."""
    rng = np.random.default_rng(case.data_seed)
    maker = (entry or cases.lookup(case.op)).make_inputs
    if maker is not None:
        made = maker(case, rng)
    elif case.form == "self":  # src1 is src0 (ggml_add(ctx, a, a)): both inputs hold the same values
        first = plain_input(rng, case.inputs[0], case)
        made = [first, np.array(first, copy=True)]
    else:
        made = [plain_input(rng, spec, case) for spec in case.inputs]
    if any(t.layout.alias is not None for t in case.inputs):
        # an aliased input holds what its view of the source's bytes holds (golden.case.Layout.alias)
        return aliased_values(made, case.inputs)
    return made

"""Structured inputs for the movement and sequence ops: GET_ROWS row indices, ARGSORT ties.

Importing this module registers the makers (``conformance.data.register_maker``).
"""

from __future__ import annotations

import numpy as np

from conformance.data import plain_input, register_maker
from golden.case import OpCase


@register_maker("GET_ROWS")
def get_rows_inputs(case: OpCase, rng: np.random.Generator) -> list[np.ndarray]:
    """Data as usual; indices uniform in ``[0, ne1)`` and at least one repeated when there are two."""
    data_spec, index_spec = case.inputs
    data = plain_input(rng, data_spec, case)
    rows = rng.integers(0, data_spec.ne[1], size=index_spec.np_shape, dtype=np.int32)
    if rows.size >= 2:
        rows.flat[-1] = rows.flat[0]  # a duplicate: the same row gathered twice
    return [data, rows]


@register_maker("ARGSORT")
def argsort_inputs(case: OpCase, rng: np.random.Generator) -> list[np.ndarray]:
    """About half the rows drawn from a handful of values, so they are full of ties (std::sort is
    unstable from 17 elements on: tied indices come back in no particular order)."""
    (spec,) = case.inputs
    x = plain_input(rng, spec, case)
    rows = x.reshape(-1, spec.ne[0])
    tied = rng.random(rows.shape[0]) < 0.5
    rows[tied] = rng.integers(-3, 4, size=(int(tied.sum()), spec.ne[0])) * 0.5
    return [rows.reshape(spec.np_shape)]

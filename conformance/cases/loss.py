"""CROSS_ENTROPY_LOSS: logits of every layout ggml's constructor accepts, and label rows shaped as
training produces them (one-hot targets, label smoothing, soft targets from a teacher's softmax,
and padded rows whose labels are all zero)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from conformance.cases.registry import register
from conformance.data import plain_input
from conformance.strategies import GRID_EVERY, finish, input_layouts, long_row_branch, many_rows_branch, shapes, spec
from golden import catalogue, dtypes
from golden.case import OpCase
from golden.spec import InputLayouts, Signature


@st.composite
def cross_entropy_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    ne = draw(shapes(max_ne0=4096, max_elements=1 << 14))
    logits = spec(sig.srcs[0], ne, draw(input_layouts(catalogue.get(op).input_layouts)))
    labels = spec(sig.srcs[1], ne, draw(input_layouts(InputLayouts.ANY)))
    case = finish(draw, OpCase(op, (logits, labels), dst=sig.dst))
    # row>=4096 by construction, within the strategy's own element budget
    case = long_row_branch(draw, case, inputs=(0, 1), every=GRID_EVERY, max_elements=1 << 14)
    return many_rows_branch(draw, case, inputs=(0, 1))


def label_rows(rng: np.random.Generator, np_shape: tuple[int, ...]) -> np.ndarray:
    """Probability rows over the last axis, one kind per row."""
    n_classes = np_shape[-1]
    rows = int(np.prod(np_shape[:-1]))
    kind = rng.integers(0, 5, size=rows)
    one_hot = np.zeros((rows, n_classes))  # not np.eye(n_classes)[...]: n_classes² elements for rows of 8,192
    one_hot[np.arange(rows), rng.integers(0, n_classes, size=rows)] = 1.0
    smooth = 0.1
    smoothed = one_hot * (1 - smooth) + smooth / n_classes
    logits = rng.normal(0.0, 2.0, size=(rows, n_classes))
    soft = np.exp(logits - logits.max(axis=1, keepdims=True))
    soft /= soft.sum(axis=1, keepdims=True)
    flat = rng.random((rows, n_classes))
    flat /= flat.sum(axis=1, keepdims=True)
    out = np.select([kind[:, None] == 0, kind[:, None] == 1, kind[:, None] == 2, kind[:, None] == 3],
                    [one_hot, smoothed, soft, flat], np.zeros((rows, n_classes)))  # kind 4: an ignored row
    return out.reshape(np_shape)


def cross_entropy_inputs(case: OpCase, rng: np.random.Generator) -> list[np.ndarray]:
    logits, labels = case.inputs
    return [plain_input(rng, logits, case), dtypes.round_to(label_rows(rng, labels.np_shape), labels.dtype)]


register("CROSS_ENTROPY_LOSS", group="cross_entropy_loss", draw=cross_entropy_case, make_inputs=cross_entropy_inputs)

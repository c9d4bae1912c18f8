"""ADD_ID (ggml_add_id: a bias row per routed expert): the golden against its definition, ggml's shape
rules, a bound that rejects the wrong expert's bias, and its error propagation in graph cases."""

from __future__ import annotations

import numpy as np
import pytest

from golden import catalogue
from golden.binary import check_add_id
from golden.case import OpCase, TensorSpec
from golden.graphs.case import propagate


def _case(n: int = 5, n_used: int = 3, n_tokens: int = 4, n_expert: int = 6) -> OpCase:
    return OpCase("ADD_ID", (TensorSpec("f32", (n, n_used, n_tokens, 1)), TensorSpec("f32", (n, n_expert, 1, 1)),
                             TensorSpec("i32", (n_used, n_tokens, 1, 1))), dst="f32")


def _inputs(case: OpCase, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    a_spec, b_spec, ids_spec = case.inputs
    ids = rng.integers(0, b_spec.ne[1], size=ids_spec.np_shape).astype(np.int32)
    return [rng.uniform(-1, 1, a_spec.np_shape).astype(np.float32),
            rng.uniform(-1, 1, b_spec.np_shape).astype(np.float32), ids]


def test_golden_adds_the_bias_row_each_slot_is_routed_to() -> None:
    case = _case()
    a, b, ids = _inputs(case)
    got = catalogue.evaluate(case, [a, b, ids])
    for t in range(4):
        for u in range(3):
            want = a[0, t, u].astype(np.float64) + b[0, 0, ids[0, 0, t, u]]
            np.testing.assert_array_equal(got[0, t, u], want)


@pytest.mark.parametrize("inputs, why", [
    ((TensorSpec("f32", (5, 3, 4, 1)), TensorSpec("f32", (6, 6, 1, 1)), TensorSpec("i32", (3, 4, 1, 1))), "ne0"),
    ((TensorSpec("f32", (5, 3, 4, 1)), TensorSpec("f32", (5, 6, 1, 1)), TensorSpec("i32", (2, 4, 1, 1))), "ne1"),
    ((TensorSpec("f32", (5, 3, 4, 1)), TensorSpec("f32", (5, 6, 1, 1)), TensorSpec("f32", (3, 4, 1, 1))), "I32"),
])
def test_shapes_ggml_add_id_rejects_are_value_errors(inputs: tuple[TensorSpec, ...], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        check_add_id(OpCase("ADD_ID", inputs, dst="f32"), [])


def test_expert_ids_out_of_range_are_rejected() -> None:
    case = _case()
    a, b, ids = _inputs(case)
    ids[0, 0, 0, 0] = 6
    with pytest.raises(ValueError, match=r"in \[0, 6\)"):
        check_add_id(case, [a, b, ids])


def test_bound_rejects_the_neighbouring_experts_bias() -> None:
    # a kernel that reads ids with the wrong stride adds another expert's row: far outside one rounding
    case = _case()
    a, b, ids = _inputs(case)
    exact = catalogue.evaluate(case, [a, b, ids])
    wrong = catalogue.evaluate(case, [a, b, (ids + 1) % 6])
    allowed = catalogue.get("ADD_ID").tolerance_for("f32").allowed(case, [a, b, ids], exact, "f32")
    assert np.all(np.abs(exact.astype(np.float32) - exact) <= allowed)
    assert np.any(np.abs(wrong - exact) > allowed)


def test_propagation_carries_bias_errors_to_the_slots_routed_there_and_ambiguous_ids_anywhere() -> None:
    case = _case()
    a, b, ids = _inputs(case)
    g = catalogue.evaluate(case, [a, b, ids])
    db = np.zeros(b.shape)
    db[0, 0, 2] = 1e-3
    bound = propagate(case, [a, b, ids], [None, db, None], g)
    routed = (ids[0, 0] == 2)[None, :, :, None]
    assert np.all(np.where(routed, bound == 1e-3, bound == 0.0))
    did = np.zeros(ids.shape)
    did[0, 0, 1, 2] = 1.0  # an ARGSORT near tie may choose another expert for token 1, slot 2
    bound = propagate(case, [a, b, ids], [np.full(a.shape, 1e-6), None, did], g)
    assert np.all(np.isinf(bound[0, 1, 2])) and np.all(bound[0, 0] == 1e-6)

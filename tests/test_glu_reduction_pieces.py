"""The GLU and reduction pieces whose semantics are decisions: ARGMAX's tie/NaN verdict, the GLU
gate maker's non-finite rule, ggml's GLU halves and REGLU short-circuit, L2_NORM's eps placement,
and the COUNT_EQUAL known-bug predicate."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.cases.glu import glu_inputs
from conformance.cases.reduction import judge_argmax
from device.ggml.known_bugs_cpu import _count_equal_rows_missed
from golden import catalogue, glu, reduction
from golden.case import OpCase, TensorSpec


def _argmax_case(ne0: int, rows: int) -> OpCase:
    return OpCase("ARGMAX", (TensorSpec("f32", (ne0, rows, 1, 1)),), dst="i32")


def _judge(rows: list[list[float]], picked: list[int]) -> bool:
    x = np.array(rows, dtype=np.float64).reshape(1, 1, len(rows), -1)
    case = _argmax_case(x.shape[-1], len(rows))
    golden = reduction.argmax_rows(x)
    return judge_argmax(case, [x], golden, np.array(picked, dtype=np.int32).reshape(1, 1, 1, -1)).passed


def test_argmax_accepts_any_tied_index_and_nothing_else() -> None:
    row = [1.0, 3.0, 3.0, 0.0, 3.0]
    assert _judge([row], [1]) and _judge([row], [4]) and _judge([row], [2])  # first, last (ggml CPU), middle
    assert not _judge([row], [0])
    assert not _judge([row], [5]) and not _judge([row], [-1])


def test_argmax_rows_of_neg_inf_and_nan() -> None:
    assert _judge([[-np.inf] * 3], [2])
    assert not _judge([[-np.inf] * 3], [-1])  # ggml-cuda's −FLT_MAX start returns −1 here
    assert _judge([[5.0, np.nan, 1.0]], [2])  # ggml CPU: the maximum after the last NaN
    assert not _judge([[5.0, np.nan, 1.0]], [3])


@pytest.mark.parametrize("op", ["REGLU", "GEGLU", "SWIGLU", "GEGLU_ERF", "GEGLU_QUICK"])
@pytest.mark.parametrize("variant", ["", glu.SPLIT])
def test_glu_gates_are_non_finite_only_against_a_clear_activation(op: str, variant: str) -> None:
    ne = (64, 8, 1, 1)
    srcs = (TensorSpec("f16", ne),) * (2 if variant else 1)
    params = () if variant else (("swapped", True),)
    seen_non_finite = 0
    for seed in range(20):
        case = OpCase(op, srcs, params, "f16", variant, seed, "special")
        x, g = glu.halves(glu_inputs(case, np.random.default_rng(seed)), case)
        act = glu.ACTIVATIONS[op](x)
        bad = ~np.isfinite(g)
        seen_non_finite += int(bad.sum())
        assert np.all(np.abs(act[bad]) >= glu.GATE_SAFE_ACTIVATION)
    assert seen_non_finite > 0  # the regime is still drawn


def test_glu_halves_swapped_odd_row_and_reglu_short_circuit() -> None:
    a = np.array([-1.0, 0.0, 2.0, np.nan, np.nan, np.inf, 3.0, 4.0, 9.0]).reshape(1, 1, 1, 9)
    plain = OpCase("REGLU", (TensorSpec("f32", (9, 1, 1, 1)),), (("swapped", False),))
    swapped = OpCase("REGLU", (TensorSpec("f32", (9, 1, 1, 1)),), (("swapped", True),))
    # measured on ggml:CPU 0.20.2: [0, 0, 6, 0] and [0, nan, 6, nan]; the 9th element is unused
    np.testing.assert_array_equal(catalogue.evaluate(plain, [a]).ravel(), [0.0, 0.0, 6.0, 0.0])
    np.testing.assert_array_equal(catalogue.evaluate(swapped, [a]).ravel(), [0.0, np.nan, 6.0, np.nan])


def test_glu_split_rejects_mismatched_halves() -> None:
    case = OpCase("SWIGLU", (TensorSpec("f32", (4, 2, 1, 1)), TensorSpec("f32", (4, 3, 1, 1))), form=glu.SPLIT)
    with pytest.raises(ValueError, match="same shape and type"):
        catalogue.evaluate(case, [np.zeros((1, 1, 2, 4)), np.zeros((1, 1, 3, 4))])


def test_l2_norm_clamps_the_norm_at_eps_outside_the_root() -> None:
    x = np.array([0.3, 0.4]).reshape(1, 1, 1, 2)  # ‖x‖ = 0.5
    np.testing.assert_allclose(reduction.l2_norm(x, 1.0).ravel(), [0.3, 0.4])  # x / max(0.5, 1)
    np.testing.assert_allclose(reduction.l2_norm(x, 0.25).ravel(), [0.6, 0.8], rtol=1e-7)  # x / 0.5


@pytest.mark.parametrize(("ne", "missed"), [
    ((5, 7, 1, 1), False), ((5, 3, 3, 1), False), ((5, 2, 3, 1), True), ((5, 1, 1, 2), True), ((5, 2, 2, 2), True),
])
def test_count_equal_bug_predicate_follows_the_cpu_row_index(ne: tuple[int, int, int, int], missed: bool) -> None:
    case = OpCase("COUNT_EQUAL", (TensorSpec("i32", ne), TensorSpec("i32", ne)), dst="i64")
    assert _count_equal_rows_missed(case) is missed

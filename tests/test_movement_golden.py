"""The movement goldens against facts measured on ggml's CPU (ggml-semantics.md §3, §12–§21),
and the ARGSORT verdict against right and wrong answers."""

from __future__ import annotations

import numpy as np

from conformance.cases.movement import judge_argsort
from golden import movement as mv
from golden import resample, sequence
from golden.case import OpCase, TensorSpec


def test_nearest_index_follows_the_f32_scale_rule() -> None:
    assert resample.nearest_index(14, 16)[8] == 6  # floor(8·14/16) would be 7
    assert list(resample.nearest_index(3, 7)) == [0, 0, 0, 1, 1, 2, 2]
    for k in (2, 3, 8):
        assert np.array_equal(resample.nearest_index(37, 37 * k), np.arange(37 * k) // k)


def test_view_2d_with_padded_rows() -> None:
    flat = np.arange(60.0).reshape(1, 1, 1, 60)
    got = mv.view(flat, (3, 4, 1, 1), (1, 15, 60, 60), 2)  # nb1 = 60 bytes, offset 8 bytes of f32
    want = np.stack([np.arange(2 + 15 * j, 5 + 15 * j) for j in range(4)]).reshape(1, 1, 4, 3)
    assert np.array_equal(got, want)


def test_acc_sub_block() -> None:
    a = np.zeros((1, 3, 5, 8))
    b = np.ones((1, 2, 2, 3))
    got = mv.acc(a, b, (1, 8, 40, 120), 1 * 40 + 2 * 8 + 4)
    want = a.copy()
    want[0, 1:3, 2:4, 4:7] += 1
    assert np.array_equal(got, want)


def test_permute_moves_source_dim_k_to_axes_k() -> None:
    x = np.zeros((5, 4, 3, 2))  # ne = [2, 3, 4, 5]
    assert mv.permute(x, (2, 0, 1, 3)).shape[::-1] == (3, 4, 2, 5)


def test_get_rows_batched() -> None:
    data = np.arange(2 * 3 * 4 * 5, dtype=np.float64).reshape(2, 3, 4, 5)  # ne = [5, 4, 3, 2]
    rows = np.array([[[[3, 0, 3], [1, 1, 2], [0, 0, 0]], [[2, 2, 1], [3, 1, 0], [1, 2, 3]]]], dtype=np.int32)
    got = mv.get_rows(data, rows)
    for i3 in range(2):
        for i2 in range(3):
            for r in range(3):
                assert np.array_equal(got[i3, i2, r], data[i3, i2, rows[0, i3, i2, r]])


def test_cpy_conversions() -> None:
    x = np.array([1.7, -1.7, 0.5, 65520.0, 1.0 + 2.0**-11]).reshape(1, 1, 1, 5)
    assert list(mv.cpy(x, (5, 1, 1, 1), "i32").ravel()) == [1, -1, 0, 65520, 1]
    assert list(mv.cpy(x, (5, 1, 1, 1), "f16").ravel()) == [1.7001953125, -1.7001953125, 0.5, np.inf, 1.0]


def test_arange_length_and_values() -> None:
    for start, stop, step in ((1.0, 2.0, 0.1), (0.1, 5.3, 0.13), (-7.3, 9.1, 0.37)):
        n = sequence.arange_length(start, stop, step)
        assert n == len(np.arange(np.float32(start), np.float32(stop), np.float32(step)))
        fused = np.float32(np.float32(start) + np.float64(np.float32(step)) * np.arange(n))
        assert np.array_equal(np.float32(sequence.arange(start, stop, step)), fused)


def _argsort_case(order: str) -> OpCase:
    return OpCase("ARGSORT", (TensorSpec("f32", (4, 1, 1, 1)),), params=(("order", order),), dst="i32")


def test_argsort_verdict_accepts_any_order_of_ties_only() -> None:
    x = np.array([[[[2.0, 1.0, 2.0, 0.0]]]])
    case = _argsort_case("desc")
    golden = sequence.argsort(x, descending=True)
    assert golden.ravel().tolist() == [0, 2, 1, 3]
    assert judge_argsort(case, [x], golden, np.array([[[[2, 0, 1, 3]]]])).passed  # ties swapped
    wrong_order = judge_argsort(case, [x], golden, np.array([[[[1, 0, 2, 3]]]]))
    assert not wrong_order.passed and "selects value 1.0" in wrong_order.detail
    not_perm = judge_argsort(case, [x], golden, np.array([[[[0, 0, 1, 3]]]]))
    assert not not_perm.passed and "1 row(s) not a permutation" in not_perm.detail
    assert not judge_argsort(case, [x], golden, np.array([[[[0, 2, 1, 9]]]])).passed  # out of range

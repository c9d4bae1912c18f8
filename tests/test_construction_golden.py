"""The construction goldens, PAD circular and the interpolating UPSCALE modes on small cases worked
out by hand from ggml's definitions (ggml.h comments and the CPU kernels of 0.20.2)."""

from __future__ import annotations

import numpy as np
import pytest

from golden import catalogue, construction, movement, resample
from golden.case import OpCase, TensorSpec
from golden.resample import ScaleMode


def _row(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float64).reshape(1, 1, 1, -1)


def test_tri_types_split_at_the_diagonal() -> None:
    x = np.arange(1.0, 10.0).reshape(1, 1, 3, 3)  # row i1 = [3·i1 + 1, ...], column i0
    lower = construction.tri(x, "lower")[0, 0]
    assert lower.tolist() == [[0, 0, 0], [4, 0, 0], [7, 8, 0]]  # keeps i0 < i1
    assert construction.tri(x, "lower_diag")[0, 0].tolist() == [[1, 0, 0], [4, 5, 0], [7, 8, 9]]
    assert construction.tri(x, "upper")[0, 0].tolist() == [[0, 2, 3], [0, 0, 6], [0, 0, 0]]
    assert construction.tri(x, "upper_diag")[0, 0].tolist() == [[1, 2, 3], [0, 5, 6], [0, 0, 9]]


def test_tri_zeroes_nan_outside_the_triangle() -> None:
    x = np.full((1, 1, 2, 2), np.nan)
    out = construction.tri(x, "upper")[0, 0]
    assert out[1, 0] == 0 and out[0, 0] == 0 and np.isnan(out[0, 1])


def test_diag_spreads_the_vector_per_plane() -> None:
    x = np.array([[1.0, 2.0], [3.0, 4.0]]).reshape(1, 2, 1, 2)  # two planes of a length-2 vector
    out = construction.diag(x)
    assert out.shape == (1, 2, 2, 2)
    assert out[0, 1].tolist() == [[3, 0], [0, 4]]


def test_set_assigns_into_the_view_and_keeps_the_rest() -> None:
    a = np.zeros((1, 1, 3, 4))
    b = np.array([[1.0, 2.0], [3.0, 4.0]]).reshape(1, 1, 2, 2)
    out = construction.set_view(a, b, (1, 4, 8, 12), 5)  # rows 1..2, columns 1..2
    assert out[0, 0].tolist() == [[0, 0, 0, 0], [0, 1, 2, 0], [0, 3, 4, 0]]


def test_set_rejects_an_overlapping_view() -> None:
    case = OpCase("SET", (TensorSpec("f32", (8, 2, 1, 1)), TensorSpec("f32", (3, 2, 1, 1))),
                  params=(("nb1", 8), ("nb2", 64), ("nb3", 64), ("offset", 0)))
    with pytest.raises(ValueError, match="overlap itself"):
        catalogue.evaluate(case, [np.zeros((1, 1, 2, 8)), np.zeros((1, 1, 2, 3))])


def test_pad_reflect_does_not_repeat_the_edge() -> None:
    out = construction.pad_reflect_1d(_row(1, 2, 3, 4), 2, 2)  # ggml.h: [a, b, c, d] -> [c, b, a, b, c, d, c, b]
    assert out.ravel().tolist() == [3, 2, 1, 2, 3, 4, 3, 2]
    assert construction.pad_reflect_1d(_row(1, 2, 3), 2, 0).ravel().tolist() == [3, 2, 1, 2, 3]


def test_pad_reflect_limit_is_ne0_minus_one() -> None:
    case = OpCase("PAD_REFLECT_1D", (TensorSpec("f32", (3, 1, 1, 1)),), params=(("p0", 3), ("p1", 0)))
    with pytest.raises(ValueError, match="ne0 − 1 = 2"):
        catalogue.evaluate(case, [np.zeros((1, 1, 1, 3))])


def test_fill_f16_rounds_the_constant_once() -> None:
    case = OpCase("FILL", (TensorSpec("f16", (3, 1, 1, 1)),), params=(("c", 65520.0),), dst="f16")
    exact = catalogue.evaluate(case, [np.zeros((1, 1, 1, 3))])
    assert np.all(exact == 65520.0)  # the verdict stores it: +inf in F16, as ggml's conversion does


def test_circular_pad_wraps_more_than_once() -> None:
    out = movement.pad_circular(_row(1, 2, 3), (5, 0, 0, 0), (4, 0, 0, 0))
    # output i is source (i − 5) mod 3
    assert out.ravel().tolist() == [2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1]


def test_bilinear_half_pixel_and_align_corners() -> None:
    x = _row(0, 1)
    half = resample.upscale(x, (4, 1, 1, 1), ScaleMode("bilinear"))
    assert half.ravel().tolist() == [0, 0.25, 0.75, 1]  # x = (i + ½)/2 − ½, clamped at the edges
    corners = resample.upscale(x, (4, 1, 1, 1), ScaleMode("bilinear", align_corners=True))
    assert np.allclose(corners.ravel(), [0, 1 / 3, 2 / 3, 1], rtol=0, atol=1e-15)


def test_bicubic_keys_kernel_with_a_minus_0_75() -> None:
    out = resample.upscale(_row(*range(8)), (16, 1, 1, 1), ScaleMode("bicubic")).ravel()
    # output 4 samples x = 1.75: pixels 0..3 weigh W(1.75), W(0.75), W(0.25), W(1.25); A = −0.75 does not
    # reproduce lines (only A = −0.5 would), so this is 1.703125, not 1.75
    assert out[4] == pytest.approx(0.26171875 * 1 + 0.87890625 * 2 - 0.10546875 * 3)
    flat = resample.upscale(np.full((1, 1, 3, 5), 2.5), (11, 7, 1, 1), ScaleMode("bicubic", align_corners=True))
    assert np.allclose(flat, 2.5, rtol=1e-15)  # the weights sum to 1
    assert resample.keys_weight(np.array([0.5]))[0] == pytest.approx(0.59375)  # 1.25/8 − 2.25/4 + 1
    assert resample.keys_weight(np.array([1.5]))[0] == pytest.approx(-0.09375)


def test_antialias_widens_the_triangle_when_downsampling() -> None:
    a, b, c, d = 1.0, 2.0, 4.0, 8.0
    out = resample.upscale(_row(a, b, c, d), (2, 1, 1, 1), ScaleMode("bilinear", antialias=True)).ravel()
    # output 0 samples x = 0.5 with support 2: pixels 0, 1, 2 weigh 0.75, 0.75, 0.25
    assert out[0] == pytest.approx((0.75 * a + 0.75 * b + 0.25 * c) / 1.75)
    up = resample.upscale(_row(a, b, c, d), (8, 1, 1, 1), ScaleMode("bilinear", antialias=True))
    assert np.allclose(up, resample.upscale(_row(a, b, c, d), (8, 1, 1, 1), ScaleMode("bilinear")))


def test_interpolating_modes_reject_non_finite_inputs() -> None:
    case = OpCase("UPSCALE", (TensorSpec("f32", (2, 1, 1, 1)),),
                  params=(("sf", 2), ("mode", "bicubic"), ("align_corners", False), ("antialias", False)))
    with pytest.raises(ValueError, match="non-finite"):
        catalogue.evaluate(case, [_row(1.0, np.inf)])


def test_the_error_model_is_zero_for_nearest_and_grows_with_the_coordinate() -> None:
    x = np.random.default_rng(0).uniform(-1, 1, (1, 1, 3, 200))
    near = OpCase("UPSCALE", (TensorSpec("f32", (200, 3, 1, 1)),), params=(("sf", 2),))
    assert not resample.interpolation_error(near, [x], catalogue.evaluate(near, [x])).any()
    lin = OpCase("UPSCALE", (TensorSpec("f32", (200, 3, 1, 1)),), params=(("sf", 2), ("mode", "bilinear")))
    allowed = resample.interpolation_error(lin, [x], catalogue.evaluate(lin, [x]))
    assert allowed[..., -8:].mean() > 10 * allowed[..., :8].mean()  # 4u(|x| + 2): x ≈ 200 against x ≈ 0

"""The issue-13 unary and math goldens: identities of the functions (so a golden that drifts from the
maths fails), ggml's definitions at the special values, and their error-model rows' reach."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from golden import binary, unary
from golden.case import OpCase, TensorSpec

reals = st.floats(-80.0, 80.0, allow_nan=False, width=32)


@given(x=reals)
def test_reflection_identities(x: float) -> None:
    a, b = np.array([x]), np.array([-x])
    # σ(x) + σ(−x) = 1, softplus(x) − softplus(−x) = x, GELU_erf(x) − GELU_erf(−x) = x
    assert math.isclose(unary.sigmoid(a)[0] + unary.sigmoid(b)[0], 1.0, rel_tol=1e-15)
    assert math.isclose(unary.softplus(a)[0] - unary.softplus(b)[0], x, rel_tol=1e-14, abs_tol=1e-14)
    assert math.isclose(unary.gelu_erf(a)[0] - unary.gelu_erf(b)[0], x, rel_tol=1e-14, abs_tol=1e-14)
    assert math.isclose(unary.log(unary.exp(a))[0], x, rel_tol=1e-15, abs_tol=1e-15)
    assert math.isclose(unary.sin(a)[0] ** 2 + unary.cos(a)[0] ** 2, 1.0, rel_tol=1e-15)


def test_gelu_erf_keeps_the_negative_tail() -> None:
    """x·Φ(x) for x ≪ 0 is tiny but not 0: 1 + erf would cancel in float64, erfc does not."""
    x = np.array([-10.0, -20.0, -30.0])
    tail = unary.gelu_erf(x)
    assert np.all(tail < 0)
    # Mills ratio: Φ(x) ≈ φ(x)/|x| for large |x|, so x·Φ(x) ≈ −φ(x)
    phi = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    np.testing.assert_allclose(tail, -phi, rtol=0.02)


def test_ggml_definitions_at_special_values() -> None:
    x = np.array([np.nan, -0.0, 0.0, -np.inf, np.inf, -2.0**-149, 2.0**-149])
    np.testing.assert_array_equal(unary.sgn(x), [0, 0, 0, -1, 1, -1, 1])
    np.testing.assert_array_equal(unary.step(x), [0, 0, 0, 0, 1, 0, 1])
    assert np.isnan(unary.elu(x)[0]) and np.signbit(unary.elu(x)[1]) and unary.elu(x)[3] == -1.0
    assert np.signbit(unary.sqrt(np.array([-0.0]))[0]) and np.isnan(unary.sqrt(np.array([-1.0, -np.inf]))).all()
    logs = unary.log(np.array([0.0, -0.0, -1.0, 2.0**-149]))
    assert logs[0] == logs[1] == -np.inf and np.isnan(logs[2]) and math.isclose(logs[3], -149 * math.log(2))
    assert unary.softplus(np.array([1e4]))[0] == 1e4 and unary.softplus(np.array([-np.inf]))[0] == 0.0
    assert unary.sigmoid(np.array([-np.inf]))[0] == 0.0 and unary.sigmoid(np.array([np.inf]))[0] == 1.0


def test_add1_adds_the_one_element_everywhere() -> None:
    a = np.arange(12.0).reshape(1, 1, 3, 4)
    np.testing.assert_array_equal(binary.add1(a, np.array([[[[2.5]]]])), a + 2.5)
    np.testing.assert_array_equal(binary.sub(a, a[..., :1]), a - a[..., :1])


def test_softplus_row_admits_ggml_threshold_but_not_overflow() -> None:
    """x for x > 20 (2e-9 off) is within the f32 row; inf, or a threshold at 10, is not."""
    spec = next(s for s in unary.SPECS if s.name == "SOFTPLUS")
    tol = spec.tolerance["f32"]
    case = OpCase("SOFTPLUS", (TensorSpec("f32", (3, 1, 1, 1)),))
    x = np.array([20.000001907348633, 10.0, 12.5])
    g = unary.softplus(x)
    allowed = tol.allowed(case, [x], g, "f32")
    assert abs(x[0] - g[0]) <= allowed[0]  # ggml's threshold at 20
    assert abs(x[1] - g[1]) > allowed[1]  # a threshold at 10 is too early
    assert abs(x[2] - g[2]) <= allowed[2]  # ≥ 12 is fine, as the reason says


def test_clamp_at_infinite_bounds_warns_nothing_and_keeps_the_device_bound() -> None:
    """An infinite bound next to an infinite result is at distance 0 (inf - inf is NaN, and warned): where
    ggml leaves CLAMP undefined (a NaN input) a device that chose min = -inf is judged by min, not max;
    a bound beyond f32 is that infinity, as ggml's f32 op param holds it."""
    import warnings

    x = np.array([np.nan, 1.0, np.inf, -np.inf], dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        device = np.array([-np.inf, 1.0, np.inf, -np.inf])
        chosen = unary.clamp_undefined_choices(x, -np.inf, np.inf, device)
        assert chosen.tolist() == [-np.inf, 1.0, np.inf, -np.inf]
        assert unary.clamp_undefined_choices(x, 0.0, np.inf, np.array([np.inf, 1.0, np.inf, 0.0]))[0] == np.inf
        assert unary.clamp(x, -1e39, 1e39).tolist() == unary.clamp(x, -np.inf, np.inf).tolist()

"""Unary activations and the simple one-input ops: GELU, GELU_QUICK, SILU, TANH, RELU,
HARDSIGMOID, HARDSWISH, SQR, SCALE (and scale+bias), CLAMP, LEAKY_RELU.

Exact float64 maths of ggml's definitions. Where ggml's CPU backend deviates on purpose (GELU and
GELU_QUICK go through an F16 lookup table) the golden stays exact; the tolerance table says how
far an implementation may be.
"""

from __future__ import annotations

import numpy as np

SQRT_2_OVER_PI = 0.79788456080286535587989211986876
GELU_COEF_A = 0.044715
GELU_QUICK_COEF = 1.702


def _f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def gelu(x: np.ndarray) -> np.ndarray:
    """ggml's GELU is the tanh approximation: 0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²)))."""
    x = _f64(x)
    with np.errstate(over="ignore", invalid="ignore"):
        y = 0.5 * x * (1.0 + np.tanh(SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x)))
    return np.where(x == -np.inf, 0.0, y)  # the limit; ggml's F32 path returns 0 for x <= -10


def gelu_quick(x: np.ndarray) -> np.ndarray:
    """x·σ(1.702·x); written with exp of a non-positive argument so it never overflows."""
    x = _f64(x)
    with np.errstate(over="ignore", invalid="ignore"):
        return x * _sigmoid(GELU_QUICK_COEF * x)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def silu(x: np.ndarray) -> np.ndarray:
    x = _f64(x)
    with np.errstate(over="ignore", invalid="ignore"):
        return x * _sigmoid(x)


def tanh(x: np.ndarray) -> np.ndarray:
    return np.tanh(_f64(x))


def relu(x: np.ndarray) -> np.ndarray:
    """``x > 0 ? x : 0``: relu(-0) = +0 and relu(NaN) = 0, as ggml writes it."""
    x = _f64(x)
    return np.where(x > 0, x, 0.0)


def hardsigmoid(x: np.ndarray) -> np.ndarray:
    x = _f64(x)
    with np.errstate(invalid="ignore"):
        return np.fmin(1.0, np.fmax(0.0, (x + 3.0) / 6.0))  # fminf/fmaxf: NaN -> 0, as ggml


def hardswish(x: np.ndarray) -> np.ndarray:
    x = _f64(x)
    with np.errstate(invalid="ignore"):
        return x * hardsigmoid(x)


def sqr(x: np.ndarray) -> np.ndarray:
    x = _f64(x)
    with np.errstate(over="ignore"):
        return x * x


def scale(x: np.ndarray, s: float, b: float = 0.0) -> np.ndarray:
    """``x·s + b`` (ggml_scale_bias; plain ggml_scale has b = 0). s and b are F32 op params."""
    with np.errstate(over="ignore", invalid="ignore"):
        return _f64(x) * float(np.float32(s)) + float(np.float32(b))


def clamp(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``MAX(MIN(x, hi), lo)`` with C comparisons: NaN -> hi (MIN(NaN, hi) picks hi); lo > hi -> lo."""
    x = _f64(x)
    lo, hi = float(np.float32(lo)), float(np.float32(hi))
    upper = np.where(x < hi, x, hi)  # MIN(a,b) = a < b ? a : b, so NaN < hi is false -> hi
    return np.where(upper > lo, upper, lo)


def leaky_relu(x: np.ndarray, slope: float) -> np.ndarray:
    """``max(x,0) + slope·min(x,0)``, with NaN -> 0 as ggml's comparisons give."""
    x = _f64(x)
    s = float(np.float32(slope))
    with np.errstate(invalid="ignore"):  # 0·(−inf) is NaN, as in ggml's f32 arithmetic
        return np.where(x > 0, x, 0.0) + s * np.where(x < 0, x, 0.0)

"""CROSS_ENTROPY_LOSS (``ggml_cross_entropy_loss``): the mean over rows of the cross-entropy between
label distributions and the softmax of logits.

Numpy shapes: logits ``a`` and labels ``b`` are both (ne3, ne2, ne1, ne0), a row being dim 0; the
result is one value of a's type, ggml ne [1, 1, 1, 1]:

    loss = −(1/n_rows) · Σ_rows Σ_i b_i · log_softmax(a)_i,   n_rows = ne1·ne2·ne3

(ggml-cpu ops.cpp divides the total by the number of rows, not by the number of elements.)
"""

from __future__ import annotations

import numpy as np

from golden.case import OpCase
from golden.spec import OpList, OpSpec, many_rows, row_regimes, sig
from golden.tolerance import F32_EPS, Calibration, Tolerance, finite_abs

SPECS = OpList()


def log_softmax(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, np.float64)
    shifted = a - a.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def cross_entropy_loss(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = np.asarray(a, np.float64)
    n_rows = a.size // a.shape[-1]
    return np.reshape(-(np.asarray(b, np.float64) * log_softmax(a)).sum() / n_rows, (1, 1, 1, 1))


def cross_entropy_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """Softmax in f32, then a sum of n = n_rows·ne0 terms in any order. Per row (max m, S = Σe^(a−m),
    p = softmax): ``a_i − m`` is off by u·|a_i − m|, which each e^(a_i−m) carries relatively, with 4u
    more for exp; S (positive terms, any order) adds ne0·u relatively, so ``log S`` is off by
    ``Σ p_j·u|a_j − m| + (ne0 + 4)·u + 3u·log S`` (log within 2 ulp, one rounding); the subtraction
    ``l_i = a_i − m − log S`` adds u·|l_i|. The product b_i·l_i adds u·|b_i l_i|, the sum of all n
    products γ_n·Σ|b_i l_i| (n·u/(1 − n·u)), the f32 1/n_rows and the final product 2u·|loss|.
    Gradual underflow adds 2^-150 per rounding."""
    a, b = (np.asarray(x, np.float64) for x in inputs[:2])
    n = a.size
    n_rows = n // a.shape[-1]
    spread = finite_abs(a - a.max(axis=-1, keepdims=True))
    logs = log_softmax(a)
    log_sum = finite_abs(a - a.max(axis=-1, keepdims=True) - logs)[..., :1]  # log S, the same for the whole row
    p = np.exp(logs)
    d_log_sum = F32_EPS * ((p * spread).sum(axis=-1, keepdims=True) + (a.shape[-1] + 4) + 3 * log_sum)
    d_l = F32_EPS * (spread + finite_abs(logs)) + d_log_sum
    terms = finite_abs(b * logs)
    gamma = n * F32_EPS / (1 - n * F32_EPS)
    total = (finite_abs(b) * d_l).sum() + (F32_EPS + gamma) * terms.sum() + (2 * n + 2) * 2.0**-150
    return np.full(np.shape(golden), total / n_rows + 2 * F32_EPS * float(finite_abs(golden).max()))


SPECS.add(OpSpec(
    name="CROSS_ENTROPY_LOSS", family="loss",
    regimes=(*row_regimes(), many_rows()), golden=lambda xs, c: cross_entropy_loss(xs[0], xs[1]),
    signatures=(sig("f32", "f32"),),
    tolerance={"f32": Tolerance("softmax in f32 per row, then a sum of n = rows·ne0 terms in any order (γ_n), "
                                "1/n_rows and the product rounded; ggml CPU (sums in double) ≤ 0.12 of the allowance "
                                "over 300 cases (the γ_n term dominates large n: ≤ 0.001 there)", ulp=0.5,
                                model=cross_entropy_model,
                                model_name="cross_entropy(row log-softmax in f32 + γ_n·Σ|b·l|)/rows",
                                calibration=Calibration.GGML_CPU)},
    specials=(0.0, -0.0), structured_inputs=True,
    notes="Labels are drawn as probability rows (one-hot, smoothed, softmax-shaped, some all-zero rows). "
          "ggml's constructor takes any layout of equal-shaped a and b; ggml's CPU asserts unit-stride rows and "
          "walks rows by nb1; ggml-cann reads both as packed. Logits ±inf/NaN are not drawn (0·−inf is NaN)"))

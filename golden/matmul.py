"""MUL_MAT: ``dst[i3, i2] = b[i3, i2] @ a[i3 // r3, i2 // r2].T`` with ggml's blocked broadcast.

Numpy shapes: ``a`` (weights, src0) is (A3, A2, N, K), ``b`` (src1) is (B3, B2, M, K) with
``B2 % A2 == B3 % A3 == 0``; the result is (B3, B2, M, N), i.e. ggml ne ``[a.ne1, b.ne1, b.ne2,
b.ne3]``. The broadcast over dims 2 and 3 is repeat-interleave (a's slice j serves b's slices
j·r .. j·r + r − 1, as grouped-query attention shares KV heads), not the cyclic tiling of ADD.
Products of f32/f16 values are exact in float64 and the K-sum is within K·2^-53 relative.
"""

from __future__ import annotations

import numpy as np


def broadcast_weights(a: np.ndarray, b_shape: tuple[int, ...]) -> np.ndarray:
    """Repeat a's dims 2 and 3 (numpy axes 1 and 0) blockwise up to b's."""
    a = np.repeat(a, b_shape[0] // a.shape[0], axis=0)
    return np.repeat(a, b_shape[1] // a.shape[1], axis=1)


def mul_mat(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = broadcast_weights(np.asarray(a, np.float64), np.shape(b))
    with np.errstate(invalid="ignore", over="ignore"):
        return np.einsum("xynk,xymk->xymn", a, np.asarray(b, np.float64))


def abs_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``Σ_k |a_k|·|b_k|`` for each output: the scale of a dot product's rounding error."""
    return mul_mat(np.abs(a), np.abs(b))

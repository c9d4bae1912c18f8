"""NORM, RMS_NORM, GROUP_NORM: normalisation without affine weights (ggml applies those with MUL/ADD).

Exact float64 maths on the stored values. ``eps`` is an F32 op param, so it is taken as the f32
value ggml stores. A non-finite value anywhere in a row (group) makes that whole row NaN, as it
does on ggml's CPU: the mean is ±inf or NaN and every ``x − mean`` follows.
"""

from __future__ import annotations

import numpy as np


def _f32(value: float) -> float:
    return float(np.float32(value))


def norm(x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """Per row (ne0): ``(x − mean) / sqrt(var + eps)`` with the biased variance."""
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        d = x - x.mean(axis=-1, keepdims=True)
        var = np.mean(d * d, axis=-1, keepdims=True)
        return d / np.sqrt(var + _f32(eps))


def rms_norm(x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Per row: ``x / sqrt(mean(x²) + eps)``; written as ``x · (1/…)`` so ±inf rows give 0 and NaN as ggml."""
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        ms = np.mean(x * x, axis=-1, keepdims=True)
        return x * (1.0 / np.sqrt(ms + _f32(eps)))


def group_bounds(channels: int, n_groups: int) -> list[tuple[int, int]]:
    """ggml's groups over ne2: ``ceil(C/G)`` channels each, the last ones shorter or empty."""
    per = -(-channels // n_groups)
    return [(g * per, min((g + 1) * per, channels)) for g in range(n_groups) if g * per < channels]


def group_norm(x: np.ndarray, n_groups: int = 32, eps: float = 1e-6) -> np.ndarray:
    """Numpy shape (N, C, H, W) = ggml [W, H, C, N]: NORM over each group's whole W×H×channels block."""
    x = np.asarray(x, np.float64)
    out = np.empty_like(x)
    for lo, hi in group_bounds(x.shape[1], n_groups):
        block = x[:, lo:hi].reshape(x.shape[0], -1)
        out[:, lo:hi] = norm(block, eps).reshape(x[:, lo:hi].shape)
    return out


def row_stats(x: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-row mean and ``1/sqrt(var + eps)``, broadcastable to x (for the tolerance model)."""
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        mean = x.mean(axis=-1, keepdims=True)
        return mean, 1.0 / np.sqrt(np.mean((x - mean) ** 2, axis=-1, keepdims=True) + _f32(eps))


def group_stats(x: np.ndarray, n_groups: int, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-group mean and ``1/sqrt(var + eps)`` spread over each group's elements (numpy (N, C, H, W))."""
    x = np.asarray(x, np.float64)
    mean, rstd = np.zeros_like(x), np.zeros_like(x)
    for lo, hi in group_bounds(x.shape[1], n_groups):
        m, r = row_stats(x[:, lo:hi].reshape(x.shape[0], -1), eps)
        mean[:, lo:hi], rstd[:, lo:hi] = m.reshape(-1, 1, 1, 1), r.reshape(-1, 1, 1, 1)
    return mean, rstd

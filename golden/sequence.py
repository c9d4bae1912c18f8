"""Sequences and row reductions: ARANGE, ARGSORT, SUM_ROWS."""

from __future__ import annotations

import numpy as np


def arange_length(start: float, stop: float, step: float) -> int:
    """``(int64)ceilf((stop − start) / step)`` with every operation in f32, as ggml sizes it."""
    with np.errstate(all="ignore"):
        span = np.float32(np.float32(stop) - np.float32(start)) / np.float32(step)
    return int(np.ceil(np.float32(span)))


def arange(start: float, stop: float, step: float) -> np.ndarray:
    """ARANGE: ``start + step·i`` for i < :func:`arange_length`, exact (ggml rounds one fused
    multiply-add to f32). The f32 parameters are exact in float64, and so is ``step·i``."""
    s, d = float(np.float32(start)), float(np.float32(step))
    n = arange_length(start, stop, step)
    return s + d * np.arange(n, dtype=np.float64)


def argsort(x: np.ndarray, descending: bool) -> np.ndarray:
    """ARGSORT per row (ggml dim 0): a permutation that sorts ascending, or descending.

    Ties are returned in stable order; ggml's std::sort is unstable, so any order of tied values
    is right (the verdict compares the sorted values, not the indices).
    """
    x = np.asarray(x, dtype=np.float64)
    key = -x if descending else x
    return np.argsort(key, axis=-1, kind="stable").astype(np.int64)


def sum_rows(x: np.ndarray) -> np.ndarray:
    """SUM_ROWS: the sum of each row (ggml dim 0), shape ``[1, ne1, ne2, ne3]``."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.sum(np.asarray(x, dtype=np.float64), axis=-1, keepdims=True)

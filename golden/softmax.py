"""SOFT_MAX (``ggml_soft_max_ext`` with optional mask, ALiBi and sinks) and DIAG_MASK_INF.

Numpy shapes: ``a`` is (ne3, ne2, ne1, ne0) with ne2 the head; the mask is (m3, m2, m1 ≥ ne1, ne0)
and serves row ``i1`` itself (rows beyond ne1 are ignored) and heads/batches modulo m2/m3; sinks
are one F32 logit per head (ne2 values).

Fully masked rows (every logit −inf): with no sink the maximum is −inf and ``−inf − (−inf)`` is
NaN, so the golden gives NaN exactly as ggml's CPU does (the limit is undefined); with a sink the
sink is the maximum and the row is 0.
"""

from __future__ import annotations

import math

import numpy as np


def _f32(value: float) -> float:
    return float(np.float32(value))


def alibi_slopes(n_head: int, max_bias: float) -> np.ndarray:
    """ALiBi slope per head: ``m0^(h+1)`` for the first 2^⌊log2 n⌋ heads, then odd powers of ``m1``."""
    if max_bias <= 0.0:
        return np.ones(n_head)
    n_log2 = 1 << int(math.floor(math.log2(n_head)))
    h = np.arange(n_head, dtype=np.float64)
    m0 = 2.0 ** (-max_bias / n_log2)
    m1 = 2.0 ** (-(max_bias / 2.0) / n_log2)
    return np.where(h < n_log2, m0 ** (h + 1), m1 ** (2 * (h - n_log2) + 1))


def soft_max_logits(
    a: np.ndarray, mask: np.ndarray | None = None, scale: float = 1.0, max_bias: float = 0.0
) -> np.ndarray:
    """``w = a·scale + slope(head)·mask``, the logits the softmax normalises (float64)."""
    a = np.asarray(a, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        w = a * _f32(scale)
        if mask is not None:
            ne3, ne2, ne1, _ = a.shape
            m = np.asarray(mask, np.float64)[:, :, :ne1, :]
            m = m[np.arange(ne3) % m.shape[0]][:, np.arange(ne2) % m.shape[1]]
            slope = alibi_slopes(ne2, _f32(max_bias)).reshape(1, ne2, 1, 1)
            w = w + slope * m
    return w


def soft_max(
    a: np.ndarray, mask: np.ndarray | None = None, sinks: np.ndarray | None = None,
    scale: float = 1.0, max_bias: float = 0.0,
) -> np.ndarray:
    """Row softmax of the logits; a sink adds ``exp(sink − max)`` to the denominator only."""
    w = soft_max_logits(a, mask, scale, max_bias)
    with np.errstate(invalid="ignore", over="ignore"):
        m = w.max(axis=-1, keepdims=True)
        if sinks is not None:
            s = np.asarray(sinks, np.float64).reshape(1, -1, 1, 1)
            m = np.maximum(m, s)
        e = np.exp(w - m)
        total = e.sum(axis=-1, keepdims=True)
        if sinks is not None:
            total = total + np.exp(s - m)
        return e / total


def diag_mask_inf(a: np.ndarray, n_past: int = 0) -> np.ndarray:
    """Element (row i1, column i0) becomes −inf where ``i0 > n_past + i1``; the rest is copied."""
    a = np.asarray(a, np.float64)
    ne1, ne0 = a.shape[-2:]
    masked = np.arange(ne0)[None, :] > n_past + np.arange(ne1)[:, None]
    return np.where(masked, -np.inf, a)


def split_inputs(xs: list[np.ndarray], has_mask: bool, has_sinks: bool
                 ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """SOFT_MAX's inputs in case order: a, then the mask if present, then the sinks if present."""
    mask = xs[1] if has_mask else None
    sinks = xs[-1] if has_sinks else None
    return xs[0], mask, sinks

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

from golden.case import OpCase
from golden.spec import SPECIAL_VALUES, InputLayouts, OpList, OpSpec, P, element_regimes, many_rows, row_regimes, sig
from golden.tolerance import EXACT, F32_EPS, Calibration, Tolerance, finite_abs

SPECS = OpList()


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


def _soft_max(xs: list[np.ndarray], c: OpCase) -> np.ndarray:
    a, mask, sinks = split_inputs(xs, bool(c.param("mask")), bool(c.param("sinks")))
    return soft_max(a, mask, sinks, c.param("scale"), c.param("max_bias"))


def softmax_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """Softmax in f32, by any correct implementation. A logit ``w = x·scale + slope·mask`` is off by
    ``Δw ≤ u·(2|x·scale| + (2h + 6)|slope·mask|)`` (two roundings; the ALiBi slope is ``powf(m0, h+1)``
    of an f32 ``m0``, so its relative error grows with the head index h), and ``w − max`` adds
    u·|w − max|. ``y_i = e_i / Σe`` moves by ``Δw_i`` plus the largest ``Δw`` of the row (through the
    sum), relatively. Then: expf within 2.5 ulp (5u relative) in e_i and again through Σe; the sum
    of the n positive terms (n = ne0, + 1 with a sink) in f32 in any order, sequential included,
    (n − 1)u relative; 1/Σe and the product 2u: ``(n + 11)·u`` in all. Results below FLT_MIN may be
    flushed to zero by a SIMD exp (absolute 2^-126)."""
    a = np.asarray(inputs[0], np.float64)
    has_mask = bool(case.param("mask"))
    x_part = finite_abs(a * np.float32(case.param("scale")))
    dw = 2 * x_part
    if has_mask:
        zero = np.zeros_like(a)
        slope_mask = finite_abs(soft_max_logits(zero, inputs[1], 1.0, case.param("max_bias")))
        h = np.arange(a.shape[1], dtype=np.float64).reshape(1, -1, 1, 1)
        dw = dw + (2 * h + 6) * slope_mask
    with np.errstate(invalid="ignore", over="ignore"):
        w = soft_max_logits(a, inputs[1] if has_mask else None, case.param("scale"), case.param("max_bias"))
        spread = finite_abs(w - np.max(np.where(np.isfinite(w), w, -np.inf), axis=-1, keepdims=True))
    dw = F32_EPS * (dw + spread)
    n_terms = a.shape[-1] + (1 if case.param("sinks") else 0)
    rel = (n_terms + 11) * F32_EPS + dw + dw.max(axis=-1, keepdims=True)
    return rel * finite_abs(golden) + 2.0**-126


SPECS.add(OpSpec(
    name="SOFT_MAX", family="softmax", golden=_soft_max,
    regimes=row_regimes() + (many_rows(), SPECIAL_VALUES),
    signatures=(sig("f32"), sig("f32", "f32"), sig("f32", "f16", dst="f32")),
    tolerance={"f32": Tolerance("f32 logits (ALiBi slopes by powf), expf within 2.5 ulp, the row sum in f32 "
                                "in any order ((n−1)u: sequential, pairwise and tree sums all fit), 1/Σ and "
                                "the product; ggml CPU (double sum, SIMD exp) ci: ≤ 0.36 of the allowance",
                                ulp=0.5, model=softmax_model,
                                model_name="softmax(Δw_i + max_row Δw + (n+11)u)·|y|",
                                calibration=Calibration.GGML_CPU)},
    params={"scale": P("multiplies a (f32, > 0 drawn)"), "max_bias": P("ALiBi: 0 = off, > 0 needs a mask"),
            "mask": P("src1 is the mask (F32 or F16, ne1 ≥ a.ne1, broadcast modulo over dims 2/3)", bool),
            "sinks": P("the last src is one F32 sink logit per head (ggml_soft_max_add_sinks)", bool)},
    specials=(-np.inf, 0.0, -0.0), input_layouts=InputLayouts.CONTIGUOUS, structured_inputs=True,
    notes="Sinks are F32 and the signature lists only a and the mask. A fully masked row gives NaN "
          "(no sink: max = −inf and −inf − (−inf) is NaN, as on ggml's CPU) or 0 (with a sink). "
          "NaN and +inf inputs are not drawn (the max of a row with NaN is order dependent in C); "
          "ggml_soft_max_ext asserts contiguous a and mask. form=inplace builds ggml_soft_max_ext_inplace on a "
          "ggml_dup of a (the in-place kernel runs; a stays checkable). A sixth of the cases have "
          "vocabulary-wide rows (32k in ci, 262k in nightly)"))

SPECS.add(OpSpec(
    name="DIAG_MASK_INF", family="softmax",
    regimes=(*element_regimes(),), golden=lambda xs, c: diag_mask_inf(xs[0], c.param("n_past")),
    signatures=(sig("f32"),), tolerance={"f32": EXACT},
    params={"n_past": P("columns i0 > n_past + i1 become −inf (≥ 0)", int)}))

"""ROPE (``ggml_rope_ext``), modes NORMAL (0, adjacent pairs) and NEOX (2, halves), with YaRN.

Numpy shapes: ``x`` is (ne3, n_tokens = ne2, n_head = ne1, head_dim = ne0); ``pos`` holds one I32
position per token (ne2 values); ``freq_factors`` (optional) at least n_dims/2 F32 divisors.

Exact maths: ``θ_k = p · base^(−2k/n_dims)`` evaluated directly for every k (ggml's CPU instead
keeps a running f32 product ``θ_{k+1} = θ_k · f32(base^(−2/n_dims))``; the tolerance row carries
that deviation). The float op params are taken as the f32 values ggml stores.
"""

from __future__ import annotations

import math

import numpy as np

NORMAL, NEOX = 0, 2


def _f32(value: float) -> float:
    return float(np.float32(value))


def yarn_corr_dims(n_dims: int, n_ctx_orig: int, freq_base: float, beta_fast: float, beta_slow: float
                   ) -> tuple[float, float]:
    """YaRN ramp ends: the rotation index whose wavelength makes ``beta`` turns in n_ctx_orig tokens."""

    def corr(n_rot: float) -> float:
        return n_dims * math.log(n_ctx_orig / (n_rot * 2 * math.pi)) / (2 * math.log(freq_base))

    return max(0.0, math.floor(corr(beta_fast))), min(n_dims - 1.0, math.ceil(corr(beta_slow)))


def rope_angles(
    pos: np.ndarray, n_dims: int, freq_base: float = 10000.0, freq_scale: float = 1.0,
    freq_factors: np.ndarray | None = None, ext_factor: float = 0.0, n_ctx_orig: int = 0,
    beta_fast: float = 32.0, beta_slow: float = 1.0, attn_factor: float = 1.0,
) -> tuple[np.ndarray, float]:
    """θ per (token, k) of shape (n_tokens, n_dims/2), and the magnitude scale ``mscale``."""
    base, fs, ext = _f32(freq_base), _f32(freq_scale), _f32(ext_factor)
    k = np.arange(n_dims // 2, dtype=np.float64)
    theta_e = np.asarray(pos, np.float64).reshape(-1, 1) * base ** (-2.0 * k / n_dims)
    if freq_factors is not None:
        theta_e = theta_e / np.asarray(freq_factors, np.float64).ravel()[: n_dims // 2]
    theta = fs * theta_e
    mscale = _f32(attn_factor)
    if ext != 0.0:
        lo, hi = yarn_corr_dims(n_dims, n_ctx_orig, base, _f32(beta_fast), _f32(beta_slow))
        ramp = 1.0 - np.clip((k - lo) / max(0.001, hi - lo), 0.0, 1.0)
        mix = ramp * ext
        theta = theta * (1.0 - mix) + theta_e * mix
        mscale *= 1.0 + 0.1 * math.log(1.0 / fs)
    return theta, mscale


def rope(x: np.ndarray, pos: np.ndarray, n_dims: int, mode: int = NORMAL, freq_factors: np.ndarray | None = None,
         **angles: float) -> np.ndarray:
    """Rotate the first ``n_dims`` of each row by the token's angles; the rest is copied."""
    x = np.asarray(x, np.float64)
    theta, mscale = rope_angles(pos, n_dims, freq_factors=freq_factors, **angles)
    cos = (np.cos(theta) * mscale)[None, :, None, :]  # (1, tokens, 1, n_dims/2)
    sin = (np.sin(theta) * mscale)[None, :, None, :]
    half = n_dims // 2
    if mode == NEOX:
        first, second = np.s_[..., :half], np.s_[..., half:n_dims]
    else:
        first, second = np.s_[..., 0:n_dims:2], np.s_[..., 1:n_dims:2]
    out = x.copy()
    with np.errstate(invalid="ignore", over="ignore"):
        x0, x1 = x[first], x[second]
        out[first] = x0 * cos - x1 * sin
        out[second] = x0 * sin + x1 * cos
    return out

"""TIMESTEP_EMBEDDING: sinusoidal embedding of diffusion timesteps, cosines first.

``t`` holds N F32 timesteps (numpy (1, 1, 1, N)); the result is ggml ne ``[dim, N]``.
"""

from __future__ import annotations

import math

import numpy as np


def timestep_embedding(t: np.ndarray, dim: int, max_period: int = 10000) -> np.ndarray:
    """``out[j] = cos(t·f_j)``, ``out[j + half] = sin(t·f_j)`` with ``f_j = exp(−ln(max_period)·j/half)``.

    An odd ``dim`` leaves the last element 0."""
    half = dim // 2
    freqs = np.exp(-math.log(max_period) * np.arange(half, dtype=np.float64) / half)
    args = np.asarray(t, np.float64).reshape(-1, 1) * freqs
    out = np.zeros((args.shape[0], dim))
    with np.errstate(invalid="ignore"):
        out[:, :half] = np.cos(args)
        out[:, half : 2 * half] = np.sin(args)
    return out.reshape(1, 1, args.shape[0], dim)

"""TIMESTEP_EMBEDDING: sinusoidal embedding of diffusion timesteps, cosines first.

``t`` holds N F32 timesteps (numpy (1, 1, 1, N)); the result is ggml ne ``[dim, N]``.
"""

from __future__ import annotations

import math

import numpy as np

from golden.case import OpCase
from golden.spec import OpList, OpSpec, P, sig
from golden.tolerance import F32_EPS, Tolerance, finite_abs

SPECS = OpList()


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


def timestep_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """ggml computes ``f_j = expf(−logf(P)·j/half)`` in f32: the exponent carries 3u relative
    (≤ 3u·ln(P)·j/half absolute), so f_j is off by (3·ln(P)·j/half + 2)u relatively, and
    ``t·f_j`` adds u. cosf/sinf of the argument then move by ``|t·f_j|·(3·ln(P)·j/half + 4)·u``,
    plus 2u of their own."""
    dim, period = int(case.param("dim")), int(case.param("max_period"))
    half = dim // 2
    j = np.arange(half, dtype=np.float64)
    log_p = np.log(period)
    freqs = np.exp(-log_p * j / max(half, 1))
    t = finite_abs(inputs[0]).reshape(-1, 1)
    bound = t * freqs * (3 * log_p * j / max(half, 1) + 4) * F32_EPS + 2 * F32_EPS
    out = np.zeros((t.shape[0], dim))
    out[:, :half] = bound
    out[:, half : 2 * half] = bound
    return out.reshape(golden.shape)


SPECS.add(OpSpec(
    name="TIMESTEP_EMBEDDING", family="embedding",
    golden=lambda xs, c: timestep_embedding(xs[0], c.param("dim"), c.param("max_period")),
    signatures=(sig("f32"),),
    tolerance={"f32": Tolerance("f32 frequencies via expf and f32 arguments to cosf/sinf; ggml CPU nightly: max "
                                "|Δ| 7.7e-5 at |t| ≤ 1000, ≤ 0.46 of the allowance",
                                ulp=0.5, model=timestep_model)},
    params={"dim": P("embedding width; odd → the last element is 0", int), "max_period": P("P (int)", int)},
    specials=(0.0, -0.0), structured_inputs=True,
    notes="cosines first, then sines; timesteps are F32 (drawn up to ±1000, as diffusion models use)"))

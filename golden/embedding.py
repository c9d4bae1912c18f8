"""TIMESTEP_EMBEDDING: sinusoidal embedding of diffusion timesteps, cosines first.

``t`` holds N F32 timesteps (numpy (1, 1, 1, N)); the result is ggml ne ``[dim, N]``.
"""

from __future__ import annotations

import math

import numpy as np

from golden.case import OpCase
from golden.spec import OpList, OpSpec, P, element_regimes, sig
from golden.tolerance import F32_EPS, Calibration, Tolerance, finite_abs

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
    """The argument's error, by any f32 evaluation of ``f_j = exp(−ln(P)·j/half)``: the exponent
    E = −logf(P)·j/half carries logf's 1.5 ulp (3u) and two roundings (·j, /half; or j/half rounded and
    one product): 5u·|E|; expf within 2.5 ulp adds 5u (powf(P, −j/half) is within the same), and
    ``t·f_j`` rounds once: |Δarg| ≤ |t·f_j|·(5·ln(P)·j/half + 6)·u. cosf/sinf move by at most |Δarg|
    (their slope is ≤ 1); their own 2.5 ulp is the row's ``ulp``."""
    dim, period = int(case.param("dim")), int(case.param("max_period"))
    half = dim // 2
    j = np.arange(half, dtype=np.float64)
    log_p = np.log(period)
    freqs = np.exp(-log_p * j / max(half, 1))
    t = finite_abs(inputs[0]).reshape(-1, 1)
    bound = t * freqs * (5 * log_p * j / max(half, 1) + 6) * F32_EPS
    out = np.zeros((t.shape[0], dim))
    out[:, :half] = bound
    out[:, half : 2 * half] = bound
    return out.reshape(golden.shape)


SPECS.add(OpSpec(
    name="TIMESTEP_EMBEDDING", family="embedding",
    regimes=(*element_regimes(elements=lambda c: c.inputs[0].ne[0] * c.param("dim")),),
    golden=lambda xs, c: timestep_embedding(xs[0], c.param("dim"), c.param("max_period")),
    signatures=(sig("f32"),),
    tolerance={"f32": Tolerance("f32 frequencies (logf 1.5 ulp, expf or powf 2.5 ulp, two roundings) and the f32 "
                                "argument t·f_j: |Δarg| ≤ |t·f_j|·(5·ln(P)·j/half + 6)·u moves cos/sin by as "
                                "much; cosf/sinf within 2.5 ulp; ggml CPU: max |Δ| 7.7e-5 at |t| ≤ 1000 (nightly), "
                                "ci ≤ 0.28 of the allowance", ulp=2.5, model=timestep_model,
                                calibration=Calibration.GGML_CPU)},
    params={"dim": P("embedding width; odd → the last element is 0", int), "max_period": P("P (int)", int)},
    specials=(0.0, -0.0), structured_inputs=True,
    notes="cosines first, then sines; timesteps are F32 (drawn up to ±1000, as diffusion models use)"))

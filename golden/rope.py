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

from golden.case import OpCase
from golden.spec import OpList, OpSpec, P, sig
from golden.tolerance import F32_EPS, Tolerance, finite_abs

SPECS = OpList()

NORMAL, NEOX = 0, 2


def _f32(value: float) -> float:
    return float(np.float32(value))


def yarn_corr_dims(n_dims: int, n_ctx_orig: int, freq_base: float, beta_fast: float, beta_slow: float
                   ) -> tuple[float, float]:
    """YaRN ramp ends: the rotation index whose wavelength makes ``beta`` turns in n_ctx_orig tokens."""

    def corr(n_rot: float) -> float:
        # IEEE as in C: n_ctx_orig = 0 gives logf(0) = −inf (llama.cpp's YaRN defaults do that), β = 0 gives +inf
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.float64(n_ctx_orig) / np.float64(n_rot * 2 * math.pi)
            return float(n_dims * np.log(ratio) / (2 * np.log(np.float64(freq_base))))

    return max(0.0, float(np.floor(corr(beta_fast)))), min(n_dims - 1.0, float(np.ceil(corr(beta_slow))))


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


def _rope(xs: list[np.ndarray], c: OpCase) -> np.ndarray:
    return rope(
        xs[0], xs[1], c.param("n_dims"), c.param("mode"), xs[2] if c.param("freq_factors") else None,
        freq_base=c.param("freq_base"), freq_scale=c.param("freq_scale"), ext_factor=c.param("ext_factor"),
        n_ctx_orig=c.param("n_ctx_orig"), beta_fast=c.param("beta_fast"), beta_slow=c.param("beta_slow"),
        attn_factor=c.param("attn_factor"))


def rope_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """RoPE in f32 as ggml's CPU does it: ``θ_k`` is a running product of k f32 multiplications by
    ``f32(powf(base, −2/n_dims))`` (≤ 2u off), so ``Δθ_k ≤ (3k + 8)·u·Θ_k`` with ``Θ_k`` the
    unscaled angle ``|p|·base^(−2k/n)/ff_k·max(1, freq_scale)`` (the +8 covers the freq-factor
    division, freq_scale and the YaRN mix). cos/sin, ``·mscale`` and the rotation's two products and
    sum add 6u. A rotated pair (x0, x1) is then off by ``mscale·(|x0| + |x1|)·(Δθ + 6u)`` (plus
    4·2^-150 where the result is subnormal); the copied tail is exact. At positions of tens of
    thousands ``Δθ`` reaches about 1e-2 rad."""
    x, pos = np.asarray(inputs[0], np.float64), np.asarray(inputs[1], np.float64).ravel()
    n_dims, mode = int(case.param("n_dims")), int(case.param("mode"))
    ff = inputs[2] if case.param("freq_factors") else None
    _, mscale = rope_angles(
        pos, n_dims, case.param("freq_base"), case.param("freq_scale"), ff, case.param("ext_factor"),
        case.param("n_ctx_orig"), case.param("beta_fast"), case.param("beta_slow"), case.param("attn_factor"))
    unscaled, _ = rope_angles(np.abs(pos), n_dims, case.param("freq_base"), 1.0, ff)
    k = np.arange(n_dims // 2, dtype=np.float64)
    dtheta = (3 * k + 8) * F32_EPS * unscaled * max(1.0, float(np.float32(case.param("freq_scale"))))
    half = n_dims // 2
    if mode == NEOX:
        first, second = np.s_[..., :half], np.s_[..., half:n_dims]
    else:
        first, second = np.s_[..., 0:n_dims:2], np.s_[..., 1:n_dims:2]
    pair = abs(mscale) * (finite_abs(x[first]) + finite_abs(x[second])) * (dtheta[None, :, None, :] + 6 * F32_EPS)
    pair = pair + 4 * 2.0**-150  # results in f32's subnormal range: four roundings of absolute 2^-150
    out = np.zeros_like(x)
    out[first] = pair
    out[second] = pair
    return out


SPECS.add(OpSpec(
    name="ROPE", family="rope", golden=_rope, signatures=(sig("f32", "i32"), sig("f16", "i32")),
    tolerance={"f32": Tolerance("running f32 product for θ; ggml CPU: |Δθ| ≈ 5e-3 rad at positions ≤ 65535 "
                                "(|Δy| up to 3.4 for |x| ≤ 150), 9e-6 below 64; nightly ≤ 0.37 of the model",
                                ulp=0.5, model=rope_model,
                                model_name="rope(mscale·(|x0|+|x1|)·((3k+8)·u·Θ_k + 6u))"),
               "f16": Tolerance("computed in f32 as for F32, then one F16 rounding; ggml CPU nightly ≤ 0.999 of "
                                "the allowance (f32 results at F16 rounding ties)",
                                ulp=0.5, model=rope_model, model_name="rope(...) + ½ulp_f16")},
    params={"n_dims": P("rotated leading dims (even, ≤ ne0)", int),
            "mode": P("0 NORMAL (pairs 2k,2k+1), 2 NEOX (pairs k, k+n_dims/2)", int),
            "n_ctx_orig": P("YaRN original context", int), "freq_base": P("θ base (f32)"),
            "freq_scale": P("θ scale (f32)"), "ext_factor": P("YaRN ramp mix (0 = off)"),
            "attn_factor": P("magnitude scale (f32)"), "beta_fast": P("YaRN"), "beta_slow": P("YaRN"),
            "freq_factors": P("a third F32 src divides θ_k (n_dims/2 or more values)", bool)},
    specials=(0.0, -0.0), structured_inputs=True,
    notes="src1 holds one I32 position per token (ne2). ±inf/NaN are not drawn: their rotation's sign "
          "depends on cos/sin signs that the f32 θ may flip near zero"))

"""ROPE (``ggml_rope_ext``), modes NORMAL (0, adjacent pairs) and NEOX (2, halves), with YaRN; and
the multi-section modes of ``ggml_rope_multi``: MROPE (8), VISION (24) and IMROPE (40).

Numpy shapes: ``x`` is (ne3, n_tokens = ne2, n_head = ne1, head_dim = ne0); ``pos`` holds one I32
position per token (ne2 values), or four per token for the multi-section modes (ne2·4 values: the
t, h, w and e rows one after the other); ``freq_factors`` (optional) at least n_dims/2 F32 divisors.

Multi-section modes (ggml.h; ggml-cpu ops.cpp is the reference for the corners): rotation pair k
takes the position row of its section, chosen by ``sector = k mod Σsections``. MROPE gives the
first s0 sectors t, the next s1 h, then s2 w, the rest e; IMROPE interleaves them (sector % 3 = 1
below 3·s1 is h, % 3 = 2 below 3·s2 is w, % 3 = 0 below 3·s0 is t, anything else e). Both rotate
NEOX-style pairs (k, k + n_dims/2) for k < n_dims/2 and take θ's exponent k as ROPE does. VISION
needs n_dims = ne0/2 and sections [y, x, 0, 0], rotates every element in pairs (k, k + n_dims) for
k < n_dims, and takes as θ's exponent the pair's index within its section.

Exact maths: ``θ_k = p · base^(−2k/n_dims)`` evaluated directly for every k (ggml's CPU instead
keeps a running f32 product ``θ_{k+1} = θ_k · f32(base^(−2/n_dims))``; the tolerance row carries
that deviation). The float op params are taken as the f32 values ggml stores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from golden.case import OpCase
from golden.spec import OpList, OpSpec, P, element_regimes, partial_tile, sig
from golden.tolerance import F32_EPS, Calibration, Tolerance, finite_abs

SPECS = OpList()

# ggml-cuda's rope kernels take a row's pairs 256 threads to a block: 512 elements per block
ROPE_HEAD_TILE = 512

NORMAL, NEOX, MROPE, VISION, IMROPE = 0, 2, 8, 24, 40
MULTI_SECTION_MODES = (MROPE, VISION, IMROPE)
MODES = (NORMAL, NEOX, *MULTI_SECTION_MODES)


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
    exponents: np.ndarray | None = None,
) -> tuple[np.ndarray, float]:
    """θ per (token, pair k) of shape (n_tokens, n_pairs), and the magnitude scale ``mscale``.

    ``pos`` is one position per token, or one per (token, pair) for the multi-section modes;
    ``exponents`` the power of ``base^(−2/n_dims)`` per pair (k itself unless a section restarts it);
    the YaRN ramp and the freq factors always go by the pair index k."""
    base, fs, ext = _f32(freq_base), _f32(freq_scale), _f32(ext_factor)
    expo = np.arange(n_dims // 2, dtype=np.float64) if exponents is None else np.asarray(exponents, np.float64)
    k = np.arange(expo.size, dtype=np.float64)
    pos = np.asarray(pos, np.float64)
    theta_e = (pos if pos.ndim == 2 else pos.reshape(-1, 1)) * base ** (-2.0 * expo / n_dims)
    if freq_factors is not None:
        theta_e = theta_e / np.asarray(freq_factors, np.float64).ravel()[: expo.size]
    theta = fs * theta_e
    mscale = _f32(attn_factor)
    if ext != 0.0:
        lo, hi = yarn_corr_dims(n_dims, n_ctx_orig, base, _f32(beta_fast), _f32(beta_slow))
        ramp = 1.0 - np.clip((k - lo) / max(0.001, hi - lo), 0.0, 1.0)
        mix = ramp * ext
        theta = theta * (1.0 - mix) + theta_e * mix
        mscale *= 1.0 + 0.1 * math.log(1.0 / fs)
    return theta, mscale


def section_plan(mode: int, sections: tuple[int, ...], n_pairs: int) -> tuple[np.ndarray, np.ndarray]:
    """For each rotated pair k of a multi-section mode: the position row it takes (0 t, 1 h, 2 w,
    3 e) and θ's exponent: k, or in VISION the pair's index within its section (ggml.h: "[0123] for
    the y section, then [0123] for the x section", as ggml-cuda and ggml-cann compute it)."""
    s0, s1, s2, _ = sections
    sec_w, sec_e, total = s0 + s1, s0 + s1 + s2, sum(sections)
    rows = np.zeros(n_pairs, dtype=np.int64)
    exponents = np.arange(n_pairs, dtype=np.int64)
    for k in range(n_pairs):
        sector = k % total
        if mode == IMROPE:
            if sector % 3 == 1 and sector < 3 * s1:
                row = 1
            elif sector % 3 == 2 and sector < 3 * s2:
                row = 2
            elif sector % 3 == 0 and sector < 3 * s0:
                row = 0
            else:
                row = 3
        else:
            row = 1 if s0 <= sector < sec_w else 2 if sec_w <= sector < sec_e else 3 if sector >= sec_e else 0
        rows[k] = row
        if mode == VISION:
            exponents[k] = sector - (0, s0, sec_w, sec_e)[row]
    return rows, exponents


def check_rope(case: OpCase, inputs: list[np.ndarray]) -> None:
    """Cases ggml's constructor or every kernel rejects, or that have no defined result."""
    mode, n_dims, ne = int(case.param("mode")), int(case.param("n_dims")), case.inputs[0].ne
    if mode not in MODES:
        raise ValueError(f"ROPE: mode {mode} is not one of {MODES}")
    if n_dims % 2 or not 0 < n_dims <= ne[0]:
        raise ValueError(f"ROPE: n_dims {n_dims} must be even and in 1..ne0 ({ne[0]})")
    per_token = 4 if mode in MULTI_SECTION_MODES else 1
    if case.inputs[1].ne != (ne[2] * per_token, 1, 1, 1):
        raise ValueError(f"ROPE: mode {mode} needs {per_token} position(s) per token: ne1 [{ne[2] * per_token},1,1,1]")
    sections = case.param("sections", None)
    if mode in MULTI_SECTION_MODES:
        if sections is None or len(sections) != 4 or min(sections) < 0:
            raise ValueError("ROPE: the multi-section modes need sections=[t,h,w,e] (4 counts ≥ 0)")
        if sum(sections[:3]) == 0 or sum(sections) > ne[0]:
            raise ValueError(f"ROPE: sections {list(sections)} need s0+s1+s2 > 0 and a sum ≤ ne0 ({ne[0]})")
        if mode == VISION and n_dims != ne[0] // 2:
            raise ValueError(f"ROPE: VISION needs n_dims = ne0/2 ({ne[0] // 2}), got {n_dims}")
        if mode == VISION and (sections[2] or sections[3]):  # ggml-cpu and ggml-cann use them, ggml-cuda does not
            raise ValueError("ROPE: VISION takes sections [y, x, 0, 0] (ggml.h: the last two are ignored)")
    elif sections is not None:
        raise ValueError(f"ROPE: sections apply to the multi-section modes {MULTI_SECTION_MODES} only")
    if case.param("freq_factors"):
        need = n_dims if mode == VISION else n_dims // 2  # VISION's kernel reads a factor per rotated pair
        if case.inputs[2].ne[0] < need:
            raise ValueError(f"ROPE: mode {mode} reads {need} freq factors, src2 has {case.inputs[2].ne[0]}")


@dataclass(frozen=True)
class RopeGeometry:
    """Which elements pair up, and each pair's position and θ exponent (per token)."""

    positions: np.ndarray  # (n_tokens, n_pairs)
    exponents: np.ndarray  # (n_pairs,)
    first: tuple[Any, ...]  # numpy index of x0 (last axis), with ``second`` of x1
    second: tuple[Any, ...]


def rope_geometry(case: OpCase, pos: np.ndarray) -> RopeGeometry:
    mode, n_dims = int(case.param("mode")), int(case.param("n_dims"))
    pos = np.asarray(pos, np.float64).ravel()
    if mode in MULTI_SECTION_MODES:
        n_pairs = n_dims if mode == VISION else n_dims // 2
        rows, exponents = section_plan(mode, tuple(case.param("sections")), n_pairs)
        positions = pos.reshape(4, -1).T[:, rows]
    else:
        n_pairs = n_dims // 2
        exponents = np.arange(n_pairs)
        positions = np.repeat(pos.reshape(-1, 1), n_pairs, axis=1)
    first: tuple[Any, ...]
    second: tuple[Any, ...]
    if mode == NORMAL:
        first, second = np.s_[..., 0:n_dims:2], np.s_[..., 1:n_dims:2]
    else:  # NEOX and the multi-section modes: pairs (k, k + n_pairs)
        first, second = np.s_[..., :n_pairs], np.s_[..., n_pairs : 2 * n_pairs]
    return RopeGeometry(positions, exponents, first, second)


def rope(x: np.ndarray, geometry: RopeGeometry, n_dims: int, freq_factors: np.ndarray | None = None,
         **angles: Any) -> np.ndarray:
    """Rotate each pair by its token's angle; elements in no pair are copied."""
    x = np.asarray(x, np.float64)
    theta, mscale = rope_angles(geometry.positions, n_dims, freq_factors=freq_factors,
                                exponents=geometry.exponents, **angles)
    cos = (np.cos(theta) * mscale)[None, :, None, :]  # (1, tokens, 1, n_pairs)
    sin = (np.sin(theta) * mscale)[None, :, None, :]
    first, second = geometry.first, geometry.second
    out = x.copy()
    with np.errstate(invalid="ignore", over="ignore"):
        x0, x1 = x[first], x[second]
        out[first] = x0 * cos - x1 * sin
        out[second] = x0 * sin + x1 * cos
    return out


def _angle_params(c: OpCase) -> dict[str, Any]:
    return {name: c.param(name) for name in ("freq_base", "freq_scale", "ext_factor", "n_ctx_orig", "beta_fast",
                                             "beta_slow", "attn_factor")}


def _rope(xs: list[np.ndarray], c: OpCase) -> np.ndarray:
    ff = xs[2] if c.param("freq_factors") else None
    return rope(xs[0], rope_geometry(c, xs[1]), c.param("n_dims"), ff, **_angle_params(c))


def rope_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """RoPE in f32 as ggml's CPU does it: ``θ_k`` is a running product of e_k f32 multiplications by
    ``f32(powf(base, −2/n_dims))`` (≤ 2u off), so ``Δθ_k ≤ (3e_k + 8)·u·Θ_k`` with ``Θ_k`` the
    unscaled angle ``|p_k|·base^(−2e_k/n)/ff_k·max(1, freq_scale)`` (the +8 covers the freq-factor
    division, freq_scale and the YaRN mix). e_k is the pair index k, except in VISION, whose θ
    restarts at each section (e_k ≤ k multiplications since the restart); p_k is the position of
    the pair's section in the multi-section modes. cos/sin, ``·mscale`` and the rotation's two
    products and sum add 6u. A rotated pair (x0, x1) is then off by ``mscale·(|x0| + |x1|)·(Δθ +
    6u)`` (plus 4·2^-150 where the result is subnormal); the copied tail is exact. At positions of
    tens of thousands ``Δθ`` reaches about 1e-2 rad."""
    x = np.asarray(inputs[0], np.float64)
    n_dims = int(case.param("n_dims"))
    ff = inputs[2] if case.param("freq_factors") else None
    geometry = rope_geometry(case, inputs[1])
    _, mscale = rope_angles(geometry.positions, n_dims, freq_factors=ff, exponents=geometry.exponents,
                            **_angle_params(case))
    unscaled, _ = rope_angles(np.abs(geometry.positions), n_dims, case.param("freq_base"), 1.0, ff,
                              exponents=geometry.exponents)
    steps = np.asarray(geometry.exponents, np.float64)
    dtheta = (3 * steps + 8) * F32_EPS * unscaled * max(1.0, float(np.float32(case.param("freq_scale"))))
    first, second = geometry.first, geometry.second
    pair = abs(mscale) * (finite_abs(x[first]) + finite_abs(x[second])) * (dtheta[None, :, None, :] + 6 * F32_EPS)
    pair = pair + 4 * 2.0**-150  # results in f32's subnormal range: four roundings of absolute 2^-150
    out = np.zeros_like(x)
    out[first] = pair
    out[second] = pair
    return out


SPECS.add(OpSpec(
    name="ROPE", family="rope",
    regimes=(partial_tile("head", lambda c: c.inputs[0].ne[0], ROPE_HEAD_TILE), *element_regimes()),
    golden=_rope, signatures=(sig("f32", "i32"), sig("f16", "i32")),
    tolerance={"f32": Tolerance("running f32 product for θ (per section in the multi-section modes); ggml CPU: "
                                "|Δθ| ≈ 5e-3 rad at positions ≤ 65535 (|Δy| up to 3.4 for |x| ≤ 150), 9e-6 below "
                                "64; nightly ≤ 0.37 of the model (NORMAL/NEOX), ≤ 0.48 (MROPE, VISION, IMROPE, "
                                "300 nightly-size cases incl. freq_scale > 1 and YaRN with n_ctx_orig = 0)",
                                ulp=0.5, model=rope_model,
                                model_name="rope(mscale·(|x0|+|x1|)·((3e_k+8)·u·Θ_k + 6u))",
                                calibration=Calibration.GGML_CPU),
               "f16": Tolerance("computed in f32 as for F32, then one F16 rounding; ggml CPU nightly ≤ 0.999 of "
                                "the allowance (f32 results at F16 rounding ties)",
                                ulp=0.5, model=rope_model, model_name="rope(...) + ½ulp_f16",
                                calibration=Calibration.GGML_CPU)},
    params={"n_dims": P("rotated leading dims (even, ≤ ne0; VISION: = ne0/2)", int),
            "mode": P("0 NORMAL (pairs 2k,2k+1), 2 NEOX (pairs k, k+n_dims/2); ggml_rope_multi: 8 MROPE, "
                      "40 IMROPE (NEOX pairs, sectioned positions), 24 VISION (pairs k, k+n_dims)", int),
            "n_ctx_orig": P("YaRN original context", int), "freq_base": P("θ base (f32)"),
            "freq_scale": P("θ scale (f32)"), "ext_factor": P("YaRN ramp mix (0 = off)"),
            "attn_factor": P("magnitude scale (f32)"), "beta_fast": P("YaRN"), "beta_slow": P("YaRN"),
            "freq_factors": P("a third F32 src divides θ_k (n_dims/2 or more values; VISION: n_dims)", bool),
            "sections": P("multi-section modes: rotation pairs per section [t, h, w, e] (ggml_rope_multi)",
                          tuple, optional=True)},
    validate=check_rope, specials=(0.0, -0.0), structured_inputs=True,
    notes="src1 holds one I32 position per token (ne2), four per token (t, h, w, e rows) in the "
          "multi-section modes. ±inf/NaN are not drawn: their rotation's sign depends on cos/sin signs "
          "that the f32 θ may flip near zero. ggml-cann declines ne0 > 896 (drawn: recorded as declined)"))

"""Tolerance rules: how far a device result may sit from the exact golden value, and why.

Each element ``i`` may differ from the exact float64 golden value ``g_i`` by

    allowed_i = atol + rtol·|g_i| + ulp·spacing(dst, g_i) + model(case, inputs, g)_i

``ulp = 0.5`` alone means "correctly rounded to the destination type". ``model`` is an op's error
model (e.g. GELU's F16 table, a dot product growing with K). A case passes when every finite
element is within its allowance, the NaN/±inf pattern matches the golden's, and (if set) the NMSE
is at most ``nmse``. Every rule carries a one-line reason from an error model; numbers without a
reason are not allowed (the catalogue test checks that).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from golden.case import OpCase

ErrorModel = Callable[[OpCase, list[np.ndarray], np.ndarray], np.ndarray]

F16_EPS = 2.0**-11  # unit roundoff of IEEE half
F32_EPS = 2.0**-24  # unit roundoff of IEEE single


@dataclass(frozen=True)
class Tolerance:
    reason: str
    ulp: float = 0.0
    atol: float = 0.0
    rtol: float = 0.0
    nmse: float | None = None
    model: ErrorModel | None = None
    model_name: str = ""

    def allowed(self, case: OpCase, inputs: list[np.ndarray], golden: np.ndarray, dst_dtype: str) -> np.ndarray:
        from golden.dtypes import ulp as spacing

        g = np.abs(np.where(np.isfinite(golden), golden, 0.0))
        allowed = self.atol + self.rtol * g
        if self.ulp:
            allowed = allowed + self.ulp * spacing(g, dst_dtype)
        if self.model is not None:
            allowed = allowed + self.model(case, inputs, golden)
        return np.broadcast_to(allowed, golden.shape)

    def describe(self) -> dict[str, object]:
        d: dict[str, object] = {"reason": self.reason}
        for key in ("ulp", "atol", "rtol"):
            if getattr(self, key):
                d[key] = getattr(self, key)
        if self.nmse is not None:
            d["nmse"] = self.nmse
        if self.model is not None:
            d["model"] = self.model_name or self.model.__name__
        return d


EXACT = Tolerance("bit-exact: the op moves or selects values without arithmetic")
ROUNDED = Tolerance("one rounding of the exact result to the destination type", ulp=0.5)


def rounded_via_f32(reason: str = "") -> Tolerance:
    """Computed in f32, then rounded once more to a narrower destination (F16/BF16)."""
    return Tolerance(
        reason or "computed in f32 (≤0.5 ulp_f32), then rounded to the destination type (0.5 ulp)",
        ulp=0.5,
        rtol=F32_EPS,
    )


# --- error models -------------------------------------------------------------------------------


def f16_table_model(max_slope: float) -> ErrorModel:
    """ggml's CPU computes GELU/GELU_QUICK of F32 input as ``T[f16(x)]``: the input is rounded
    to F16 (|Δx| ≤ 2^-11·|x|, or 2^-25 in F16's subnormal range), the function moves that by at
    most ``max_slope``·|Δx|, and the table entry is an F16 rounding of an f32 evaluation whose
    ``1 + tanh`` cancels for negative x (≤ 2^-24·|x| absolute)."""

    def model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
        x = np.abs(np.where(np.isfinite(inputs[0]), inputs[0], 0.0)).astype(np.float64)
        g = np.abs(np.where(np.isfinite(golden), golden, 0.0))
        input_rounding = 0.0 if case.inputs[0].dtype == "f16" else max_slope * (F16_EPS * x + 2.0**-25)
        table_rounding = F16_EPS * g + 2.0**-25
        f32_eval = F32_EPS * x + 4 * F32_EPS * g
        return input_rounding + table_rounding + f32_eval

    model.__name__ = f"f16_table(max_slope={max_slope})"
    return model


def _finite_abs(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return np.abs(np.where(np.isfinite(x), x, 0.0))


def centred_norm_model(stats: Callable[[OpCase, np.ndarray], tuple[np.ndarray, np.ndarray]]) -> ErrorModel:
    """NORM/GROUP_NORM in f32: ``mean`` is rounded to f32 and divided in f32 (≤ 2u·|mean|), each
    ``d = x − mean`` is then off by that much (plus u·|d|), and the variance, ``sqrtf`` and the
    reciprocal add a few u relative. So ``|Δy| ≤ 4u·|mean|·rstd + 6u·|y|``: the first term is the
    cancellation when the mean is large next to the spread. ``stats`` gives (mean, rstd)
    broadcastable to the input."""

    def model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            mean, rstd = stats(case, np.asarray(inputs[0], np.float64))
            bound = 4 * F32_EPS * _finite_abs(mean) * _finite_abs(rstd) + 6 * F32_EPS * _finite_abs(golden)
        return np.broadcast_to(bound, golden.shape)

    model.__name__ = "centred_norm(4u·|mean|·rstd + 6u·|y|)"
    return model


def softmax_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """Softmax in f32 (ggml's CPU, any f32 implementation). A logit ``w = x·scale + slope·mask``
    is off by ``Δw ≤ u·(2|x·scale| + (2h + 6)|slope·mask|)`` (two roundings; the ALiBi slope is
    ``powf(m0, h+1)`` of an f32 ``m0``, so its relative error grows with the head index h), and
    ``w − max`` adds u·|w − max|. ``y_i = e_i / Σe`` moves by ``Δw_i`` plus the largest ``Δw`` of
    the row (through the sum), relatively; exp, the sum, the reciprocal and the product add 8u.
    Results below FLT_MIN may be flushed to zero by a SIMD exp (absolute 2^-126)."""
    from golden import softmax

    a = np.asarray(inputs[0], np.float64)
    has_mask = bool(case.param("mask", False))
    x_part = _finite_abs(a * np.float32(case.param("scale", 1.0)))
    dw = 2 * x_part
    if has_mask:
        zero = np.zeros_like(a)
        slope_mask = _finite_abs(softmax.soft_max_logits(zero, inputs[1], 1.0, case.param("max_bias", 0.0)))
        h = np.arange(a.shape[1], dtype=np.float64).reshape(1, -1, 1, 1)
        dw = dw + (2 * h + 6) * slope_mask
    with np.errstate(invalid="ignore", over="ignore"):
        w = softmax.soft_max_logits(a, inputs[1] if has_mask else None, case.param("scale", 1.0),
                                    case.param("max_bias", 0.0))
        spread = _finite_abs(w - np.max(np.where(np.isfinite(w), w, -np.inf), axis=-1, keepdims=True))
    dw = F32_EPS * (dw + spread)
    rel = 8 * F32_EPS + dw + dw.max(axis=-1, keepdims=True)
    return rel * _finite_abs(golden) + 2.0**-126


def rope_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """RoPE in f32 as ggml's CPU does it: ``θ_k`` is a running product of k f32 multiplications by
    ``f32(powf(base, −2/n_dims))`` (≤ 2u off), so ``Δθ_k ≤ (3k + 8)·u·Θ_k`` with ``Θ_k`` the
    unscaled angle ``|p|·base^(−2k/n)/ff_k·max(1, freq_scale)`` (the +8 covers the freq-factor
    division, freq_scale and the YaRN mix). cos/sin, ``·mscale`` and the rotation's two products and
    sum add 6u. A rotated pair (x0, x1) is then off by ``mscale·(|x0| + |x1|)·(Δθ + 6u)`` (plus
    4·2^-150 where the result is subnormal); the copied tail is exact. At positions of tens of
    thousands ``Δθ`` reaches about 1e-2 rad."""
    from golden import rope

    x, pos = np.asarray(inputs[0], np.float64), np.asarray(inputs[1], np.float64).ravel()
    n_dims, mode = int(case.param("n_dims")), int(case.param("mode", 0))
    ff = inputs[2] if case.param("freq_factors", False) else None
    _, mscale = rope.rope_angles(
        pos, n_dims, case.param("freq_base"), case.param("freq_scale"), ff, case.param("ext_factor"),
        case.param("n_ctx_orig"), case.param("beta_fast"), case.param("beta_slow"), case.param("attn_factor"))
    unscaled, _ = rope.rope_angles(np.abs(pos), n_dims, case.param("freq_base"), 1.0, ff)
    k = np.arange(n_dims // 2, dtype=np.float64)
    dtheta = (3 * k + 8) * F32_EPS * unscaled * max(1.0, float(np.float32(case.param("freq_scale"))))
    half = n_dims // 2
    if mode == rope.NEOX:
        first, second = np.s_[..., :half], np.s_[..., half:n_dims]
    else:
        first, second = np.s_[..., 0:n_dims:2], np.s_[..., 1:n_dims:2]
    pair = abs(mscale) * (_finite_abs(x[first]) + _finite_abs(x[second])) * (dtheta[None, :, None, :] + 6 * F32_EPS)
    pair = pair + 4 * 2.0**-150  # results in f32's subnormal range: four roundings of absolute 2^-150
    out = np.zeros_like(x)
    out[first] = pair
    out[second] = pair
    return out


def dot_product_model(c: float = 1.0) -> ErrorModel:
    """A K-term dot product accumulated in f32 in any order is within ``K·u·Σ|a_k||b_k|`` (the
    classic γ_K bound, TOSA's form); with F16 weights and F32 src1 the device may round src1 to F16
    first (ggml's CPU does: it converts src1 to the weights' vec_dot_type), adding ``2^-11·Σ|a||b|``
    and, where src1 is below F16's range, ``2^-25·Σ|a|``. Gradual underflow adds 2^-150 per rounding.
    ``allowed_i = (c·K·2^-24 + e_src1)·Σ_k|a_k||b_k| + (K + 1)·2^-150``."""
    from golden import matmul

    def model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
        a, b = (np.asarray(v, np.float64) for v in inputs[:2])
        k = a.shape[-1]
        with np.errstate(invalid="ignore", over="ignore"):
            scale = matmul.abs_dot(_finite_abs(a), _finite_abs(b))
            allowed = c * k * F32_EPS * scale + (k + 1) * 2.0**-150  # f32 underflow: 2^-150 per rounding
            if case.inputs[0].dtype == "f16" and case.inputs[1].dtype == "f32":
                # |Δb| ≤ 2^-11·|b| + 2^-25 (half an F16 subnormal step: tiny f32 values become 0)
                allowed = allowed + F16_EPS * scale + 2.0**-25 * matmul.abs_dot(_finite_abs(a), np.ones_like(b))
        return allowed

    model.__name__ = f"dot_product({c}·K·2^-24 [+2^-11 for F16 weights with F32 src1])·Σ|a||b|"
    return model


def quant_matmul_model() -> ErrorModel:
    """MUL_MAT with Q4_0/Q8_0 weights, against the exact product of the dequantized weights and src1.

    The device may round src1 before the dot product: ggml's CPU quantizes each 32-block of a src1
    row to Q8_0 (error ≤ ½·amax/127 per element, plus amax·2^-11 from the F16 scale), ggml-cann casts
    src1 to F16 (2^-11·|b|, or half an F16 subnormal step). The larger of the two is allowed per
    element, weighted by |a_k|, on top of the f32 accumulation bound K·2^-24·Σ|a||b|."""
    from golden import matmul

    def model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
        a, b = (np.asarray(v, np.float64) for v in inputs[:2])
        k = a.shape[-1]
        abs_a, abs_b = _finite_abs(a), _finite_abs(b)
        blocks = abs_b.reshape(abs_b.shape[:-1] + (k // 32, 32))
        amax = np.repeat(blocks.max(axis=-1), 32, axis=-1)
        q8_error = amax * (0.5 / 127 + F16_EPS)
        f16_error = F16_EPS * abs_b + 2.0**-25
        with np.errstate(invalid="ignore", over="ignore"):
            src1_rounding = matmul.abs_dot(abs_a, np.maximum(q8_error, f16_error))
            accumulate = k * F32_EPS * matmul.abs_dot(abs_a, abs_b) + (k + 1) * 2.0**-150
        return src1_rounding + accumulate

    model.__name__ = "quant_matmul(max(Q8_0, F16) rounding of src1 + K·2^-24)·Σ|a||b|"
    return model


def pool_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """MAX selects a stored value (or −FLT_MAX): exact. AVG sums k0·k1 taps in f32 (≤ (k0·k1 − 1)·u·Σ|x|)
    and divides once: ``(k0·k1 + 1)·(u·avg(|x|) + 2^-150)`` over the window (2^-150: a rounding in
    f32's subnormal range), plus the final rounding to f32. The half ulp is part of this model rather
    than the row's ``ulp`` because ``dtypes.ulp`` is infinite at ±FLT_MAX, which would excuse any
    value where a padding-only MAX window must give −FLT_MAX."""
    from golden import conv

    if case.param("op") != conv.POOL_AVG:
        return np.zeros_like(golden)
    k0, k1 = case.param("k0"), case.param("k1")
    mag = conv.pool_2d(_finite_abs(inputs[0]), conv.POOL_AVG, k0, k1, case.param("s0"), case.param("s1"),
                       case.param("p0"), case.param("p1"))
    with np.errstate(over="ignore"):
        half_ulp = 0.5 * np.spacing(np.minimum(_finite_abs(golden), 2.0**127).astype(np.float32)).astype(np.float64)
    return (k0 * k1 + 1) * (F32_EPS * mag + 2.0**-150) + half_ulp


def timestep_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """ggml computes ``f_j = expf(−logf(P)·j/half)`` in f32: the exponent carries 3u relative
    (≤ 3u·ln(P)·j/half absolute), so f_j is off by (3·ln(P)·j/half + 2)u relatively, and
    ``t·f_j`` adds u. cosf/sinf of the argument then move by ``|t·f_j|·(3·ln(P)·j/half + 4)·u``,
    plus 2u of their own."""
    dim, period = int(case.param("dim")), int(case.param("max_period", 10000))
    half = dim // 2
    j = np.arange(half, dtype=np.float64)
    log_p = np.log(period)
    freqs = np.exp(-log_p * j / max(half, 1))
    t = _finite_abs(inputs[0]).reshape(-1, 1)
    bound = t * freqs * (3 * log_p * j / max(half, 1) + 4) * F32_EPS + 2 * F32_EPS
    out = np.zeros((t.shape[0], dim))
    out[:, :half] = bound
    out[:, half : 2 * half] = bound
    return out.reshape(golden.shape)

"""UPSCALE (ggml_upscale with an integer factor, ggml_interpolate to any size) in every scale mode:
nearest, bilinear (with or without align-corners, with or without antialias) and bicubic.

**Nearest.** ggml's CPU picks the source index in each of the four dims as ``(int64)((float)i / sf)``
with the f32 scale ``sf = (float)ne_out / (float)ne_in``: an f32 division truncated toward zero. For
integer factors that is ``i // k``; for other ratios it can differ from ``floor(i·in/out)`` (in 14,
out 16, i 8 gives 6, not 7), so the rule is modelled in f32 exactly as written (nearest is not
continuous in the coordinate, so no error model could absorb a different rounding).

**Bilinear, bicubic, antialias** act on dims 0 and 1 (dims 2 and 3 still take the nearest rule).
Output ``i`` of an axis samples the source at ``x = (i + ½)·in/out − ½`` (pixel ``k``'s centre is
at ``k``); with ``GGML_SCALE_FLAG_ALIGN_CORNERS`` at ``x = i·(in − 1)/(out − 1)`` (when both sizes
exceed 1; otherwise ``x = i·in/out``). Then

- bilinear: linear interpolation between pixels ``floor(x)`` and ``floor(x) + 1``, with ``x``
  clamped into ``[0, in − 1]`` (the edge pixel repeats);
- bicubic: Keys' cubic convolution with A = −0.75 (PyTorch's) over pixels ``floor(x) − 1 ..
  floor(x) + 2``, indices clamped to the edge, ``x`` itself not clamped;
- antialias (bilinear only): the triangle filter ``max(0, 1 − |k − x|/support)`` with ``support =
  max(1, in/out)`` (wider when downsampling) over every source pixel ``k``, normalised by the sum of
  the weights that fall inside the image (PyTorch's ``antialias=True``).

These goldens are exact: rational coordinates, float64 weights and sums. All three are continuous
in ``x``, so a device's f32 coordinates and weights only move the result by the error model below.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from golden import movement_checks as checks
from golden.case import OpCase
from golden.spec import OpList, OpSpec, P, element_regimes, sig
from golden.tolerance import F32_EPS, Calibration, Tolerance

SPECS = OpList()

SCALE_MODES = {"nearest": 0, "bilinear": 1, "bicubic": 2}  # enum ggml_scale_mode
FLAG_ALIGN_CORNERS = 1 << 8  # enum ggml_scale_flag
FLAG_ANTIALIAS = 1 << 9
KEYS_A = -0.75  # bicubic convolution parameter (ggml and PyTorch)
U = F32_EPS


@dataclass(frozen=True)
class ScaleMode:
    """The mode word ggml_interpolate takes: a ggml_scale_mode and ggml_scale_flag bits."""

    kind: str = "nearest"
    align_corners: bool = False
    antialias: bool = False

    @classmethod
    def of(cls, case: OpCase) -> ScaleMode:
        return cls(case.param("mode", "nearest"), bool(case.param("align_corners", False)),
                   bool(case.param("antialias", False)))

    @property
    def word(self) -> int:
        return (SCALE_MODES[self.kind] | (FLAG_ALIGN_CORNERS if self.align_corners else 0)
                | (FLAG_ANTIALIAS if self.antialias else 0))


def nearest_index(n_in: int, n_out: int, align_corners: bool = False) -> np.ndarray:
    """Source index of each of ``n_out`` outputs along one dim, by ggml's f32 rule (align-corners
    scales by (out − 1)/(in − 1) when both exceed 1, as ggml does for dims 0 and 1)."""
    if align_corners and n_out > 1 and n_in > 1:
        sf = np.float32(n_out - 1) / np.float32(n_in - 1)
    else:
        sf = np.float32(n_out) / np.float32(n_in)
    return (np.arange(n_out, dtype=np.float32) / sf).astype(np.int64)


def sample_positions(n_in: int, n_out: int, align_corners: bool) -> tuple[np.ndarray, int]:
    """The exact source coordinate of each output, ``x = N / D``: numerators ``N`` (int64) and the
    common denominator ``D``, so floors and fractions are exact."""
    i = np.arange(n_out, dtype=np.int64)
    if align_corners and n_out > 1 and n_in > 1:
        return i * (n_in - 1), n_out - 1
    if align_corners:  # ggml keeps the plain scale here, but still drops the half-pixel offset
        return i * n_in, n_out
    return (2 * i + 1) * n_in - n_out, 2 * n_out


def inverse_scale(n_in: int, n_out: int, align_corners: bool) -> float:
    """in/out, the source pixels per output pixel (antialias widens its filter by it)."""
    if align_corners and n_out > 1 and n_in > 1:
        return (n_in - 1) / (n_out - 1)
    return n_in / n_out


def keys_weight(t: np.ndarray) -> np.ndarray:
    """Keys' cubic convolution kernel W(|t|) with A = −0.75 (0 from |t| = 2 on)."""
    t = np.abs(t)
    near = ((KEYS_A + 2) * t - (KEYS_A + 3)) * t * t + 1
    far = ((KEYS_A * t - 5 * KEYS_A) * t + 8 * KEYS_A) * t - 4 * KEYS_A
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def keys_magnitude(t: np.ndarray) -> np.ndarray:
    """Σ|c_k|·|t|^k of the kernel's cubic at |t|: the scale of its f32 evaluation error."""
    t = np.abs(t)
    near = abs(KEYS_A + 2) * t**3 + abs(KEYS_A + 3) * t**2 + 1
    far = abs(KEYS_A) * t**3 + abs(5 * KEYS_A) * t**2 + abs(8 * KEYS_A) * t + abs(4 * KEYS_A)
    return np.where(t <= 1, near, far)


KEYS_SLOPE = 1.35  # max |W'(t)| for A = −0.75 (at |t| = 0.6)


@dataclass(frozen=True)
class AxisWeights:
    """One axis of a separable resample as ``(n_out, n_in)`` matrices: the exact weights (summed
    over taps that clamp to the same pixel), their magnitudes, and ``slack``: a bound on how far a
    device's f32 weight for each pixel may be from the exact one (the taps' errors plus pixels next
    to the taps, which a rounded coordinate may bring in with a weight near 0)."""

    weight: np.ndarray
    magnitude: np.ndarray
    slack: np.ndarray
    taps: np.ndarray  # (n_out,) taps with positive weight: the antialias accumulation length


def _scatter(n_in: int, idx: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = np.zeros((idx.shape[0], n_in))
    np.add.at(out, (np.repeat(np.arange(idx.shape[0]), idx.shape[1]), idx.ravel()), values.ravel())
    return out


def coordinate_error(x: np.ndarray) -> np.ndarray:
    """A bound on the f32 error of a sample coordinate: ``fl(fl((i + ½)/fl(out/in)) − ½)`` is within
    3.01u|x| + 1.01u; computing ``(i + ½)·fl(in/out)`` instead, or a centre and an offset separately,
    stays within 4u(|x| + 2)."""
    return 4 * U * (np.abs(x) + 2)


def axis_weights(n_in: int, n_out: int, mode: ScaleMode) -> AxisWeights:
    num, den = sample_positions(n_in, n_out, mode.align_corners)
    x = num / den
    delta = coordinate_error(x)[:, None]
    last = n_in - 1
    if mode.antialias:
        inv_support = 1.0 / max(1.0, inverse_scale(n_in, n_out, mode.align_corners))
        w = np.maximum(0.0, 1.0 - np.abs(np.arange(n_in)[None, :] - x[:, None]) * inv_support)
        positive = w > 0
        # the triangle's argument (k − x)/support: the coordinate error scaled, ≤ 6.5u from the offset,
        # the product and 1/support's rounding, then 1 − |t| rounds: 8u
        err = inv_support * delta + 8 * U
        near = np.zeros_like(positive)  # the taps and one pixel either side of the window
        near[:, 1:] |= positive[:, :-1]
        near[:, :-1] |= positive[:, 1:]
        near |= positive
        return AxisWeights(w, w, np.where(near, err, 0.0), positive.sum(axis=1))
    floor = num // den
    if mode.kind == "bilinear":
        left = np.clip(floor, 0, last)
        right = np.clip(floor + 1, 0, last)
        frac = np.clip((num - left * den) / den, 0.0, 1.0)
        idx = np.stack([left, right], axis=1)
        w = np.stack([1 - frac, frac], axis=1)
        # each weight moves with the coordinate (slope 1) and 1 − d rounds; a lerp's b − a adds u
        tap_err = np.broadcast_to(delta + 2 * U, w.shape)
        outside = np.stack([np.clip(left - 1, 0, last), np.clip(right + 1, 0, last)], axis=1)
        outside_err = np.broadcast_to(delta, outside.shape)
    elif mode.kind == "bicubic":
        frac = (num - floor * den) / den
        idx = np.clip(floor[:, None] + np.arange(-1, 3)[None, :], 0, last)
        t = np.stack([frac + 1, frac, 1 - frac, 2 - frac], axis=1)
        w = keys_weight(t)
        # slope × coordinate error, the argument's own rounding (|t| ≤ 2: 2u·1.35) and the cubic in f32
        # (γ_6·Σ|c_k||t|^k for Horner or for powers and a dot product)
        tap_err = KEYS_SLOPE * delta + 3 * U + 6.01 * U * keys_magnitude(t)
        outside = np.clip(floor[:, None] + np.array([-2, 3])[None, :], 0, last)
        outside_err = np.broadcast_to(KEYS_SLOPE * delta, outside.shape)
    else:
        raise ValueError(f"no interpolation weights for scale mode {mode.kind!r}")
    slack = _scatter(n_in, idx, tap_err) + _scatter(n_in, outside, outside_err)
    return AxisWeights(_scatter(n_in, idx, w), _scatter(n_in, idx, np.abs(w)), slack,
                       np.full(n_out, idx.shape[1]))


def _planes(x: np.ndarray, ne_out: Sequence[int]) -> np.ndarray:
    """The source planes each output plane reads: dims 2 and 3 by the nearest rule."""
    ne_in = tuple(reversed(x.shape))
    i2, i3 = nearest_index(ne_in[2], ne_out[2]), nearest_index(ne_in[3], ne_out[3])
    return np.asarray(x, dtype=np.float64)[np.ix_(i3, i2)]


def _separable(wy: np.ndarray, planes: np.ndarray, wx: np.ndarray) -> np.ndarray:
    """``wy @ plane @ wxᵀ`` for every plane, as two float64 matrix products (an einsum of the three
    without an optimised contraction order costs the fourth power of the side: hours at 512²)."""
    return np.matmul(np.matmul(wy, planes), wx.T)


def upscale(x: np.ndarray, ne_out: Sequence[int], mode: ScaleMode) -> np.ndarray:
    """Resize ``x`` (numpy order) to ggml shape ``ne_out`` in ``mode``."""
    ne_in = tuple(reversed(x.shape))
    planes = _planes(x, ne_out)
    if mode.kind == "nearest":
        i0 = nearest_index(ne_in[0], ne_out[0], mode.align_corners)
        i1 = nearest_index(ne_in[1], ne_out[1], mode.align_corners)
        return np.array(planes[:, :, i1][:, :, :, i0])
    wx, wy = axis_weights(ne_in[0], ne_out[0], mode), axis_weights(ne_in[1], ne_out[1], mode)
    out = _separable(wy.weight, planes, wx.weight)
    if mode.antialias:
        out = out / np.outer(wy.weight.sum(axis=1), wx.weight.sum(axis=1))
    return out


def out_shape(case: OpCase) -> tuple[int, int, int, int]:
    if case.form == "interpolate":
        return tuple(case.param("ne"))
    ne, sf = case.inputs[0].ne, case.param("sf")
    return (ne[0] * sf, ne[1] * sf, ne[2], ne[3])


def interpolation_error(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """How far an f32 implementation of the case's mode may be from the exact golden, per output.

    With tap weights off by at most ``slack`` per pixel (AxisWeights), the weighted sum moves by at
    most ``(|Wy| + Sy)·|P|·Sxᵀ + Sy·|P|·|Wx|ᵀ``; its f32 arithmetic adds γ_5 (bilinear: two products
    and three sums) or γ_4 twice (bicubic: two 4-tap passes) of ``|Wy|·|P|·|Wx|ᵀ``. Antialias divides
    the sum ``N`` by the weight total ``S``, both accumulated over ``n`` taps (γ_{n+1}), so
    ``|Δ| ≤ (ΔN + |v|·ΔS)/(S − ΔS) + u|v|``. Nearest copies values: 0."""
    mode = ScaleMode.of(case)
    if mode.kind == "nearest":
        return np.zeros(np.shape(golden))
    ne_in, ne_out = case.inputs[0].ne, out_shape(case)
    mag = np.abs(_planes(np.asarray(inputs[0], dtype=np.float64), ne_out))
    wx, wy = axis_weights(ne_in[0], ne_out[0], mode), axis_weights(ne_in[1], ne_out[1], mode)
    moved = _separable(wy.magnitude + wy.slack, mag, wx.slack) + _separable(wy.slack, mag, wx.magnitude)
    scale = _separable(wy.magnitude, mag, wx.magnitude)  # Σ|p||w|
    if not mode.antialias:
        return moved + (5 if mode.kind == "bilinear" else 8) * U * scale
    sx, sy = wx.weight.sum(axis=1), wy.weight.sum(axis=1)
    ex, ey = wx.slack.sum(axis=1), wy.slack.sum(axis=1)
    total = np.outer(sy, sx)
    n = np.outer(wy.taps, wx.taps)
    d_total = np.outer(sy + ey, ex) + np.outer(ey, sx) + (n + 1) * U * total
    d_sum = moved + (n + 2) * U * scale
    v = np.abs(np.where(np.isfinite(golden), golden, 0.0))
    return (d_sum + v * d_total) / (total - d_total) + U * v  # d_total ≪ total: (n + 1)u plus slopes × 1e-7


def _upscale(xs: list[np.ndarray], c: OpCase) -> np.ndarray:
    return upscale(xs[0], out_shape(c), ScaleMode.of(c))


def _check_upscale(case: OpCase, inputs: list[np.ndarray]) -> None:
    checks.upscale_shape(case, inputs)
    mode = ScaleMode.of(case)
    if mode.kind not in SCALE_MODES:
        raise ValueError(f"UPSCALE: mode={mode.kind!r} is not one of {', '.join(SCALE_MODES)} (case {case.case_id})")
    if mode.antialias and mode.kind != "bilinear":
        raise ValueError(f"UPSCALE: antialias needs mode=bilinear (ggml asserts it) (case {case.case_id})")
    if mode.kind != "nearest" and inputs and not np.all(np.isfinite(np.asarray(inputs[0], dtype=np.float64))):
        raise ValueError(f"UPSCALE: {mode.kind} of non-finite inputs is left undefined: whether a tap of weight "
                         f"0 on an inf gives NaN depends on the implementation (case {case.case_id})")


SPECS.add(OpSpec(
    name="UPSCALE", family="resample",
    regimes=(*element_regimes(elements=lambda c: math.prod(out_shape(c))),), golden=_upscale, signatures=(sig("f32"),),
    tolerance={"f32": Tolerance(
        "nearest: bit-exact copies, the source index by ggml's f32 rule trunc(f32(i)/f32(out/in)), modelled "
        "exactly. bilinear/bicubic/antialias: exact interpolation at exact coordinates; an f32 device moves "
        "each tap weight by its slope × the coordinate error 4u(|x| + 2) plus the weight's own evaluation "
        "(bilinear 2u; Keys cubic γ_6·Σ|c_k||t|^k; triangle 8u) — over the taps and the pixels next to them "
        "—, then the sums add γ_5 (bilinear), 2·γ_4 (bicubic) or γ_{n+1} on the sum and on the normaliser "
        "(antialias) of Σ|p||w|; ggml CPU: ≤ 0.29 of the allowance ci, ≤ 0.36 nightly (bilinear with align-corners)",
        model=interpolation_error, model_name="interpolation(f32 coordinates, weights and sums)",
        calibration=Calibration.GGML_CPU)},
    params={"sf": P("integer factor on dims 0 and 1 (ggml_upscale)", int, optional=True),
            "ne": P("form=interpolate: target shape", tuple, optional=True),
            "mode": P("ggml_scale_mode: nearest (default), bilinear or bicubic", str, optional=True),
            "align_corners": P("GGML_SCALE_FLAG_ALIGN_CORNERS: corner pixels aligned, no half-pixel offset",
                               bool, optional=True),
            "antialias": P("GGML_SCALE_FLAG_ANTIALIAS (bilinear only): triangle filter widened when "
                           "downsampling", bool, optional=True)},
    validate=_check_upscale,
    notes="form=interpolate resizes all four dims to arbitrary sizes; bilinear, bicubic and antialias act on "
          "dims 0 and 1, dims 2 and 3 take the nearest rule. Interpolating modes are drawn without NaN/inf (a "
          "tap of weight 0 on an inf is NaN in some implementations and skipped in others). ggml-cann declines "
          "every mode but plain nearest (supports_op compares the whole mode word with NEAREST)"))

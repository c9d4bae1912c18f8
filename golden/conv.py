"""IM2COL and POOL_2D: sliding windows over the two innermost dims of an image.

Numpy shapes (ggml ne reversed): 2-D data is (N, C, H, W) = ggml ``[W, H, C, N]``. 1-D IM2COL
data is ggml ``[W, C, N]`` (numpy (1, N, C, W)) and is treated as H = KH = OH = 1, with
``ih = −p1`` as ggml's CPU computes it (``ggml_conv_1d`` passes s1 = p1 = d1 = 0).
"""

from __future__ import annotations

import numpy as np

from golden.case import OpCase
from golden.spec import OpList, OpSpec, P, element_regimes, partial_tile, sig
from golden.tolerance import F16_EPS, F32_EPS, Calibration, Tolerance, finite_abs

SPECS = OpList()

FLT_MAX = float(np.finfo(np.float32).max)
POOL_MAX, POOL_AVG = 0, 1


def _taps(n_out: int, n_in: int, k: int, s: int, p: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Input index of every (output, tap) pair, clipped into range, and whether it was in range."""
    idx = np.arange(n_out)[:, None] * s + np.arange(k)[None, :] * d - p
    valid = (idx >= 0) & (idx < n_in)
    return np.clip(idx, 0, max(n_in - 1, 0)), valid


def _windows(x: np.ndarray, oh: int, ow: int, kh: int, kw: int, s: tuple[int, int], p: tuple[int, int],
             d: tuple[int, int], fill: float) -> np.ndarray:
    """(..., OH, OW, KH, KW) taps of x (..., H, W); taps outside the image are ``fill``."""
    iy, vy = _taps(oh, x.shape[-2], kh, s[1], p[1], d[1])
    ix, vx = _taps(ow, x.shape[-1], kw, s[0], p[0], d[0])
    g = x[..., iy[:, None, :, None], ix[None, :, None, :]]
    valid = vy[:, None, :, None] & vx[None, :, None, :]
    return np.where(valid, g, fill)


def conv_output_size(n_in: int, k: int, s: int, p: int, d: int) -> int:
    """``ggml_calc_conv_output_size``: (in + 2p − d(k−1) − 1)/s + 1 in integer arithmetic."""
    return (n_in + 2 * p - d * (k - 1) - 1) // s + 1


def im2col(kernel_ne: tuple[int, ...], b: np.ndarray, s0: int, s1: int, p0: int, p1: int, d0: int, d1: int,
           is_2d: bool = True) -> np.ndarray:
    """``dst[n, oh, ow, c·KH·KW + kh·KW + kw] = b[n, c, oh·s1 + kh·d1 − p1, ow·s0 + kw·d0 − p0]`` (0 outside).

    The kernel contributes only its shape (ggml ne). 2-D result: (N, OH, OW, C·KH·KW); 1-D: (1, N, OW, C·KW).
    """
    b = np.asarray(b, np.float64)
    kw = kernel_ne[0]
    if is_2d:
        kh = kernel_ne[1]
        data = b  # (N, C, H, W)
        oh = conv_output_size(b.shape[2], kh, s1, p1, d1)
    else:
        kh, oh = 1, 1
        data = b[0][:, :, None, :]  # (N, C, 1, W)
    ow = conv_output_size(data.shape[-1], kw, s0, p0, d0)
    g = _windows(data, oh, ow, kh, kw, (s0, s1), (p0, p1), (d0, d1), 0.0)  # (N, C, OH, OW, KH, KW)
    out = np.moveaxis(g, 1, 3).reshape(data.shape[0], oh, ow, -1)
    return out if is_2d else out.reshape(1, data.shape[0], ow, -1)


def pool_output_size(n_in: int, k: int, s: int, p: float) -> int:
    """``ggml_calc_pool_output_size``: (in + 2p − k)/s + 1 in f32 with the float padding, truncated."""
    f = np.float32
    return int((f(n_in) + f(2) * f(p) - f(k)) / f(s) + f(1))


def pool_2d(x: np.ndarray, op: int, k0: int, k1: int, s0: int, s1: int, p0: float = 0.0, p1: float = 0.0
            ) -> np.ndarray:
    """MAX starts from −FLT_MAX (a window entirely in padding gives it); AVG divides by k0·k1 always.

    The output size uses the float padding; the taps use it truncated to int, as ggml stores it.
    """
    x = np.asarray(x, np.float64)
    oh = pool_output_size(x.shape[-2], k1, s1, p1)
    ow = pool_output_size(x.shape[-1], k0, s0, p0)
    pads = (int(p0), int(p1))
    if op == POOL_MAX:
        return _windows(x, oh, ow, k1, k0, (s0, s1), pads, (1, 1), -FLT_MAX).max(axis=(-2, -1), initial=-FLT_MAX)
    with np.errstate(invalid="ignore", over="ignore"):
        return _windows(x, oh, ow, k1, k0, (s0, s1), pads, (1, 1), 0.0).sum(axis=(-2, -1)) / (k0 * k1)


# ggml-cuda's im2col blocks take 256 of a window's IC·KH·KW columns each
IM2COL_TILE = 256


def _im2col_columns(c: OpCase) -> int:
    k = c.inputs[0].ne
    return c.inputs[1].ne[2] * k[1] * k[0] if c.param("is_2d") else c.inputs[1].ne[1] * k[0]


def _im2col_outputs(c: OpCase) -> int:
    p, k, d = c.params_dict, c.inputs[0].ne, c.inputs[1].ne
    ow = conv_output_size(d[0], k[0], p["s0"], p["p0"], p["d0"])
    if not p["is_2d"]:
        return _im2col_columns(c) * ow * d[2]
    return _im2col_columns(c) * ow * conv_output_size(d[1], k[1], p["s1"], p["p1"], p["d1"]) * d[3]


def _pool_outputs(c: OpCase) -> int:
    p, ne = c.params_dict, c.inputs[0].ne
    return (pool_output_size(ne[0], p["k0"], p["s0"], p["p0"]) * pool_output_size(ne[1], p["k1"], p["s1"], p["p1"])
            * ne[2] * ne[3])


def _conv_transpose_outputs(c: OpCase) -> int:
    kernel, data = c.inputs[0].ne, c.inputs[1].ne
    return ((data[0] - 1) * c.param("s0") + kernel[0]) * kernel[1]


def _im2col(xs: list[np.ndarray], c: OpCase) -> np.ndarray:
    p = c.params_dict
    return im2col(c.inputs[0].ne, xs[1], p["s0"], p["s1"], p["p0"], p["p1"], p["d0"], p["d1"], bool(p["is_2d"]))


SPECS.add(OpSpec(
    name="IM2COL", family="conv",
    regimes=(partial_tile("columns", _im2col_columns, IM2COL_TILE), *element_regimes(elements=_im2col_outputs)),
    golden=_im2col,
    signatures=(sig("f32", "f32"), sig("f16", "f32", dst="f16"), sig("f16", "f16"), sig("f16", "f32", dst="f32")),
    tolerance={"*": Tolerance("bit-exact: values are copied (or are padding zeros) into a destination of the data's "
                              "type; ggml CPU ci: exact", calibration=Calibration.GGML_CPU),
               "f16_f32": Tolerance("values are copied; an F32 value going to an F16 destination is rounded once "
                                    "(0.5 ulp); ggml CPU ci: correctly rounded", ulp=0.5,
                                    calibration=Calibration.GGML_CPU)},
    params={"s0": P("stride", int), "s1": P("stride (2-D)", int), "p0": P("zero padding", int),
            "p1": P("zero padding (2-D)", int), "d0": P("dilation", int), "d1": P("dilation (2-D)", int),
            "is_2d": P("2-D (else 1-D, s1 = p1 = d1 = 0)", bool)},
    notes="src0 is the kernel (only its shape matters; an F16 kernel with F32 data may go to an F16 or an F32 "
          "destination, ggml_im2col's dst_type); src1 is the data, in any layout"))


def pool_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """MAX selects a stored value (or −FLT_MAX): exact. AVG sums k0·k1 taps in f32 (≤ (k0·k1 − 1)·u·Σ|x|)
    and divides once: ``(k0·k1 + 1)·(u·avg(|x|) + 2^-150)`` over the window (2^-150: a rounding in
    f32's subnormal range), plus the final rounding to f32. The half ulp is part of this model rather
    than the row's ``ulp`` because ``dtypes.ulp`` is infinite at ±FLT_MAX, which would excuse any
    value where a padding-only MAX window must give −FLT_MAX."""
    if case.param("op") != POOL_AVG:
        return np.zeros_like(golden)
    k0, k1 = case.param("k0"), case.param("k1")
    mag = pool_2d(finite_abs(inputs[0]), POOL_AVG, k0, k1, case.param("s0"), case.param("s1"),
                  case.param("p0"), case.param("p1"))
    with np.errstate(over="ignore"):
        half_ulp = 0.5 * np.spacing(np.minimum(finite_abs(golden), 2.0**127).astype(np.float32)).astype(np.float64)
    return (k0 * k1 + 1) * (F32_EPS * mag + 2.0**-150) + half_ulp


def _pool_2d(xs: list[np.ndarray], c: OpCase) -> np.ndarray:
    p = c.params_dict
    return pool_2d(xs[0], p["op"], p["k0"], p["k1"], p["s0"], p["s1"], p["p0"], p["p1"])


SPECS.add(OpSpec(
    name="POOL_2D", family="conv",
    regimes=element_regimes(elements=_pool_outputs), golden=_pool_2d, signatures=(sig("f32"), sig("f16", dst="f32")),
    tolerance={"f32": Tolerance("MAX selects (exact, −FLT_MAX included); AVG adds the k0·k1 taps in f32 in any "
                                "order (γ_{k0k1−1}·Σ|x|), then divides by k0·k1 or multiplies by its rounded "
                                "reciprocal (2u): (k0·k1 + 1)·u·avg|x| (+2^-150 per subnormal rounding) and the "
                                "final rounding; ggml CPU nightly: ≤ 2.7e3 ulp at cancelling sums, ≤ 0.43 of the "
                                "allowance", model=pool_model, calibration=Calibration.GGML_CPU)},
    params={"op": P("0 MAX, 1 AVG", int), "k0": P("kernel", int), "k1": P("kernel", int),
            "s0": P("stride", int), "s1": P("stride", int),
            "p0": P("padding (float: the size uses it, the taps use int(p))"), "p1": P("padding (float)")},
    specials=(np.inf, -np.inf, 0.0, -0.0),
    notes="AVG divides by k0·k1 always (padding counts as zeros); a MAX window entirely in padding is "
          "−FLT_MAX. NaN is not drawn (C's MAX keeps or drops it by order)"))


# ---- CONV_TRANSPOSE_1D ------------------------------------------------------------------------------
# kernel a: ggml [K, C_out, C_in, 1] (numpy (1, C_in, C_out, K)); data b: ggml [L, C_in, 1, 1]
# (numpy (1, 1, C_in, L)); dst: ggml [(L − 1)·s0 + K, C_out, 1, 1]. ggml 0.20.2 asserts p0 = 0 and d0 = 1.


def conv_transpose_output_size(n_in: int, k: int, s: int) -> int:
    """``ggml_calc_conv_transpose_1d_output_size`` with p = 0, d = 1: (L − 1)·s + K."""
    return (n_in - 1) * s + k


def conv_transpose_1d(a: np.ndarray, b: np.ndarray, s0: int) -> np.ndarray:
    """``dst[co, l·s0 + k] += Σ_ci a[ci, co, k]·b[ci, l]`` over every (l, k): each input position
    scatters its channel mix through the K taps; positions reached by no tap stay 0 (s0 > K).

    Only the real products are formed (a padded matrix product would turn an inf into NaN where it
    meets a structural zero, which ggml never computes), one tap at a time: the (C_out, K, L) array
    of every channel mix at once is 8 GiB at C_out = 64, K = L = 4096, an output of 4 MiB."""
    kernel = np.asarray(a, np.float64)[0]  # (C_in, C_out, K)
    data = np.asarray(b, np.float64)[0, 0]  # (C_in, L)
    c_out, k = kernel.shape[1], kernel.shape[2]
    n_in = data.shape[1]
    out = np.zeros((c_out, conv_transpose_output_size(n_in, k, s0)))
    with np.errstate(invalid="ignore", over="ignore"):
        for tap in range(k):  # products (C_out, L) of this tap, summed over C_in
            out[:, tap:tap + (n_in - 1) * s0 + 1:s0] += kernel[:, :, tap].T @ data
    return out.reshape(1, 1, c_out, -1)


def conv_transpose_taps(n_in: int, k: int, s0: int) -> np.ndarray:
    """How many (l, k) pairs reach each output position (1 to ⌈K/s0⌉; 0 in the gaps when s0 > K)."""
    taps = np.zeros(conv_transpose_output_size(n_in, k, s0))
    for tap in range(k):  # not a (K, L) array of ones: that is as big as every product at once
        taps[tap:tap + (n_in - 1) * s0 + 1:s0] += 1
    return taps


def conv_transpose_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """Each output is a sum of N = C_in·taps(p) products (taps(p) ≤ ⌈K/s0⌉), accumulated in f32 in any
    order: ``N·u·Σ|a||b|`` (γ_N) plus 2^-150 per rounding (gradual underflow). With F16 weights the
    device may round the data to F16 first, as ggml's CPU does (its wdata is F16): ``2^-11·Σ|a||b|``,
    and ``2^-25·Σ|a|`` where data is below F16's normal range."""
    a, b = inputs[0], inputs[1]
    s0 = case.param("s0")
    abs_a, abs_b = finite_abs(a), finite_abs(b)
    with np.errstate(invalid="ignore", over="ignore"):
        scale = conv_transpose_1d(abs_a, abs_b, s0)
        n_terms = a.shape[1] * conv_transpose_taps(b.shape[-1], a.shape[-1], s0)
        allowed = n_terms * F32_EPS * scale + (n_terms + 1) * 2.0**-150
        if case.inputs[0].dtype == "f16":
            allowed = allowed + F16_EPS * scale + 2.0**-25 * conv_transpose_1d(abs_a, np.ones_like(abs_b), s0)
    return allowed


def _validate_conv_transpose(case: OpCase, inputs: list[np.ndarray]) -> None:
    a, b = case.inputs[0].ne, case.inputs[1].ne
    if a[3] != 1 or b[2] != 1 or b[3] != 1:
        raise ValueError(f"CONV_TRANSPOSE_1D: the kernel is 3-d ([K, C_out, C_in]) and the data a matrix "
                         f"([L, C_in]); got {list(a)} and {list(b)}")
    if a[2] != b[1]:
        raise ValueError(f"CONV_TRANSPOSE_1D: kernel C_in = ne2 = {a[2]} must equal the data's ne1 = {b[1]}")
    if case.param("s0") < 1:
        raise ValueError(f"CONV_TRANSPOSE_1D: stride s0 = {case.param('s0')} must be at least 1")


SPECS.add(OpSpec(
    name="CONV_TRANSPOSE_1D", family="conv",
    regimes=(*element_regimes(elements=_conv_transpose_outputs),),
    golden=lambda xs, c: conv_transpose_1d(xs[0], xs[1], c.param("s0")),
    signatures=(sig("f32", "f32"), sig("f16", "f32", dst="f32")),
    tolerance={"f32": Tolerance(
        "each output sums C_in·taps products (taps ≤ ⌈K/s0⌉) in f32 in any order: γ_N·Σ|a||b|; F16 weights: the "
        "data may be rounded to F16 first (ggml CPU does), + 2^-11·Σ|a||b|; ggml CPU nightly: F32 ≤ 0.59 of the "
        "allowance, F16 weights ≤ 0.99 (the data's F16 rounding dominates at one or two terms; ≤ 0.88 beyond 8)",
        ulp=0.5, model=conv_transpose_model, model_name="conv_transpose(N·2^-24 [+2^-11 F16 weights])·Σ|a||b|",
        calibration=Calibration.GGML_CPU)},
    params={"s0": P("stride (output positions between consecutive inputs); ggml asserts p0 = 0, d0 = 1", int)},
    validate=_validate_conv_transpose, specials=(np.nan, 0.0, -0.0),
    notes="src0 is the kernel [K, C_out, C_in] (any layout), src1 the data [L, C_in] (a matrix, any layout); dst "
          "[(L − 1)·s0 + K, C_out] in F32. ggml 0.20.2 takes p0 and d0 but asserts p0 = 0 and d0 = 1. ±inf is not "
          "drawn: with F16 weights the data may be rounded to F16, and inf times an F32 subnormal that became 0 "
          "is NaN"))

"""IM2COL and POOL_2D: sliding windows over the two innermost dims of an image.

Numpy shapes (ggml ne reversed): 2-D data is (N, C, H, W) = ggml ``[W, H, C, N]``. 1-D IM2COL
data is ggml ``[W, C, N]`` (numpy (1, N, C, W)) and is treated as H = KH = OH = 1, with
``ih = −p1`` as ggml's CPU computes it (``ggml_conv_1d`` passes s1 = p1 = d1 = 0).
"""

from __future__ import annotations

import numpy as np

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

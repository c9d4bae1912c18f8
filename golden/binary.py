"""ADD, MUL, DIV: elementwise with ggml's cyclic-tiling broadcast of src1 over src0.

``dst[i] = a[i] OP b[i mod b.shape]`` in every dim (``np.tile`` semantics, dim 0 included).
Computed exactly in float64 on the values as stored; the caller rounds once to dst's dtype.
"""

from __future__ import annotations

import numpy as np

from golden.geometry import tile_to


def _binary(a: np.ndarray, b: np.ndarray, fn) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return fn(np.asarray(a, np.float64), tile_to(np.asarray(b, np.float64), a.shape))


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _binary(a, b, np.add)


def mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _binary(a, b, np.multiply)


def div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IEEE division: x/0 is ±inf, 0/0 is NaN, as the CPU backend gives."""
    return _binary(a, b, np.divide)

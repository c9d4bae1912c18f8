"""ADD, MUL, DIV: elementwise with ggml's cyclic-tiling broadcast of src1 over src0.

``dst[i] = a[i] OP b[i mod b.shape]`` in every dim (``np.tile`` semantics, dim 0 included).
Computed exactly in float64 on the values as stored; the caller rounds once to dst's dtype.
Each golden function is followed by its catalogue entry.
"""

from __future__ import annotations

import numpy as np

from golden.geometry import tile_to
from golden.spec import ELEMENTWISE_TOL, OpList, OpSpec, sig, two

SPECS = OpList()
BINARY_SIGS = (
    sig("f32", "f32"),
    sig("f16", "f16"),
    sig("f16", "f32", dst="f16"),
    sig("bf16", "bf16"),
    sig("bf16", "f32", dst="bf16"),
)
_BROADCAST = "src1 broadcasts by cyclic tiling (ggml_can_repeat); either input may have any layout"


def _binary_spec(name: str, fn) -> OpSpec:
    return SPECS.add(OpSpec(name=name, family="binary", golden=two(fn), signatures=BINARY_SIGS,
                            tolerance=ELEMENTWISE_TOL, notes=_BROADCAST))


def _binary(a: np.ndarray, b: np.ndarray, fn) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return fn(np.asarray(a, np.float64), tile_to(np.asarray(b, np.float64), a.shape))


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _binary(a, b, np.add)


_binary_spec("ADD", add)


def mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _binary(a, b, np.multiply)


_binary_spec("MUL", mul)


def div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IEEE division: x/0 is ±inf, 0/0 is NaN, as the CPU backend gives."""
    return _binary(a, b, np.divide)


_binary_spec("DIV", div)

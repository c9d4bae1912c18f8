"""ADD, MUL, DIV, SUB (and ADD1, a scalar b): elementwise with ggml's cyclic-tiling broadcast of src1 over src0.

``dst[i] = a[i] OP b[i mod b.shape]`` in every dim (``np.tile`` semantics, dim 0 included).
Computed exactly in float64 on the values as stored; the caller rounds once to dst's dtype.
Each golden function is followed by its catalogue entry.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from golden.geometry import tile_to
from golden.spec import ELEMENTWISE_TOL, OVERLAPPING_SOURCES, InputLayouts, OpList, OpSpec, sig, two

SPECS = OpList()
BINARY_SIGS = (
    sig("f32", "f32"),
    sig("f16", "f16"),
    sig("f16", "f32", dst="f16"),
    sig("bf16", "bf16"),
    sig("bf16", "f32", dst="bf16"),
)
_BROADCAST = "src1 broadcasts by cyclic tiling (ggml_can_repeat); either input may have any layout"


def _binary_spec(name: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> OpSpec:
    return SPECS.add(OpSpec(name=name, family="binary", golden=two(fn), signatures=BINARY_SIGS,
                            tolerance=ELEMENTWISE_TOL, notes=_BROADCAST, regimes=(OVERLAPPING_SOURCES,)))


def _binary(a: np.ndarray, b: np.ndarray, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
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


def sub(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _binary(a, b, np.subtract)


_binary_spec("SUB", sub)


def add1(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a + b`` where b holds one element (ggml_add1: b is a scalar tensor added to every element)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.asarray(a, np.float64) + float(np.asarray(b, np.float64).reshape(-1)[0])


SPECS.add(OpSpec(
    name="ADD1", family="binary", golden=two(add1), signatures=BINARY_SIGS, tolerance=ELEMENTWISE_TOL,
    input_layouts=InputLayouts.PADDED_ROWS,
    notes="b is one element (ggml_add1 asserts ggml_is_scalar(b)) and a is padded 1-d (ggml_is_padded_1d: "
          "rows at a uniform stride, planes packed). ggml's CPU reads b as f32 unless a and b are both "
          "F16/BF16, so f32 a with an F16 b is no signature"))

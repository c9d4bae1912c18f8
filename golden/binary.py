"""ADD, MUL, DIV, SUB (and ADD1, a scalar b): elementwise with ggml's cyclic-tiling broadcast of src1 over src0.

``dst[i] = a[i] OP b[i mod b.shape]`` in every dim (``np.tile`` semantics, dim 0 included).
Computed exactly in float64 on the values as stored; the caller rounds once to dst's dtype.
Each golden function is followed by its catalogue entry.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from golden.case import OpCase
from golden.geometry import tile_to
from golden.spec import ELEMENTWISE_TOL, OVERLAPPING_SOURCES, InputLayouts, OpList, OpSpec, element_regimes, sig, two
from golden.tolerance import Tolerance

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
                            tolerance=ELEMENTWISE_TOL, notes=_BROADCAST,
                            regimes=(OVERLAPPING_SOURCES, *element_regimes())))


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
    input_layouts=InputLayouts.PADDED_ROWS, regimes=(*element_regimes(),),
    notes="b is one element (ggml_add1 asserts ggml_is_scalar(b)) and a is padded 1-d (ggml_is_padded_1d: "
          "rows at a uniform stride, planes packed). ggml's CPU reads b as f32 unless a and b are both "
          "F16/BF16, so f32 a with an F16 b is no signature"))


# ---- ADD_ID: a per-expert bias selected by the router's ids (ggml_add_id) ---------------------------
# Numpy shapes: ``a`` (A3, T, U, N) (ggml [N, n_expert_used, n_tokens, A3], MUL_MAT_ID's output),
# ``b`` (1, 1, E, N) (ggml [N, n_expert]: one bias row per expert), ``ids`` I32 (1, 1, T, U).
# ``dst[x, t, u] = a[x, t, u] + b[ids[t, u]]`` (ggml-cpu's add_id reads the id at (i1, i2) for every i3).


def add_id(a: np.ndarray, b: np.ndarray, ids: np.ndarray) -> np.ndarray:
    a64 = np.asarray(a, np.float64)
    chosen = np.asarray(ids).reshape(a64.shape[1], a64.shape[2])  # (T, U)
    bias = np.asarray(b, np.float64).reshape(-1, a64.shape[3])[chosen]  # (T, U, N)
    with np.errstate(invalid="ignore", over="ignore"):
        return a64 + bias[None]


def check_add_id(case: OpCase, inputs: list[np.ndarray]) -> None:
    """ggml_add_id's asserts, and ids inside [0, n_expert) (the kernels index with them unchecked)."""
    a, b, ids = (t.ne for t in case.inputs[:3])
    if case.inputs[2].dtype != "i32" or b[2:] != (1, 1) or ids[2:] != (1, 1):
        raise ValueError("ADD_ID: a [N, n_expert_used, n_tokens, *], b [N, n_expert, 1, 1] and I32 ids "
                         "[n_expert_used, n_tokens, 1, 1]")
    if a[0] != b[0] or a[1] != ids[0] or a[2] != ids[1]:
        raise ValueError(f"ADD_ID: need a ne0 = b ne0 ({a[0]} vs {b[0]}), a ne1 = ids ne0 ({a[1]} vs {ids[0]}) "
                         f"and a ne2 = ids ne1 ({a[2]} vs {ids[1]})")
    if len(inputs) < 3:  # shapes only (a case id checked before its data exists)
        return
    chosen = np.asarray(inputs[2])
    if chosen.size and (chosen.min() < 0 or chosen.max() >= b[1]):
        raise ValueError(f"ADD_ID: expert ids must be in [0, {b[1]}), got {chosen.min()}..{chosen.max()}")


SPECS.add(OpSpec(
    name="ADD_ID", family="binary", golden=lambda xs, c: add_id(xs[0], xs[1], xs[2]),
    signatures=(sig("f32", "f32", "i32", dst="f32"),),
    tolerance={"f32": Tolerance("one f32 addition of two stored values: one rounding of the exact sum", ulp=0.5)},
    validate=check_add_id, input_layouts=InputLayouts.ROWS, structured_inputs=True, regimes=(*element_regimes(),),
    notes="dst ne = a's. ggml's CPU asserts unit-stride rows of a and b (nb00 = nb10 = 4), so both keep dim 0 "
          "innermost; ids take any layout. ids are routing tables as MUL_MAT_ID's (top-k, repeats, a hot "
          "expert). Only F32 a and b: ggml's CPU, Vulkan and CUDA kernels take no other type"))

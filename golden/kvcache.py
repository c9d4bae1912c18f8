"""SET_ROWS (``ggml_set_rows``): rows of a source written into a destination (a KV cache) at indices.

ggml order: destination ``a [ne0, ne1, ne2, ne3]`` (F32, F16, BF16, Q4_0, Q8_0...), source
``b [ne0, n_rows, ne2, ne3]`` (F32 or F16), indices ``c [n_rows, ne11, ne12, 1]`` (I64 or I32) with
``ne2 % ne11 == 0`` and ``ne3 % ne12 == 0``: source row ``i`` of plane ``(i2, i3)`` goes to
destination row ``c[i, i2 % ne11, i3 % ne12]`` of the same plane, converted to the destination type
(round to nearest even for F16/BF16, ggml's quantizer for Q types). Every other row of ``a`` keeps
its value: the result is a view of ``a`` (the op writes ``a`` in place).

Repeated indices: ggml.h calls overlapping destination rows undefined. ggml's CPU (one thread)
writes the rows of a plane in increasing ``i``, so the last duplicate wins; with several threads the
rows are split between threads and either may land last. The golden takes the last duplicate; the
verdict (conformance/cases/kvcache.py) accepts, element by element, the value of any duplicate.
"""

from __future__ import annotations

import numpy as np

from golden import dtypes
from golden.case import OpCase
from golden.spec import InputLayouts, OpList, OpSpec, Regime, element_regimes, sig
from golden.tolerance import Tolerance

SPECS = OpList()

# CUDA and Vulkan launch SET_ROWS with the source rows along a grid dimension of at most 65,535 blocks
MANY_SOURCE_ROWS = Regime("rows>65535", lambda c: c.inputs[1].ne[1] > 65535,
                          "more source rows than a grid dimension has blocks (65,535)")


def index_planes(idx: np.ndarray, ne2: int, ne3: int) -> np.ndarray:
    """The indices ``(ne12, ne11, n_rows)`` broadcast to every plane: ``(ne3, ne2, n_rows)`` int64."""
    c = np.asarray(idx, dtype=np.int64)[0]  # numpy (1, ne12, ne11, n_rows) -> (ne12, ne11, n_rows)
    return c[np.arange(ne3) % c.shape[0]][:, np.arange(ne2) % c.shape[1]]


def set_rows(a: np.ndarray, b: np.ndarray, idx: np.ndarray, dst_dtype: str) -> np.ndarray:
    """``a`` with row ``idx[i]`` of each plane replaced by source row ``i`` (the last duplicate wins),
    converted to ``dst_dtype``. Quantized destinations get the exact source values: quantizing is
    the verdict's business (one quant step, conformance/cases/kvcache.py)."""
    out = np.array(a, dtype=np.float64, copy=True)
    src = np.asarray(b, dtype=np.float64)
    if not dtypes.is_quantized(dst_dtype):
        src = dtypes.round_to(src, dst_dtype)
    ne3, ne2 = out.shape[0], out.shape[1]
    rows = index_planes(idx, ne2, ne3)
    for i3 in range(ne3):
        for i2 in range(ne2):
            plane = rows[i3, i2]
            # the last source row naming each destination row: a later duplicate overwrites an earlier one
            last = plane.size - 1 - np.unique(plane[::-1], return_index=True)[1]
            out[i3, i2, plane[last]] = src[i3, i2, last]
    return out


def writers(idx: np.ndarray, ne2: int, ne3: int) -> dict[tuple[int, int, int], list[int]]:
    """For each destination row ``(i3, i2, i1)`` written more than once, the source rows that write it."""
    rows = index_planes(idx, ne2, ne3)
    found: dict[tuple[int, int, int], list[int]] = {}
    for i3 in range(ne3):
        for i2 in range(ne2):
            plane = rows[i3, i2]
            order = np.argsort(plane, kind="stable")  # each row's writers together, in source order
            values, starts, counts = np.unique(plane[order], return_index=True, return_counts=True)
            for r, start, count in zip(values[counts > 1], starts[counts > 1], counts[counts > 1], strict=True):
                found[(i3, i2, int(r))] = [int(i) for i in order[start:start + count]]
    return found


def _fail(case: OpCase, rule: str) -> None:
    raise ValueError(f"{case.op}: {rule} (case {case.case_id})")


def check_set_rows(case: OpCase, inputs: list[np.ndarray]) -> None:
    """What ggml_set_rows asserts, and the CPU's index range check (an index outside [0, ne1) aborts)."""
    if len(case.inputs) != 3:
        _fail(case, f"takes 3 inputs (destination, source, indices), got {len(case.inputs)}")
    a, b, c = case.inputs
    if case.dst != a.dtype:
        _fail(case, f"dst is a view of the destination: dst={case.dst} must be {a.dtype}")
    if b.dtype not in ("f32", "f16") or c.dtype not in dtypes.INDEX_TYPES:
        _fail(case, f"source must be f32/f16 and indices i64/i32, got {b.dtype} and {c.dtype}")
    if a.ne[0] != b.ne[0] or a.ne[2:] != b.ne[2:] or b.ne[1] != c.ne[0] or c.ne[3] != 1 \
            or b.ne[2] % c.ne[1] or b.ne[3] % c.ne[2]:
        _fail(case, f"shapes a={list(a.ne)} b={list(b.ne)} c={list(c.ne)} do not fit "
                    "(a.ne0 = b.ne0, planes equal, c = [b.ne1, divisor of ne2, divisor of ne3, 1])")
    if inputs:
        idx = np.asarray(inputs[2])
        bad = (idx < 0) | (idx >= a.ne[1])
        if bad.any():
            _fail(case, f"row index {int(idx[bad].flat[0])} is outside [0, {a.ne[1]}) (ggml would abort)")


_ROW_TYPES = ("f32", "f16", "bf16")
SPECS.add(OpSpec(
    name="SET_ROWS", family="kvcache",
    regimes=(*element_regimes(1), MANY_SOURCE_ROWS),
    golden=lambda xs, c: set_rows(xs[0], xs[1], xs[2], c.dst),
    signatures=tuple(sig(d, s, i) for d, s, i in (
        ("f32", "f32", "i64"), ("f16", "f32", "i64"), ("bf16", "f32", "i64"),
        ("f32", "f32", "i32"), ("f16", "f32", "i32"), ("bf16", "f32", "i32"),
        ("f16", "f16", "i64"), ("f32", "f16", "i64"), ("bf16", "f16", "i32"),
        ("bf16", "f16", "i64"), ("f16", "f16", "i32"))),  # every pair ggml-cann claims, with either index type
    quantized_signatures=tuple(sig(d, s, i) for d, s, i in (
        ("q4_0", "f32", "i64"), ("q8_0", "f32", "i64"), ("q4_0", "f16", "i32"), ("q8_0", "f16", "i32")))
    # the other KV-cache types, F32 rows with I64 indices (what llama.cpp writes) and F16 rows with I32
    + tuple(sig(d, s, i) for d in dtypes.DRAWN_COPY_TYPES if d not in dtypes.DRAWN_QUANT_TYPES
            for s, i in (("f32", "i64"), ("f16", "i32"))),
    tolerance={
        **{t: Tolerance("bit-exact: rows moved and converted to the destination type with round-to-nearest-even "
                        "(the golden applies the conversion); duplicates may take any writer's value")
           for t in _ROW_TYPES},
        **{t: Tolerance("written rows within one quant step of the exact source (the block's amax/127 for Q8_0, "
                        "|max|/8 for Q4_0, + the F16 scale); other rows byte-exact")
           for t in dtypes.DRAWN_QUANT_TYPES},
        **{t: Tolerance("written rows: each block passes the exact-block verdict of a quantizing CPY "
                        "(conformance/verdict/quant.py) against one writer's source row; other rows byte-exact")
           for t in dtypes.DRAWN_COPY_TYPES if t not in dtypes.DRAWN_QUANT_TYPES},
    },
    validate=check_set_rows, input_layouts=InputLayouts.ROWS, inplace_inputs=(0,), structured_inputs=True,
    own_verdict=True,
    notes="Inputs are (destination, source, indices); dst is the destination, written in place (a view of it). "
          "ggml_set_rows asserts rows contiguous in a and b (ggml_is_contiguous_rows); the indices may have any "
          "layout. Repeated indices are undefined in ggml: the golden takes the last writer (ggml's CPU with one "
          "thread), the verdict accepts any writer's value per element. ggml-cann claims F32/F16/BF16 "
          "destinations; the quantized ones are judged where claimed (ggml:CPU)."))

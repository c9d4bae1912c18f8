"""Construction ops: FILL, TRI, DIAG, SET, PAD_REFLECT_1D.

Each builds its result from the input's values (or only its shape) without arithmetic: a constant
(FILL), a masked copy (TRI), a vector spread onto a diagonal (DIAG), an assignment into a view
(SET), a row reflected at both ends (PAD_REFLECT_1D). Arrays are in numpy order (reversed ggml
``ne``): the last axis is ggml's dim 0, the column index ``i0``; the one before is dim 1, the row
index ``i1``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from golden import dtypes
from golden.case import OpCase
from golden.spec import InputLayouts, OpList, OpSpec, P, element_regimes, sig
from golden.tolerance import ROUNDED, Calibration, Tolerance

SPECS = OpList()


def _diag_outputs(c: OpCase) -> int:
    """DIAG writes an n × n matrix per row of its input."""
    ne = c.inputs[0].ne
    return ne[0] * ne[0] * ne[2] * ne[3]


def _reflect_outputs(c: OpCase) -> int:
    ne = c.inputs[0].ne
    return (ne[0] + c.param("p0") + c.param("p1")) * ne[1] * ne[2] * ne[3]

MOVED = Tolerance("bit-exact: the op only places stored values or zeros (no arithmetic)")


def _fail(case: OpCase, rule: str) -> None:
    raise ValueError(f"{case.op}: {rule} (case {case.case_id})")


def _inputs(case: OpCase, n: int) -> None:
    if len(case.inputs) != n:
        _fail(case, f"takes {n} input(s), got {len(case.inputs)}")


def _forms(case: OpCase, *forms: str) -> None:
    if case.form not in forms:
        _fail(case, f"form={case.form!r} is not one of {', '.join(repr(f) for f in forms)}")


# ---- FILL -----------------------------------------------------------------------------------------
def fill(x: np.ndarray, c: float) -> np.ndarray:
    """FILL: every element is ``c`` (the f32 op parameter); only ``x``'s shape is used."""
    return np.full(np.shape(x), float(np.float32(c)))


def _check_fill(case: OpCase, inputs: list[np.ndarray]) -> None:
    _inputs(case, 1)
    _forms(case, "", "inplace")
    if not case.inputs[0].layout.is_contiguous:
        _fail(case, "ggml_fill asserts a contiguous input")


SPECS.add(OpSpec(
    name="FILL", family="construction",
    regimes=(*element_regimes(),), golden=lambda xs, c: fill(xs[0], c.param("c")),
    signatures=(sig("f32"), sig("f16")),
    tolerance={"f32": Tolerance("bit-exact: c is an f32 op parameter stored unchanged; ggml CPU ci: exact",
                                calibration=Calibration.GGML_CPU),
               "f16": Tolerance(ROUNDED.reason + ": c (f32) stored once as F16, overflowing to ±inf beyond "
                                "65504; ggml CPU: correctly rounded (1.0 of the allowance only at exact ties)",
                                ulp=0.5, calibration=Calibration.GGML_CPU)},
    params={"c": P("the constant (an f32 op parameter; may be ±0, ±inf or NaN)")},
    input_layouts=InputLayouts.CONTIGUOUS, validate=_check_fill,
    notes="ggml_fill asserts F32/F16 and a contiguous input, whose values are never read; form=inplace "
          "builds ggml_fill_inplace on a ggml_dup of the input, so the in-place kernel runs while the input "
          "stays checkable. ggml-cann claims F32 only (F16 is declined there)"))


# ---- TRI ------------------------------------------------------------------------------------------
# enum ggml_tri_type (ggml.h 0.20.2) and the part each keeps: column i0 against row i1
TRI_TYPES = {"upper_diag": 0, "upper": 1, "lower_diag": 2, "lower": 3}


def tri_mask(n_rows: int, n_cols: int, tri_type: str) -> np.ndarray:
    """True where TRI keeps the element: LOWER keeps i0 < i1 (strictly below the diagonal),
    LOWER_DIAG i0 ≤ i1, UPPER i0 > i1, UPPER_DIAG i0 ≥ i1; numpy (row, column) = (i1, i0)."""
    row = np.arange(n_rows)[:, None]
    col = np.arange(n_cols)[None, :]
    return {"lower": col < row, "lower_diag": col <= row, "upper": col > row, "upper_diag": col >= row}[tri_type]


def tri(x: np.ndarray, tri_type: str) -> np.ndarray:
    """TRI: the kept triangle copied, every other element +0 (not x·0: NaN and inf there become 0)."""
    x = np.asarray(x, dtype=np.float64)
    return np.where(tri_mask(x.shape[-2], x.shape[-1], tri_type), x, 0.0)


def _check_tri(case: OpCase, inputs: list[np.ndarray]) -> None:
    _inputs(case, 1)
    ne = case.inputs[0].ne
    if case.param("tri_type") not in TRI_TYPES:
        _fail(case, f"tri_type={case.param('tri_type')!r} is not one of {', '.join(TRI_TYPES)}")
    if ne[0] != ne[1]:
        _fail(case, f"ne={list(ne)}: ggml_tri asserts square matrices (ne0 == ne1)")
    if not case.inputs[0].layout.is_contiguous:
        _fail(case, "ggml_tri asserts a contiguous input")


SPECS.add(OpSpec(
    name="TRI", family="construction",
    regimes=(*element_regimes(),), golden=lambda xs, c: tri(xs[0], c.param("tri_type")),
    signatures=(sig("f32"),),
    tolerance={"f32": Tolerance(MOVED.reason + "; ggml CPU ci: exact", calibration=Calibration.GGML_CPU)},
    params={"tri_type": P("enum ggml_tri_type: upper_diag, upper, lower_diag or lower", str)},
    input_layouts=InputLayouts.CONTIGUOUS, validate=_check_tri,
    notes="ggml_tri asserts F32, a contiguous input and ne0 == ne1; batched over dims 2 and 3. The "
          "diagonal is i0 == i1; *_diag types keep it. Elements outside the triangle are written as 0 "
          "whatever they held (NaN included)"))


# ---- DIAG -----------------------------------------------------------------------------------------
def diag(x: np.ndarray) -> np.ndarray:
    """DIAG: ``x`` of ggml shape [n, 1, ne2, ne3] to [n, n, ne2, ne3] with ``out[i1][i0] = x[i0]``
    where i0 == i1 and 0 elsewhere (NaN off the diagonal does not spread)."""
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[-1]
    out = np.zeros(x.shape[:2] + (n, n))
    out[..., np.arange(n), np.arange(n)] = x[..., 0, :]
    return out


def _check_diag(case: OpCase, inputs: list[np.ndarray]) -> None:
    _inputs(case, 1)
    if case.inputs[0].ne[1] != 1:
        _fail(case, f"ne={list(case.inputs[0].ne)}: ggml_diag asserts ne1 == 1 (one vector per plane)")


SPECS.add(OpSpec(
    name="DIAG", family="construction",
    regimes=(*element_regimes(elements=_diag_outputs),), golden=lambda xs, c: diag(xs[0]), signatures=(sig("f32"),),
    tolerance={"f32": Tolerance(MOVED.reason + "; ggml CPU ci: exact", calibration=Calibration.GGML_CPU)},
    validate=_check_diag,
    notes="ggml_diag asserts ne1 == 1 and nothing about the layout; the result is [ne0, ne0, ne2, ne3]. "
          "The CPU kernel implements F32 only (and ggml-cann claims F32 only)"))


# ---- SET ------------------------------------------------------------------------------------------
def set_view(a: np.ndarray, b: np.ndarray, nb: Sequence[int], offset: int) -> np.ndarray:
    """SET: a contiguous copy of ``a`` whose view of ``b``'s shape, at element strides ``nb[1:]``
    (dim 0 stride one element) from element ``offset``, is overwritten with ``b``."""
    out = np.array(a, copy=True)
    flat = out.reshape(-1)
    ne = tuple(reversed(np.shape(b)))
    idx = (offset + np.arange(ne[0])[None, None, None, :] + nb[1] * np.arange(ne[1])[None, None, :, None]
           + nb[2] * np.arange(ne[2])[None, :, None, None] + nb[3] * np.arange(ne[3])[:, None, None, None])
    flat[idx] = b
    return out


def _set(xs: list[np.ndarray], c: OpCase) -> np.ndarray:
    es = dtypes.type_size(c.inputs[0].dtype)
    nb = [n // es for n in (es, c.param("nb1"), c.param("nb2"), c.param("nb3"))]
    return set_view(xs[0], xs[1], nb, c.param("offset") // es)


def _check_set(case: OpCase, inputs: list[np.ndarray]) -> None:
    """Element-aligned, non-overlapping byte strides; the view inside a; b no bigger than a."""
    _inputs(case, 2)
    _forms(case, "", "inplace")
    a, b = case.inputs
    if a.dtype != b.dtype:
        _fail(case, f"a and b must have the same type, got {a.dtype} and {b.dtype}")
    es = dtypes.type_size(a.dtype)
    nb = (es, *(int(case.param(k)) for k in ("nb1", "nb2", "nb3")))
    offset = int(case.param("offset"))
    if b.nelements > a.nelements:
        _fail(case, f"b has {b.nelements} elements, a only {a.nelements} (ggml_set asserts it)")
    if any(n % es for n in nb) or offset % es or offset < 0 or offset >= 1 << 30:
        _fail(case, f"nb={list(nb)} and offset={offset} must be non-negative multiples of {es} bytes, offset < 2^30")
    if any(nb[d + 1] < b.ne[d] * nb[d] for d in range(3)):
        _fail(case, f"nb={list(nb)} makes the view of ne={list(b.ne)} overlap itself (the result would "
                    "depend on the write order)")
    last = offset + sum((b.ne[d] - 1) * nb[d] for d in range(4)) + es
    if last > a.nelements * es:
        _fail(case, f"the view ends at byte {last}, past a's {a.nelements * es} bytes")


SPECS.add(OpSpec(
    name="SET", family="construction",
    regimes=(*element_regimes(1),), golden=_set, signatures=(sig("f32", "f32"), sig("i32", "i32")),
    tolerance={"*": Tolerance(MOVED.reason + ": a copied, b assigned into the view; ggml CPU ci: exact",
                              calibration=Calibration.GGML_CPU)},
    params={"nb1": P("view row stride in bytes", int), "nb2": P("view plane stride in bytes", int),
            "nb3": P("view batch stride in bytes", int), "offset": P("view byte offset into the result", int)},
    validate=_check_set,
    notes="ggml_set(a, b, nb1, nb2, nb3, offset): the result is a copy of a (contiguous, a's shape) with b "
          "written into its view. ggml asserts nothing about a's layout; the view's byte strides are those "
          "of the contiguous result. form=inplace builds ggml_set_inplace on a ggml_dup of a, so the in-place "
          "kernel runs while a stays checkable; b may have any layout. The CPU implements F32 and I32 "
          "(F16/BF16 abort there, so they are not listed; ggml-cann claims every type)"))


# ---- PAD_REFLECT_1D -------------------------------------------------------------------------------
def pad_reflect_1d(x: np.ndarray, p0: int, p1: int) -> np.ndarray:
    """PAD_REFLECT_1D: each row reflected about its first and last element, the edge not repeated:
    ``[a, b, c, d]`` with p0 = p1 = 2 is ``[c, b, a, b, c, d, c, b]``."""
    widths = [(0, 0)] * (np.ndim(x) - 1) + [(p0, p1)]
    return np.pad(np.asarray(x, dtype=np.float64), widths, mode="reflect")


def _check_pad_reflect(case: OpCase, inputs: list[np.ndarray]) -> None:
    _inputs(case, 1)
    ne0, p0, p1 = case.inputs[0].ne[0], int(case.param("p0")), int(case.param("p1"))
    if not (0 <= p0 < ne0 and 0 <= p1 < ne0):
        _fail(case, f"p0={p0}, p1={p1} must be in [0, ne0 − 1 = {ne0 - 1}] (ggml asserts it: a reflection "
                    "that does not repeat the edge has ne0 − 1 elements to mirror)")
    if not case.inputs[0].layout.is_contiguous:
        _fail(case, "ggml_pad_reflect_1d asserts a contiguous input")


SPECS.add(OpSpec(
    name="PAD_REFLECT_1D", family="construction",
    regimes=(*element_regimes(elements=_reflect_outputs),),
    golden=lambda xs, c: pad_reflect_1d(xs[0], c.param("p0"), c.param("p1")), signatures=(sig("f32"),),
    tolerance={"f32": Tolerance(MOVED.reason + "; ggml CPU ci: exact", calibration=Calibration.GGML_CPU)},
    params={"p0": P("elements reflected before each row (≤ ne0 − 1)", int),
            "p1": P("elements reflected after each row (≤ ne0 − 1)", int)},
    input_layouts=InputLayouts.CONTIGUOUS, validate=_check_pad_reflect,
    notes="dim 0 only, ne0 + p0 + p1 wide; ggml asserts F32, a contiguous input and p0, p1 < ne0"))

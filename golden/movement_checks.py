"""Parameter contracts of the movement, resample and sequence ops.

ggml aborts (GGML_ASSERT) on parameters these ops cannot take; the harness checks them first so a
bad case is a clear ``ValueError`` naming the op, the value and the rule, not a dead device
process. Each check takes the case and its input values (GET_ROWS indices are data).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from golden import dtypes
from golden.case import OpCase
from golden.geometry import can_repeat, is_valid_perm


def _fail(case: OpCase, rule: str) -> None:
    raise ValueError(f"{case.op}: {rule} (case {case.case_id})")


def _count(ne: Sequence[int]) -> int:
    return int(np.prod(ne, dtype=np.int64))


def _shape(case: OpCase, name: str) -> tuple[int, ...]:
    ne = tuple(case.param(name))
    if len(ne) != 4 or any(int(n) < 1 for n in ne):
        _fail(case, f"{name}={list(ne)} must be four sizes ≥ 1")
    return ne


def _n_inputs(case: OpCase, n: int) -> None:
    if len(case.inputs) != n:
        _fail(case, f"takes {n} input(s), got {len(case.inputs)}")


def same_count(case: OpCase, inputs: list[np.ndarray]) -> None:
    """RESHAPE, CONT with a new shape, CPY: the new shape holds as many elements as the source."""
    _n_inputs(case, 1)
    name = "dst_ne" if case.op == "CPY" else "ne"
    if case.param(name, None) is None:
        return
    ne = _shape(case, name)
    if _count(ne) != case.inputs[0].nelements:
        _fail(case, f"{name}={list(ne)} has {_count(ne)} elements, the source {case.inputs[0].nelements}")
    if case.op == "RESHAPE" and not case.inputs[0].layout.is_contiguous:
        _fail(case, "ggml_reshape needs a contiguous source")


def view_fits(case: OpCase, inputs: list[np.ndarray]) -> None:
    """VIEW: element-aligned byte strides and offset, and the view inside the (contiguous) source."""
    _n_inputs(case, 1)
    src = case.inputs[0]
    if not src.layout.is_contiguous:
        _fail(case, "the view is taken of a contiguous source (its strides are relative to it)")
    ne, nb, offset = _shape(case, "ne"), tuple(case.param("nb")), int(case.param("offset"))
    esize = dtypes.type_size(src.dtype)
    if nb[0] != esize or any(n % esize for n in nb) or offset % esize or offset < 0:
        _fail(case, f"nb={list(nb)} and offset={offset} must be multiples of the element size {esize}, nb0 = it")
    last = offset + sum((ne[d] - 1) * nb[d] for d in range(4)) + esize
    if last > src.nelements * esize:
        _fail(case, f"the view ends at byte {last}, past the source's {src.nelements * esize} bytes")
    if offset + _count(ne) * esize > src.nelements * esize:  # ggml sizes a view as if contiguous
        _fail(case, f"offset {offset} + {_count(ne)} elements of {esize} bytes exceed the source's "
                    f"{src.nelements * esize} bytes (ggml_view asserts it whatever the strides)")


def valid_permute(case: OpCase, inputs: list[np.ndarray]) -> None:
    _n_inputs(case, 1)
    axes = tuple(case.param("axes"))
    if not is_valid_perm(axes):
        _fail(case, f"axes={list(axes)} is not a permutation of 0..3")


def repeatable(case: OpCase, inputs: list[np.ndarray]) -> None:
    """REPEAT: every target dim is a multiple of the source's (ggml_can_repeat)."""
    _n_inputs(case, 1)
    ne = _shape(case, "ne")
    if not can_repeat(case.inputs[0].ne, ne):  # type: ignore[arg-type]
        _fail(case, f"cannot repeat ne={list(case.inputs[0].ne)} to {list(ne)}: each dim must divide the target's")


def concatenable(case: OpCase, inputs: list[np.ndarray]) -> None:
    """CONCAT: same dtype, and every dim except ``dim`` equal."""
    _n_inputs(case, 2)
    a, b = case.inputs
    dim = case.param("dim")
    if dim not in (0, 1, 2, 3):
        _fail(case, f"dim={dim} must be 0..3")
    if a.dtype != b.dtype:
        _fail(case, f"both inputs need the same type, got {a.dtype} and {b.dtype}")
    if any(a.ne[d] != b.ne[d] for d in range(4) if d != dim):
        _fail(case, f"ne0={list(a.ne)} and ne1={list(b.ne)} differ outside dim {dim}")


def rows_in_range(case: OpCase, inputs: list[np.ndarray]) -> None:
    """GET_ROWS: index tensor I32 ``[n_rows, ne2, ne3, 1]`` and every index in ``[0, ne1)``."""
    _n_inputs(case, 2)
    a, b = case.inputs
    if b.dtype != "i32":
        _fail(case, f"row indices must be i32, got {b.dtype}")
    if b.ne[1] != a.ne[2] or b.ne[2] != a.ne[3] or b.ne[3] != 1:
        _fail(case, f"indices ne={list(b.ne)} must be [n_rows, {a.ne[2]}, {a.ne[3]}, 1] for data ne={list(a.ne)}")
    if inputs:
        idx = np.asarray(inputs[1])
        bad = (idx < 0) | (idx >= a.ne[1])
        if bad.any():
            _fail(case, f"row index {int(idx[bad].flat[0])} is outside [0, {a.ne[1]}) (ggml would abort)")


def acc_view_fits(case: OpCase, inputs: list[np.ndarray]) -> None:
    """ACC: F32, contiguous a, element-aligned non-overlapping byte strides, the view inside a."""
    _n_inputs(case, 2)
    a, b = case.inputs
    if not a.layout.is_contiguous:
        _fail(case, "ggml_acc needs a contiguous a")
    nb = (4, *(int(case.param(k)) for k in ("nb1", "nb2", "nb3")))
    offset = int(case.param("offset"))
    if any(n % 4 for n in nb) or offset % 4 or offset < 0:
        _fail(case, f"nb={list(nb)} and offset={offset} must be non-negative multiples of 4 bytes")
    if any(nb[d + 1] < b.ne[d] * nb[d] for d in range(3)):
        _fail(case, f"nb={list(nb)} makes the view of ne={list(b.ne)} overlap itself")
    last = offset + sum((b.ne[d] - 1) * nb[d] for d in range(4)) + 4
    if last > a.nelements * 4:
        _fail(case, f"the view ends at byte {last}, past a's {a.nelements * 4} bytes")


def pads(case: OpCase, inputs: list[np.ndarray]) -> None:
    _n_inputs(case, 1)
    lp, rp = tuple(case.param("lp")), tuple(case.param("rp"))
    if len(lp) != 4 or len(rp) != 4 or min(lp + rp) < 0:
        _fail(case, f"lp={list(lp)} and rp={list(rp)} must be four non-negative paddings each")
    if case.form not in ("", "pad_ext", "circular", "pad_ext_circular"):
        _fail(case, f"form={case.form!r} is not one of '', pad_ext, circular, pad_ext_circular")
    if not case.form.startswith("pad_ext") and any(lp):
        _fail(case, "ggml_pad and ggml_pad_circular pad at the end only: lp must be zero (use form=pad_ext)")


def upscale_shape(case: OpCase, inputs: list[np.ndarray]) -> None:
    _n_inputs(case, 1)
    if case.form == "interpolate":
        _shape(case, "ne")
    elif int(case.param("sf")) < 2:
        _fail(case, f"sf={case.param('sf')} must be an integer > 1 (ggml_upscale asserts it)")


def arange_range(case: OpCase, inputs: list[np.ndarray]) -> None:
    """ARANGE: ggml asserts stop > start; a positive step keeps the length positive."""
    _n_inputs(case, 0)
    start, stop, step = (float(np.float32(case.param(k))) for k in ("start", "stop", "step"))
    if not stop > start:
        _fail(case, f"stop={stop} must be greater than start={start} (ggml_arange asserts it)")
    if not step > 0:
        _fail(case, f"step={step} must be positive for a non-empty range")


def one_input(case: OpCase, inputs: list[np.ndarray]) -> None:
    _n_inputs(case, 1)


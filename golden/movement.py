"""Data movement and shape ops: NONE, VIEW, RESHAPE, PERMUTE, TRANSPOSE, DUP, CONT, CPY, REPEAT,
CONCAT, GET_ROWS, ACC, PAD.

Arrays are in numpy order (reversed ggml ``ne``); a C-order ravel of one is ggml's logical element
order (``i0`` fastest). Strides and offsets that ggml takes in bytes are taken here in **elements**
of the tensor's type; the device layer multiplies by the element size. Every function moves or
selects values without arithmetic, except ACC (one f32 addition per element, which the caller
rounds) and CPY (the type conversion, applied here).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from golden import dtypes
from golden import movement_checks as checks
from golden.case import OpCase
from golden.geometry import numpy_axes_for_permute
from golden.spec import FULL_INTEGERS, InputLayouts, OpList, OpSpec, P, Regime, element_regimes, one, sig, two
from golden.tolerance import Tolerance

SPECS = OpList()


def identity(x: np.ndarray) -> np.ndarray:
    """NONE, DUP, CONT: the logical values, copied into a contiguous tensor of the same type."""
    return np.array(x, copy=True)


def view(x: np.ndarray, ne: Sequence[int], nb: Sequence[int], offset: int) -> np.ndarray:
    """VIEW of a contiguous tensor: ``ne`` elements per dim at element strides ``nb[1:]`` from
    element ``offset`` of its flat storage (``nb[0]`` is always one element)."""
    flat = np.ascontiguousarray(x).ravel()
    item = flat.itemsize
    strides = (nb[3] * item, nb[2] * item, nb[1] * item, item)
    return np.lib.stride_tricks.as_strided(flat[offset:], shape=tuple(reversed(ne)), strides=strides).copy()


def reshape(x: np.ndarray, ne: Sequence[int]) -> np.ndarray:
    """RESHAPE (and CONT with a new shape): row-major reinterpretation with the same elements."""
    return np.ascontiguousarray(x).reshape(tuple(reversed(ne))).copy()


def permute(x: np.ndarray, axes: Sequence[int]) -> np.ndarray:
    """PERMUTE: ggml's source dim ``k`` moves to position ``axes[k]``."""
    return np.transpose(x, numpy_axes_for_permute(tuple(axes))).copy()  # type: ignore[arg-type]


def transpose(x: np.ndarray) -> np.ndarray:
    """TRANSPOSE = ``permute(1, 0, 2, 3)``: swaps ne0 and ne1."""
    return np.swapaxes(x, -1, -2).copy()


def cpy(x: np.ndarray, dst_ne: Sequence[int], dst_dtype: str) -> np.ndarray:
    """CPY: ``x``'s elements in logical order into a destination of shape ``dst_ne`` (same count),
    converted as ggml defines it: round-to-nearest-even to F16/BF16, truncation toward zero to
    I32, exact otherwise. The conversion is part of the op, so it is applied here."""
    return dtypes.round_to(np.ascontiguousarray(x).reshape(tuple(reversed(dst_ne))), dst_dtype)


def repeat(x: np.ndarray, ne: Sequence[int]) -> np.ndarray:
    """REPEAT to shape ``ne``: whole copies of ``x`` tiled along each dim (``np.tile``)."""
    target = tuple(reversed(ne))
    return np.tile(x, [t // s for t, s in zip(target, x.shape, strict=True)])


def concat(a: np.ndarray, b: np.ndarray, dim: int) -> np.ndarray:
    """CONCAT along ggml dim ``dim``: ``b`` follows ``a``."""
    return np.concatenate([a, b], axis=3 - dim)


def get_rows(data: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """GET_ROWS: ``out[i3, i2, r, :] = data[i3, i2, rows[0, i3, i2, r], :]``.

    ``data`` is ``[n_embd, ne1, ne2, ne3]`` and ``rows`` (I32) ``[n_rows, ne2, ne3, 1]`` in ggml
    order; the result is ``[n_embd, n_rows, ne2, ne3]``.
    """
    idx = np.asarray(rows[0], dtype=np.int64)  # numpy (ne3, ne2, n_rows)
    i3 = np.arange(idx.shape[0])[:, None, None]
    i2 = np.arange(idx.shape[1])[None, :, None]
    return np.array(data[i3, i2, idx, :], copy=True)


def acc(a: np.ndarray, b: np.ndarray, nb: Sequence[int], offset: int) -> np.ndarray:
    """ACC: ``a`` with ``b`` added to its view of shape ``b`` at element strides ``nb[1:]`` (dim 0
    stride one element) from element ``offset``. The view's elements must not overlap."""
    out = np.array(a, dtype=np.float64, copy=True)
    flat = out.reshape(-1)
    ne = tuple(reversed(b.shape))
    idx = (offset + np.arange(ne[0])[None, None, None, :] + nb[1] * np.arange(ne[1])[None, None, :, None]
           + nb[2] * np.arange(ne[2])[None, :, None, None] + nb[3] * np.arange(ne[3])[:, None, None, None])
    with np.errstate(invalid="ignore"):  # inf + -inf is NaN, as in f32
        flat[idx] += np.asarray(b, dtype=np.float64)
    return out


def pad(x: np.ndarray, lp: Sequence[int], rp: Sequence[int]) -> np.ndarray:
    """PAD (ggml_pad_ext): ``lp[d]`` zeros before and ``rp[d]`` zeros after ggml dim ``d``."""
    widths = [(lp[d], rp[d]) for d in (3, 2, 1, 0)]
    return np.pad(np.asarray(x, dtype=np.float64), widths)


def pad_circular(x: np.ndarray, lp: Sequence[int], rp: Sequence[int]) -> np.ndarray:
    """PAD circular (ggml_pad_ext_circular): on a torus, output ``i`` of dim ``d`` is source element
    ``(i − lp[d]) mod ne[d]``, however many times a padding wraps around the source."""
    out = np.asarray(x, dtype=np.float64)
    for d in range(4):
        axis, n = 3 - d, out.shape[3 - d]
        out = np.take(out, np.arange(-lp[d], n + rp[d]) % n, axis=axis)
    return out


def _pad(xs: list[np.ndarray], c: OpCase) -> np.ndarray:
    lp, rp = c.param("lp"), c.param("rp")
    return pad_circular(xs[0], lp, rp) if "circular" in c.form else pad(xs[0], lp, rp)


# ---- the catalogue entries ------------------------------------------------------------------------
_COPY_SIGS = (sig("f32"), sig("f16"), sig("bf16"), sig("i32"))
_QUANT_SAME = (sig("q4_0"), sig("q8_0"))
MOVED = Tolerance("bit-exact: the op only moves or selects stored values (byte copies, no arithmetic)")
QUANT_COPY = Tolerance("quantized destination: judged against the exact golden blocks (scale to the ulp, "
                       "quants exact but for the documented rounding paths); byte-exact for same-type copies")
DEQUANT_COPY = Tolerance("bit-exact: dequantizing is (q−8)·d (Q4_0) or q·d (Q8_0) with the F16 scale widened, "
                         "a product exact in f32 (4- or 8-bit q times an 11-bit d)")
# a view op's only kernel is the ggml_cont after it: its regimes are DUP's and CONT's
VIEW_ONLY = "a view: it computes nothing (its ggml_cont's grid regime is CONT's and DUP's)"
_VIEW_NOTE = ("built as the view followed by ggml_cont, so the device's strided copy is what is checked "
              "(the view itself computes nothing)")


def _concat_outputs(c: OpCase) -> int:
    return math.prod(c.inputs[0].ne) + math.prod(c.inputs[1].ne)


def _repeat_outputs(c: OpCase) -> int:
    return int(np.prod(c.param("ne")))


def _pad_outputs(c: OpCase) -> int:
    lp = c.param("lp", (0, 0, 0, 0))
    return int(np.prod([n + a + b for n, a, b in zip(c.inputs[0].ne, lp, c.param("rp"), strict=True)]))


def _gathered(c: OpCase) -> int:
    """GET_ROWS writes one row of the table per index."""
    return c.inputs[0].ne[0] * int(np.prod(c.inputs[1].ne))


# CUDA launches get_rows with the indices along a grid dimension of at most 65,535 blocks
MANY_ROWS = Regime("rows>65535", lambda c: c.inputs[1].ne[0] > 65535,
                   "more indices than a grid dimension has blocks (65,535)")


def _esize(case: OpCase) -> int:
    return dtypes.type_size(case.inputs[0].dtype)


SPECS.add(OpSpec(name="NONE", family="movement", no_regimes=VIEW_ONLY, golden=one(identity), signatures=_COPY_SIGS,
                 tolerance={"*": MOVED}, validate=checks.one_input,
                 notes="a leaf tensor read back through ggml_cont; " + _VIEW_NOTE))
SPECS.add(OpSpec(
    name="VIEW", family="movement", no_regimes=VIEW_ONLY,
    golden=lambda xs, c: view(xs[0], c.param("ne"), [n // _esize(c) for n in c.param("nb")],
                              c.param("offset") // _esize(c)),
    signatures=_COPY_SIGS, tolerance={"*": MOVED},
    params={"ne": P("view shape", tuple), "nb": P("view strides in bytes (nb0 = element size)", tuple),
            "offset": P("byte offset into the source", int)},
    input_layouts=InputLayouts.CONTIGUOUS, validate=checks.view_fits,
    notes="ggml_view_4d of a contiguous source (its strides are relative to that source); " + _VIEW_NOTE))
SPECS.add(OpSpec(
    name="RESHAPE", family="movement", no_regimes=VIEW_ONLY,
    golden=lambda xs, c: reshape(xs[0], c.param("ne")), signatures=_COPY_SIGS,
    tolerance={"*": MOVED}, params={"ne": P("new shape, same element count", tuple)},
    input_layouts=InputLayouts.CONTIGUOUS, validate=checks.same_count,
    notes="ggml_reshape_4d asserts a contiguous source; " + _VIEW_NOTE))
SPECS.add(OpSpec(
    name="PERMUTE", family="movement", no_regimes=VIEW_ONLY,
    golden=lambda xs, c: permute(xs[0], c.param("axes")), signatures=_COPY_SIGS,
    tolerance={"*": MOVED}, params={"axes": P("ggml_permute axes: source dim k goes to position axes[k]", tuple)},
    validate=checks.valid_permute, notes=_VIEW_NOTE))
SPECS.add(OpSpec(name="TRANSPOSE", family="movement", no_regimes=VIEW_ONLY, golden=one(transpose),
                 signatures=_COPY_SIGS, tolerance={"*": MOVED}, validate=checks.one_input,
                 notes="swaps ne0 and ne1; " + _VIEW_NOTE))
SPECS.add(OpSpec(name="DUP", family="movement",
                 regimes=(*element_regimes(),), golden=one(identity), signatures=_COPY_SIGS,
                 quantized_signatures=tuple(sig(q) for q in dtypes.DRAWN_COPY_TYPES),
                 tolerance={"*": MOVED, **{q: QUANT_COPY for q in dtypes.DRAWN_COPY_TYPES}},
                 validate=checks.one_input,
                 notes="ggml_dup: a contiguous same-type copy of any layout. Same-type copies of quantized "
                       "tensors move whole blocks: byte-exact."))
SPECS.add(OpSpec(
    name="CONT", family="movement",
    regimes=(*element_regimes(),), golden=lambda xs, c: reshape(xs[0], c.param("ne", tuple(c.inputs[0].ne))),
    signatures=_COPY_SIGS, quantized_signatures=_QUANT_SAME,
    tolerance={"*": MOVED, "q4_0": QUANT_COPY, "q8_0": QUANT_COPY},
    params={"ne": P("form=cont_4d only: the new shape (same element count)", tuple, optional=True)},
    validate=checks.same_count,
    notes="ggml_cont, or ggml_cont_4d (form=cont_4d) which also reshapes. Same-type copies of quantized "
          "tensors move whole blocks: byte-exact."))


def _cpy(xs: list[np.ndarray], c: OpCase) -> np.ndarray:
    # a quantized destination keeps the exact source values; the verdict quantizes around them
    dst = "f32" if dtypes.is_quantized(c.dst) else c.dst
    return cpy(xs[0], c.param("dst_ne"), dst)


SPECS.add(OpSpec(
    name="CPY", family="movement", golden=_cpy,
    regimes=(FULL_INTEGERS, *element_regimes()),
    signatures=(sig("f32"), sig("f32", dst="f16"), sig("f32", dst="bf16"), sig("f32", dst="i32"),
                sig("f16"), sig("f16", dst="f32"), sig("f16", dst="bf16"), sig("bf16"), sig("bf16", dst="f32"),
                sig("bf16", dst="f16"), sig("i32"), sig("i32", dst="f32")),
    quantized_signatures=tuple(sig(s, dst=q) for s in ("f32", "f16") for q in dtypes.DRAWN_COPY_TYPES)
    + (sig("q4_0", dst="f32"), sig("q8_0", dst="f32")),
    tolerance={"*": Tolerance("bit-exact: the conversion is defined as one round-to-nearest-even (F16, BF16), "
                              "truncation toward zero (I32) or exact widening; the golden applies it"),
               **{q: QUANT_COPY for q in dtypes.DRAWN_COPY_TYPES},
               "q4_0_to_f32": DEQUANT_COPY, "q8_0_to_f32": DEQUANT_COPY},
    params={"dst_ne": P("destination shape (same element count as the source)", tuple),
            "dst_pad": P("elements of padding per dim around the destination (a strided view when non-zero)",
                         tuple, optional=True),
            "dst_offset": P("element offset of the destination view in its allocation", int, optional=True),
            "dst_perm": P("ggml_permute axes of the destination view (its logical order is the copy's order)",
                          tuple, optional=True)},
    validate=checks.same_count,
    notes="the destination is created by the builder (a strided view of a bigger tensor when padded, "
          "ggml_permute'd when dst_perm is given); elements go in logical order. Q4_0/Q8_0 → F32 dequantizes "
          "(a source in any whole-block layout, permutes included). F32→I32 is drawn without NaN/inf (the C "
          "cast is undefined). "
          "The CPU aborts on F16/BF16→I32 (not implemented), so those are not listed. F32/F16 → Q4_0/Q8_0 "
          "(and Q4_1, Q5_0, Q5_1, IQ4_NL: golden.dtypes.DRAWN_COPY_TYPES) "
          "quantizes each 32-element block of the destination (contiguous); NaN/inf are not drawn there "
          "(one non-finite value poisons its block's scale)."))
SPECS.add(OpSpec(
    name="REPEAT", family="movement",
    regimes=(*element_regimes(elements=_repeat_outputs),),
    golden=lambda xs, c: repeat(xs[0], c.param("ne")), signatures=_COPY_SIGS,
    tolerance={"*": MOVED}, params={"ne": P("target shape: each dim a multiple of the source's", tuple)},
    validate=checks.repeatable, notes="np.tile"))
SPECS.add(OpSpec(
    name="CONCAT", family="movement", golden=lambda xs, c: concat(xs[0], xs[1], c.param("dim")),
    regimes=(FULL_INTEGERS, *element_regimes(elements=_concat_outputs)),
    signatures=tuple(sig(t, t) for t in ("f32", "f16", "bf16", "i8", "i16", "i32", "i64")), tolerance={"*": MOVED},
    params={"dim": P("ggml dim to join along (0..3)", int)}, validate=checks.concatenable,
    notes="both inputs may be strided or permuted; every integer type ggml has (I8, I16, I32, I64: ggml's "
          "CPU copies elements by their size). Half the cases give a and b one shape with the joined dim's "
          "extent shared by another dim, so a device joining along the wrong axis gives other values"))
SPECS.add(OpSpec(
    name="GET_ROWS", family="movement",
    regimes=(*element_regimes(elements=_gathered), MANY_ROWS), golden=two(get_rows),
    signatures=(sig("f32", "i32"), sig("f16", "i32", dst="f32"), sig("bf16", "i32", dst="f32")),
    quantized_signatures=(sig("q4_0", "i32", dst="f32"), sig("q8_0", "i32", dst="f32"))
    + tuple(sig(w, "i32", dst="f32") for w in dtypes.DRAWN_WEIGHT_TYPES if w not in dtypes.DRAWN_QUANT_TYPES),
    tolerance={"*": Tolerance("bit-exact: rows are copied, and F16/BF16 widen to F32 exactly (Q4_0/Q8_0 "
                              "dequantize exactly: (q−8)·d or q·d with the F16 scale widened; every other block "
                              "format's scale·quant products are exact in f32 and at most one rounding follows, "
                              "so FMA or not gives ggml's to_float bytes)")},
    validate=checks.rows_in_range, structured_inputs=True,
    notes="indices I32 [n_rows, ne2, ne3, 1] with duplicates, batched over dims 2 and 3; out-of-range "
          "indices are rejected before the device (ggml asserts)"))
SPECS.add(OpSpec(
    name="ACC", family="movement",
    regimes=(*element_regimes(1),),
    golden=lambda xs, c: acc(xs[0], xs[1], [n // 4 for n in (4, c.param("nb1"), c.param("nb2"), c.param("nb3"))],
                             c.param("offset") // 4),
    signatures=(sig("f32", "f32"),),
    tolerance={"f32": Tolerance("elements under the view get one f32 addition (one rounding); the rest are copied",
                                ulp=0.5)},
    params={"nb1": P("view row stride in bytes", int), "nb2": P("view plane stride in bytes", int),
            "nb3": P("view batch stride in bytes", int), "offset": P("view byte offset into a", int)},
    input_layouts=InputLayouts.CONTIGUOUS, validate=checks.acc_view_fits,
    notes="ggml_acc asserts a contiguous a; form=inplace builds ggml_acc_inplace on a ggml_dup of a, so the "
          "in-place kernel runs while the input stays checkable; b may have any layout"))
SPECS.add(OpSpec(
    name="PAD", family="movement",
    regimes=(*element_regimes(elements=_pad_outputs),), golden=_pad,
    signatures=(sig("f32"),), tolerance={"f32": MOVED},
    params={"lp": P("padding before each dim (form=pad_ext and pad_ext_circular only)", tuple),
            "rp": P("padding after each dim", tuple)},
    validate=checks.pads,
    notes="zeros: ggml_pad (end padding) or ggml_pad_ext (form=pad_ext); wrapping around (torus): "
          "ggml_pad_circular (form=circular) or ggml_pad_ext_circular (form=pad_ext_circular), where a padding "
          "may exceed the dim and wrap several times. ggml-cann declines circular padding (supports_op)"))

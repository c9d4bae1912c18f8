"""Data movement and shape ops: NONE, VIEW, RESHAPE, PERMUTE, TRANSPOSE, DUP, CONT, CPY, REPEAT,
CONCAT, GET_ROWS, ACC, PAD.

Arrays are in numpy order (reversed ggml ``ne``); a C-order ravel of one is ggml's logical element
order (``i0`` fastest). Strides and offsets that ggml takes in bytes are taken here in **elements**
of the tensor's type; the device layer multiplies by the element size. Every function moves or
selects values without arithmetic, except ACC (one f32 addition per element, which the caller
rounds) and CPY (the type conversion, applied here).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from golden import dtypes
from golden.geometry import numpy_axes_for_permute


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

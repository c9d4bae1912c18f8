"""ggml tensor geometry: ne/nb, numpy order, views, permutes, and cyclic-tiling broadcast.

Conventions:
* ``ne``/``nb`` are in ggml order (index 0 innermost); a numpy array of the logical values has
  shape ``tuple(reversed(ne))``.
* ``ggml_permute(a, ax0, ax1, ax2, ax3)`` moves source dim ``k`` to destination position ``ax_k``.
* ggml broadcasts by cyclic tiling (``ggml_can_repeat``): a source dim of size ``s`` serves a
  destination dim of size ``n`` when ``n % s == 0``, with index ``i % s``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from golden import dtypes
from golden.case import Layout, Ne, TensorSpec


def contiguous_nb(dtype: str, ne: Ne) -> Ne:
    """Byte strides of a contiguous tensor, as ``ggml_new_tensor`` sets them."""
    nb0 = dtypes.type_size(dtype)
    nb1 = dtypes.row_size(dtype, ne[0])
    return (nb0, nb1, nb1 * ne[1], nb1 * ne[1] * ne[2])


def numpy_axes_for_permute(perm: Ne) -> tuple[int, int, int, int]:
    """numpy transpose axes equivalent to ``ggml_permute(perm)`` on a numpy-order array."""
    axes = [0, 0, 0, 0]
    for k, ax in enumerate(perm):
        axes[3 - ax] = 3 - k
    return tuple(axes)  # type: ignore[return-value]


def permute_ne(ne: Ne, perm: Ne) -> Ne:
    out = [0, 0, 0, 0]
    for k, ax in enumerate(perm):
        out[ax] = ne[k]
    return tuple(out)  # type: ignore[return-value]


def stored_ne(spec: TensorSpec) -> Ne:
    """The ne of the tensor before the layout's permute: logical ne taken back through it."""
    return tuple(spec.ne[spec.layout.perm[k]] for k in range(4))  # type: ignore[return-value]


def is_valid_perm(perm: tuple[int, ...]) -> bool:
    return sorted(perm) == [0, 1, 2, 3]


@dataclass(frozen=True)
class Storage:
    """Where a tensor's elements live: a contiguous base allocation and a view into it.

    ``base_ne`` is the padded allocation (ggml order); the view has ``view_ne``/``view_nb`` at
    ``offset_bytes``; the logical tensor is ``ggml_permute(view, *perm)``.
    """

    dtype: str
    base_ne: Ne
    view_ne: Ne
    view_nb: Ne
    offset_bytes: int
    perm: Ne

    @property
    def base_nbytes(self) -> int:
        n = self.offset_bytes
        return n + dtypes.row_size(self.dtype, self.base_ne[0]) * self.base_ne[1] * self.base_ne[2] * self.base_ne[3]


def storage_of(spec: TensorSpec) -> Storage:
    lay: Layout = spec.layout
    if not is_valid_perm(lay.perm):
        raise ValueError(f"layout perm {lay.perm} is not a permutation of 0..3")
    s_ne = stored_ne(spec)
    base_ne = tuple(s + p for s, p in zip(s_ne, lay.pad, strict=True))
    if dtypes.is_quantized(spec.dtype):
        if lay.perm[0] != 0 or lay.pad[0] % 32 or lay.offset % 32:
            raise ValueError("quantized layouts keep whole blocks: dim 0 stays innermost, row padding and offset "
                             "in blocks")
    esize = dtypes.type_size(spec.dtype)
    offset_bytes = lay.offset * esize // dtypes.block_size(spec.dtype)
    nb = contiguous_nb(spec.dtype, base_ne)  # type: ignore[arg-type]
    return Storage(spec.dtype, base_ne, s_ne, nb, offset_bytes, lay.perm)  # type: ignore[arg-type]


def check_aliases(inputs: tuple[TensorSpec, ...]) -> None:
    """ValueError unless every aliased input (``Layout.alias``) is a view an earlier, unaliased input
    of its dtype can hold: its whole geometry within that input's allocation."""
    for i, t in enumerate(inputs):
        j = t.layout.alias
        if j is None:
            continue
        if not 0 <= j < i or inputs[j].layout.alias is not None:
            raise ValueError(f"input {i} aliases input {j}: it must name an earlier input with its own allocation")
        if t.dtype != inputs[j].dtype or dtypes.is_quantized(t.dtype):
            raise ValueError(f"input {i} aliases input {j}: an alias has its source's dtype, and not a quantized one")
        need, have = storage_of(t).base_nbytes, storage_of(inputs[j]).base_nbytes
        if need > have:
            raise ValueError(f"input {i} aliases input {j}: its view spans {need} bytes of a {have}-byte allocation")


def aliased_values(values: list[np.ndarray], inputs: tuple[TensorSpec, ...]) -> list[np.ndarray]:
    """``values`` with each aliased input's replaced by what its view of the source's bytes holds
    (the source as :func:`pack` lays it out, padding fill included)."""
    out = list(values)
    for i, t in enumerate(inputs):
        j = t.layout.alias
        if j is not None:
            out[i] = unpack(pack(values[j], inputs[j]), t)
    return out


def fill_pattern(dtype: str) -> int:
    """Byte that fills padding and gaps: reading it gives NaN (floats) or a huge int, never 0."""
    return 0xFF


def pack(values: np.ndarray, spec: TensorSpec) -> np.ndarray:
    """Logical values (numpy order) of ``spec`` to the bytes of its whole base allocation.

    ``values`` is float/int logical values for plain dtypes, or raw uint8 rows of shape
    ``(ne3, ne2, ne1, row_bytes)`` for quantized dtypes. Padding and gaps get
    :func:`fill_pattern` so a device that reads them produces visibly wrong results.
    """
    st = storage_of(spec)
    base = np.full(st.base_nbytes, fill_pattern(spec.dtype), dtype=np.uint8)
    region = base[st.offset_bytes :]
    if dtypes.is_quantized(spec.dtype):
        row_bytes = dtypes.row_size(spec.dtype, st.base_ne[0])
        grid = region.reshape(st.base_ne[3], st.base_ne[2], st.base_ne[1], row_bytes)
        data = np.asarray(values, dtype=np.uint8).reshape(tuple(reversed(spec.ne[1:])) + (-1,))
        # logical rows -> stored order (a permute keeps dim 0, so whole rows of blocks move)
        data = np.transpose(data, np.argsort(numpy_axes_for_permute(st.perm)))
        vn = st.view_ne
        grid[: vn[3], : vn[2], : vn[1], : data.shape[-1]] = data
        return base
    logical = np.asarray(values).reshape(spec.np_shape)
    # stored elements, no copy where the values already are (to_storage's astype always copies)
    stored = (dtypes.to_storage(logical, spec.dtype) if spec.dtype == "bf16"
              else np.asarray(logical, dtype=dtypes.STORAGE_DTYPE[spec.dtype]))
    # logical -> pre-permute order: invert the permute's numpy axes
    axes = numpy_axes_for_permute(st.perm)
    inverse = np.argsort(axes)
    stored = np.transpose(stored, inverse)
    grid = region.view(dtypes.STORAGE_DTYPE[spec.dtype]).reshape(tuple(reversed(st.base_ne)))
    shape = tuple(reversed(st.view_ne))
    grid[: shape[0], : shape[1], : shape[2], : shape[3]] = stored
    return base


def unpack(base: np.ndarray, spec: TensorSpec) -> np.ndarray:
    """Inverse of :func:`pack`: the logical values (stored dtype, numpy order) in a base buffer."""
    st = storage_of(spec)
    region = np.asarray(base, dtype=np.uint8)[st.offset_bytes : st.base_nbytes]
    if dtypes.is_quantized(spec.dtype):
        row_bytes = dtypes.row_size(spec.dtype, st.base_ne[0])
        grid = region.reshape(st.base_ne[3], st.base_ne[2], st.base_ne[1], row_bytes)
        used = dtypes.row_size(spec.dtype, spec.ne[0])
        vn = st.view_ne
        rows = grid[: vn[3], : vn[2], : vn[1], :used]
        return np.transpose(rows, numpy_axes_for_permute(st.perm)).copy()
    grid = region.view(dtypes.STORAGE_DTYPE[spec.dtype]).reshape(tuple(reversed(st.base_ne)))
    shape = tuple(reversed(st.view_ne))
    view = grid[: shape[0], : shape[1], : shape[2], : shape[3]]
    return dtypes.from_storage(np.transpose(view, numpy_axes_for_permute(st.perm)).copy(), spec.dtype)


def strided_view(buf: np.ndarray, dtype: str, ne: Ne, nb: Ne, offset_bytes: int) -> np.ndarray:
    """Read a (possibly non-contiguous) plain-dtype tensor out of raw bytes by its ne/nb."""
    return dtypes.from_storage(strided_stored(buf, dtype, ne, nb, offset_bytes), dtype)


def strided_stored(buf: np.ndarray, dtype: str, ne: Ne, nb: Ne, offset_bytes: int) -> np.ndarray:
    """:func:`strided_view`'s elements as stored (float32, float16, bf16 bits, integers), a copy of
    their own: no float64 conversion, for a caller that wants the stored type back anyway."""
    store = dtypes.STORAGE_DTYPE[dtype]
    flat = np.ascontiguousarray(buf).reshape(-1).view(np.uint8)
    arr = np.lib.stride_tricks.as_strided(
        flat[offset_bytes:],
        shape=tuple(reversed(ne)) + (store.itemsize,),
        strides=tuple(reversed(nb)) + (1,),
        writeable=False,
    )
    return arr.copy().view(store)[..., 0]


def can_repeat(small: Ne, big: Ne) -> bool:
    """``ggml_can_repeat(small, big)``: every big dim is a multiple of the small one."""
    return all(s > 0 and b % s == 0 for s, b in zip(small, big, strict=True))


def tile_to(x: np.ndarray, big_np_shape: tuple[int, ...]) -> np.ndarray:
    """Cyclic tiling of ``x`` up to ``big_np_shape`` (both numpy order), as ggml broadcasts."""
    reps = []
    for s, b in zip(x.shape, big_np_shape, strict=True):
        if s == 0 or b % s:
            raise ValueError(f"cannot tile {x.shape} to {big_np_shape}")
        reps.append(b // s)
    return np.tile(x, reps)


def logical_nb(spec: TensorSpec) -> Ne:
    """Byte strides of the logical tensor (after the layout's permute), as ggml's ``nb`` gives them."""
    st = storage_of(spec)
    nb = [0, 0, 0, 0]
    for k in range(4):
        nb[st.perm[k]] = st.view_nb[k]
    return tuple(nb)  # type: ignore[return-value]


def rows_unit_stride(spec: TensorSpec) -> bool:
    """Dim 0 is innermost with unit stride (``nb0`` = element size), whatever ne0 is."""
    return logical_nb(spec)[0] == dtypes.type_size(spec.dtype)


def rows_uniformly_strided(spec: TensorSpec) -> bool:
    """Row j (counted over dims 1–3) starts at ``j·nb1`` and rows have unit stride, as a kernel that
    walks rows by nb1 assumes."""
    nb, ne = logical_nb(spec), spec.ne
    run = nb[1] * ne[1]
    for d in (2, 3):
        if ne[d] > 1 and nb[d] != run:
            return False
        run *= ne[d]
    return rows_unit_stride(spec)


def ggml_contiguous(spec: TensorSpec) -> bool:
    """``ggml_is_contiguous``: elements packed in ggml order (dims of size 1 may have any stride)."""
    nb, ne = logical_nb(spec), spec.ne
    expect = dtypes.type_size(spec.dtype)
    if ne[0] != dtypes.block_size(spec.dtype) and nb[0] != expect:
        return False
    expect = expect * ne[0] // dtypes.block_size(spec.dtype)
    for d in (1, 2, 3):
        if ne[d] != 1:
            if nb[d] != expect:
                return False
            expect *= ne[d]
    return True


def strictly_packed(spec: TensorSpec) -> bool:
    """Every stride, size-1 dims included, is the packed one (kernels that step by nb2 whatever ne2 is)."""
    nb, ne = logical_nb(spec), spec.ne
    expect = dtypes.type_size(spec.dtype)
    if nb[0] != expect:
        return False
    expect = expect * ne[0] // dtypes.block_size(spec.dtype)
    for d in (1, 2, 3):
        if nb[d] != expect:
            return False
        expect *= ne[d]
    return True

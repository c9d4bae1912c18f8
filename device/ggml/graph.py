"""One-op ggml graphs: create the case's input tensors (with their layouts), call the op's
constructor, allocate on a backend, upload, compute, read back.

Per-op constructors live in the ``ops_*`` modules as ``BUILDERS = {"OP": fn}``; each ``fn(g, srcs,
case)`` receives a :class:`GraphBuilder`, the input tensors in case order and the case, and returns
the output tensor.
"""

from __future__ import annotations

import ctypes as C
from collections.abc import Callable

import numpy as np

from device.ggml.lib import GgmlInitParams, GgmlLib, TensorP
from golden import dtypes
from golden.case import OpCase, TensorSpec
from golden.geometry import Storage, storage_of, strided_view

TYPE_NAME = {v: k for k, v in dtypes.GGML_TYPE_ID.items()}
MAX_NODES = 64


class GraphBuildError(Exception):
    """The case cannot be expressed as a ggml graph (a harness problem, reported as ERROR)."""


class GraphBuilder:
    """A ggml context sized for one small graph; builders call ggml through it."""

    def __init__(self, lib: GgmlLib, n_tensors: int) -> None:
        self.lib = lib
        size = lib.ggml_tensor_overhead() * n_tensors + lib.ggml_graph_overhead_custom(MAX_NODES, False)
        self.ctx = lib.ggml_init(GgmlInitParams(size, None, True))
        if not self.ctx:
            raise GraphBuildError("ggml_init failed")

    def new_tensor(self, dtype: str, ne: tuple[int, ...]) -> TensorP:
        ne_arr = (C.c_int64 * len(ne))(*ne)
        return self.lib.ggml_new_tensor(self.ctx, dtypes.GGML_TYPE_ID[dtype], len(ne), ne_arr)

    def free(self) -> None:
        if self.ctx:
            self.lib.ggml_free(self.ctx)
            self.ctx = None


Builder = Callable[[GraphBuilder, list[TensorP], OpCase], TensorP]


def builders() -> dict[str, Builder]:
    from device.ggml import ops_elementwise, ops_movement, ops_numerics

    table: dict[str, Builder] = {}
    for module in (ops_elementwise, ops_numerics, ops_movement):
        table.update(module.BUILDERS)
    return table


class InputTensor:
    """One uploaded input: its base allocation, the logical tensor the op sees, and its bytes."""

    def __init__(self, g: GraphBuilder, spec: TensorSpec, index: int) -> None:
        self.spec = spec
        self.storage: Storage = storage_of(spec)
        st = self.storage
        lib = g.lib
        if spec.layout.is_contiguous:
            self.base = g.new_tensor(spec.dtype, spec.ne)
            self.tensor = self.base
        else:
            n_elems = st.base_nbytes // dtypes.type_size(spec.dtype) * dtypes.block_size(spec.dtype)
            self.base = g.new_tensor(spec.dtype, (n_elems,))
            view = lib.ggml_view_4d(g.ctx, self.base, *st.view_ne, *st.view_nb[1:], st.offset_bytes)
            self.tensor = view if st.perm == (0, 1, 2, 3) else lib.ggml_permute(g.ctx, view, *st.perm)
        lib.ggml_set_name(self.base, (spec.name or f"src{index}").encode())


def read_tensor(lib: GgmlLib, t: TensorP) -> np.ndarray:
    """A tensor's logical values (numpy order), following views into their base allocation."""
    c = t.contents
    dtype = TYPE_NAME[c.type]
    root = c.view_src if c.view_src else t
    offs = c.view_offs if c.view_src else 0
    nbytes = lib.ggml_nbytes(root)
    buf = np.empty(nbytes, dtype=np.uint8)
    lib.ggml_backend_tensor_get(root, buf.ctypes.data, 0, nbytes)
    ne = tuple(c.ne)
    if dtypes.is_quantized(dtype):
        row = dtypes.row_size(dtype, ne[0])
        used = buf[offs : offs + row * ne[1] * ne[2] * ne[3]]
        return used.reshape(ne[3], ne[2], ne[1], row).copy()
    return strided_view(buf, dtype, ne, tuple(c.nb), offs)


def tensor_dtype(t: TensorP) -> str:
    return TYPE_NAME[t.contents.type]

"""One-op ggml graphs: create the case's input tensors (with their layouts), call the op's
constructor, allocate on a backend, upload, compute, read back.

Per-op constructors live in the ``ops_*`` modules as ``BUILDERS = {"OP": fn}``; each ``fn(g, srcs,
case)`` receives a :class:`GraphBuilder`, the input tensors in case order and the case, and returns
the output tensor. A constructor the core bindings (``device/ggml/lib.py``) lack is declared in its
ops module with :func:`prototype` and called through ``g.call(name, ...)``: it is bound on first use,
and a ggml release without it makes only that op fail (one clear error), not the library.
"""

from __future__ import annotations

import ctypes as C
from collections.abc import Callable
from typing import Any

import numpy as np

from device.base import Unsupported
from device.ggml import trace
from device.ggml.lib import GgmlInitParams, GgmlLib, TensorP
from golden import dtypes
from golden.case import OpCase, TensorSpec
from golden.geometry import Storage, storage_of, strided_stored

TYPE_NAME = {v: k for k, v in dtypes.GGML_TYPE_ID.items()}
MAX_NODES = 64

# ctypes shorthands for prototypes
P_CTX = C.c_void_p
P_TENSOR = TensorP
_PROTOTYPES: dict[str, tuple[Any, tuple[Any, ...]]] = {}


def prototype(name: str, restype: Any, *argtypes: Any) -> None:
    """Declare a ggml function's C prototype (ggml.h), bound when a builder first calls it."""
    _PROTOTYPES[name] = (restype, argtypes)


class GraphBuildError(Exception):
    """The case cannot be expressed as a ggml graph (a harness problem, reported as ERROR)."""


class SymbolMissing(Unsupported):
    """The loaded ggml release lacks the op's constructor: the op is unsupported there."""


class GraphBuilder:
    """A ggml context sized for one small graph; builders call ggml through it."""

    def __init__(self, lib: GgmlLib, n_tensors: int) -> None:
        self.lib = lib
        size = lib.ggml_tensor_overhead() * n_tensors + lib.ggml_graph_overhead_custom(MAX_NODES, False)
        self.ctx = lib.ggml_init(GgmlInitParams(size, None, True))
        if not self.ctx:
            raise GraphBuildError("ggml_init failed")

    def new_tensor(self, dtype: str, ne: tuple[int, ...]) -> TensorP:
        if dtypes.is_quantized(dtype):
            check_type_known(self.lib, dtype)
        ne_arr = (C.c_int64 * len(ne))(*ne)
        return self.lib.ggml_new_tensor(self.ctx, dtypes.GGML_TYPE_ID[dtype], len(ne), ne_arr)

    def call(self, name: str, *args: Any) -> Any:
        """Call a ggml function declared with :func:`prototype` (bound once per library)."""
        return bound_function(self.lib, name)(*args)

    def free(self) -> None:
        if self.ctx:
            self.lib.ggml_free(self.ctx)
            self.ctx = None


def check_type_known(lib: GgmlLib, dtype: str) -> None:
    """Unsupported where the bound release's type traits do not name ``dtype`` at its enum value (a release
    older than the format, or one whose enum moved): ggml_new_tensor would abort or read other bytes."""
    from golden import formats

    key = (id(lib), dtype)
    if key not in _KNOWN_TYPES:
        name = (lib.ggml_type_name(dtypes.GGML_TYPE_ID[dtype]) or b"").decode(errors="replace")
        _KNOWN_TYPES[key] = name == formats.get(dtype).ggml_name
    if not _KNOWN_TYPES[key]:
        raise Unsupported(f"ggml {lib.version} has no {dtype} type (its type traits name type "
                          f"{dtypes.GGML_TYPE_ID[dtype]} otherwise)")


_KNOWN_TYPES: dict[tuple[int, str], bool] = {}
Builder = Callable[[GraphBuilder, list[TensorP], OpCase], TensorP]
_BOUND: dict[tuple[int, str], Any] = {}


def bound_function(lib: GgmlLib, name: str) -> Any:
    key = (id(lib), name)
    if key not in _BOUND:
        if name not in _PROTOTYPES:
            raise GraphBuildError(f"harness error: no prototype declared for {name} (device/ggml/ops_*.py)")
        try:
            fn = getattr(lib.base, name)
        except AttributeError:
            raise SymbolMissing(f"ggml {getattr(lib, 'version', '?')} in {lib.lib_dir} has no {name}") from None
        fn.restype, fn.argtypes = _PROTOTYPES[name][0], list(_PROTOTYPES[name][1])
        _BOUND[key] = trace.traced(name, fn, *_PROTOTYPES[name])
    return _BOUND[key]


def builders() -> dict[str, Builder]:
    """Every ``device/ggml/ops_*.py`` module's BUILDERS (an op defined twice is a harness error)."""
    import importlib
    import pkgutil

    import device.ggml as package

    table: dict[str, Builder] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name.startswith("ops_"):
            for op, build in importlib.import_module(f"device.ggml.{info.name}").BUILDERS.items():
                if op in table:
                    raise GraphBuildError(f"harness error: two ggml constructors for {op}")
                table[op] = build
    return table


class InputTensor:
    """One uploaded input: its base allocation, the logical tensor the op sees, and its bytes."""

    def __init__(self, g: GraphBuilder, spec: TensorSpec, index: int, source: InputTensor | None = None) -> None:
        """``source``: the earlier input an aliased spec (``Layout.alias``) is a view into; the alias
        then has no allocation of its own (``base`` is the source's) and nothing to upload."""
        self.spec = spec
        self.storage: Storage = storage_of(spec)
        self.source = source
        self.base: TensorP
        st = self.storage
        lib = g.lib
        if source is not None:
            self.base = source.base
            view = lib.ggml_view_4d(g.ctx, self.base, *st.view_ne, *st.view_nb[1:], st.offset_bytes)
            self.tensor = view if st.perm == (0, 1, 2, 3) else lib.ggml_permute(g.ctx, view, *st.perm)
            lib.ggml_set_name(self.tensor, (spec.name or f"src{index}").encode())
            return
        if spec.layout.is_contiguous:
            self.base = g.new_tensor(spec.dtype, spec.ne)
            self.tensor = self.base
        else:
            n_elems = st.base_nbytes // dtypes.type_size(spec.dtype) * dtypes.block_size(spec.dtype)
            self.base = g.new_tensor(spec.dtype, (n_elems,))
            view = lib.ggml_view_4d(g.ctx, self.base, *st.view_ne, *st.view_nb[1:], st.offset_bytes)
            self.tensor = view if st.perm == (0, 1, 2, 3) else lib.ggml_permute(g.ctx, view, *st.perm)
        lib.ggml_set_name(self.base, (spec.name or f"src{index}").encode())


def input_tensors(g: GraphBuilder, specs: tuple[TensorSpec, ...]) -> list[InputTensor]:
    """The case's inputs in order, each aliased one a view into its source's allocation."""
    made: list[InputTensor] = []
    for i, spec in enumerate(specs):
        alias = spec.layout.alias
        made.append(InputTensor(g, spec, i, made[alias] if alias is not None else None))
    return made


def read_tensor(lib: GgmlLib, t: TensorP, as_output: bool = False) -> np.ndarray:
    """A tensor's logical values (numpy order), following views into their base allocation: float64
    for float dtypes, or with ``as_output`` in ``RunResult.output``'s array type (float32 for F32
    and BF16, float16 for F16) without the float64 round trip, which a large read-back pays twice."""
    c = t.contents
    dtype = TYPE_NAME[c.type]
    root = c.view_src if c.view_src else t
    offs = c.view_offs if c.view_src else 0
    nbytes = lib.ggml_nbytes(root)
    buf = np.empty(nbytes, dtype=np.uint8)
    lib.ggml_backend_tensor_get(root, buf.ctypes.data, 0, nbytes)
    ne = tuple(c.ne)
    if dtypes.is_quantized(dtype):
        # whole rows of blocks at the tensor's row strides (a view into a larger cache has gaps)
        row = dtypes.row_size(dtype, ne[0])
        nb = tuple(c.nb)
        return np.lib.stride_tricks.as_strided(
            buf[offs:], shape=(ne[3], ne[2], ne[1], row), strides=(nb[3], nb[2], nb[1], 1)).copy()
    stored = strided_stored(buf, dtype, ne, tuple(c.nb), offs)
    if as_output and dtype in _OUTPUT_AS_STORED:
        values = _OUTPUT_AS_STORED[dtype](stored)
        # a NaN keeps its bits here; through float64 a signalling one came back quiet: that path for it
        if not np.isnan(values).any():
            return values
    return dtypes.from_storage(stored, dtype)


_OUTPUT_AS_STORED: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "f32": lambda stored: stored, "f16": lambda stored: stored, "bf16": dtypes.bf16_to_f32,
}


def tensor_dtype(t: TensorP) -> str:
    return TYPE_NAME[t.contents.type]

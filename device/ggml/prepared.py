"""A ggml graph made ready on a backend: allocated, its inputs uploaded, computed, read back, freed.

One helper for every caller that runs a graph: an op case's ``run`` (one node), perf timing (the same
graph computed many times) and graph cases (many nodes, three allocations). It holds no reference
to the device object, so ``device.py`` and ``perf.py`` both import it and not each other.

Two allocations:

* :attr:`Allocation.OWN`: every tensor its own memory (``ggml_backend_alloc_ctx_tensors``), as
  test-backend-ops does;
* :attr:`Allocation.GALLOCR`: the inputs get their own memory and are flagged inputs; the nodes are
  placed by ggml's graph allocator (``ggml_gallocr_alloc_graph``), which reuses an intermediate's
  buffer for a later node, in place where the op allows it, as a model run does.
"""

from __future__ import annotations

import ctypes as C
import enum
import time

import numpy as np

from device.base import DeviceError, Unsupported
from device.ggml.graph import P_CTX, P_TENSOR, GraphBuilder, InputTensor, prototype, read_tensor
from device.ggml.lib import GgmlLib, TensorP
from golden.geometry import pack

GGML_STATUS_SUCCESS = 0
_COMPARE_CHUNK = 1 << 22  # bytes of read-back compared at a time, through one reused buffer

prototype("ggml_set_output", None, P_TENSOR)
prototype("ggml_get_first_tensor", P_TENSOR, P_CTX)
prototype("ggml_backend_view_init", C.c_int, P_TENSOR)  # void before 0.2x: the int is then ignored
prototype("ggml_get_next_tensor", P_TENSOR, P_CTX, P_TENSOR)
prototype("ggml_set_input", None, P_TENSOR)
prototype("ggml_gallocr_new", C.c_void_p, C.c_void_p)
prototype("ggml_gallocr_free", None, C.c_void_p)
prototype("ggml_gallocr_alloc_graph", C.c_bool, C.c_void_p, C.c_void_p)


class Allocation(enum.Enum):
    OWN = "own"
    GALLOCR = "gallocr"


class PreparedGraph:
    """``outputs`` are expanded into the graph in order (their ancestors with them, as
    ``ggml_build_forward_expand`` does for llama.cpp). ``inputs`` live in ``input_ctx``; nodes live in
    ``node_ctx`` (None: in ``input_ctx`` too, as a one-op case builds them). The contexts are the
    caller's: :meth:`free` frees the buffers, the graph allocator and the contexts."""

    def __init__(self, lib: GgmlLib, backend: int | None, device_name: str, input_ctx: GraphBuilder,
                 inputs: list[InputTensor], outputs: list[TensorP], node_ctx: GraphBuilder | None = None,
                 graph_size: int = 64, allocation: Allocation = Allocation.OWN) -> None:
        self.lib, self.backend, self.device_name = lib, backend, device_name
        self.input_ctx, self.node_ctx = input_ctx, node_ctx
        self.inputs, self.outputs = inputs, outputs
        self.allocation = allocation
        self._buffers: list[int] = []
        self._gallocr: int | None = None
        self.sent: list[np.ndarray] = []
        ctx = (node_ctx or input_ctx).ctx
        self.graph = lib.ggml_new_graph_custom(ctx, graph_size, False)
        for out in outputs:
            lib.ggml_build_forward_expand(self.graph, out)

    def __enter__(self) -> PreparedGraph:
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()

    def allocate(self) -> None:
        lib = self.lib
        if self.allocation is Allocation.OWN:
            for g in (self.input_ctx, self.node_ctx):
                if g is not None:
                    self._alloc_ctx(g)
            return
        if self.node_ctx is None:
            raise DeviceError("harness error: graph-allocator runs need the nodes in a context of their own")
        self._alloc_ctx(self.input_ctx)
        for t in self.inputs:
            self.input_ctx.call("ggml_set_input", t.base)
        buft = lib.ggml_backend_get_default_buffer_type(self.backend)
        self._gallocr = self.input_ctx.call("ggml_gallocr_new", buft)
        if not self._gallocr:
            raise DeviceError(f"{self.device_name}: ggml_gallocr_new failed")
        if not self.input_ctx.call("ggml_gallocr_alloc_graph", self._gallocr, self.graph):
            raise DeviceError(f"{self.device_name}: ggml_gallocr_alloc_graph failed")

    def _alloc_ctx(self, g: GraphBuilder) -> None:
        buffer = self.lib.ggml_backend_alloc_ctx_tensors(g.ctx, self.backend)
        if not buffer:
            if not _needs_memory(g):  # only views (an in-place node on a view of an input): nothing to
                _init_views(g)  # allocate, but the views still need their addresses in the source's buffer
                return
            raise DeviceError(f"{self.device_name}: buffer allocation failed")
        self._buffers.append(buffer)

    def supported(self, nodes: list[TensorP]) -> TensorP | None:
        """The first of ``nodes`` the backend's supports_op declines, or None."""
        for t in nodes:
            if not self.lib.ggml_backend_supports_op(self.backend, t):
                return t
        return None

    def upload(self, values: list[np.ndarray]) -> None:
        self.sent = []
        for t, v in zip(self.inputs, values, strict=True):
            alias = t.spec.layout.alias
            if alias is not None:  # a view into an earlier input's allocation: its bytes went up with it
                self.sent.append(self.sent[alias])
                continue
            raw = pack(v, t.spec)
            self.lib.ggml_backend_tensor_set(t.base, raw.ctypes.data, 0, raw.nbytes)
            self.sent.append(raw)

    def compute(self, synchronize: bool = False) -> float:
        """One ``ggml_backend_graph_compute`` (fusion happens inside it); its wall time in seconds."""
        start = time.perf_counter()
        status = self.lib.ggml_backend_graph_compute(self.backend, self.graph)
        if synchronize:
            self.lib.ggml_backend_synchronize(self.backend)
        elapsed = time.perf_counter() - start
        if status != GGML_STATUS_SUCCESS:
            raise DeviceError(f"{self.device_name}: graph compute returned status {status}")
        return elapsed

    def read(self, t: TensorP, as_output: bool = False) -> np.ndarray:
        return read_tensor(self.lib, t, as_output)

    def inputs_back(self) -> tuple[list[np.ndarray], list[bool]]:
        """Each input's whole allocation read back, and whether it is byte for byte what was sent.

        Compared a chunk at a time through one reused buffer: a padded input can be hundreds of MB,
        whose one-piece read and ``np.array_equal`` (a bool per byte) cost seconds. An input that
        came back intact is its sent bytes (the same bytes); only a changed one is read whole."""
        backs, intact = [], []
        chunk = np.empty(min(_COMPARE_CHUNK, max((raw.nbytes for raw in self.sent), default=0)), dtype=np.uint8)
        for t, raw in zip(self.inputs, self.sent, strict=True):
            same = True
            for start in range(0, raw.nbytes, chunk.nbytes):
                size = min(chunk.nbytes, raw.nbytes - start)
                self.lib.ggml_backend_tensor_get(t.base, chunk.ctypes.data, start, size)
                if not np.array_equal(chunk[:size], raw[start:start + size]):
                    same = False
                    break
            if same:
                backs.append(raw)
            else:
                back = np.empty(raw.nbytes, dtype=np.uint8)
                self.lib.ggml_backend_tensor_get(t.base, back.ctypes.data, 0, back.nbytes)
                backs.append(back)
            intact.append(same)
        return backs, intact

    def free(self) -> None:
        if self._gallocr:
            self.input_ctx.call("ggml_gallocr_free", self._gallocr)
            self._gallocr = None
        for buffer in self._buffers:
            self.lib.ggml_backend_buffer_free(buffer)
        self._buffers = []
        for g in (self.node_ctx, self.input_ctx):
            if g is not None:
                g.free()


def _needs_memory(g: GraphBuilder) -> bool:
    """Whether a context holds a tensor that is not a view (ggml_backend_alloc_ctx_tensors returns NULL
    both when it fails and when there is nothing to allocate)."""
    t = g.call("ggml_get_first_tensor", g.ctx)
    while t:
        if not t.contents.view_src:
            return True
        t = g.call("ggml_get_next_tensor", g.ctx, t)
    return False


def _init_views(g: GraphBuilder) -> None:
    t = g.call("ggml_get_first_tensor", g.ctx)
    while t:
        if t.contents.view_src and not t.contents.data:
            g.call("ggml_backend_view_init", t)
        t = g.call("ggml_get_next_tensor", g.ctx, t)


def set_output(g: GraphBuilder, t: TensorP) -> None:
    """Flag ``t`` an output: the backend must write it, so it never fuses past it."""
    g.call("ggml_set_output", t)


def declined(lib: GgmlLib, t: TensorP, what: str) -> Unsupported:
    desc = (lib.ggml_op_desc(t) or b"?").decode()
    return Unsupported(f"the device's supports_op rejects {what} ({desc})")


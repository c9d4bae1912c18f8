"""A ggml backend device (``ggml:CPU``, ``ggml:CANN0``, ``ggml:CUDA0``...) behind the Device contract."""

from __future__ import annotations

import ctypes as C
import os
from typing import Any

import numpy as np

from device.base import (
    Capability,
    DeviceBytes,
    DeviceError,
    GraphRunResult,
    RawMemoryReader,
    RunResult,
    output_dtype,
)
from device.ggml import lib as ggml_lib
from device.ggml import trace
from device.ggml.graph import (
    Builder,
    GraphBuilder,
    GraphBuildError,
    InputTensor,
    builders,
    input_tensors,
    tensor_dtype,
)
from device.ggml.graph_runs import run_graph
from device.ggml.perf import PerfSettings, time_prepared
from device.ggml.prepared import PreparedGraph
from golden import dtypes
from golden.case import OpCase, TensorSpec
from golden.geometry import unpack
from golden.graphs.case import GraphCase


class GgmlDevice:
    """Runs one-op graphs on one ggml backend device.

    ``threads`` sets the CPU backend's thread count explicitly (results do not depend on it; one
    thread keeps tiny cases cheap and xdist workers from oversubscribing the cores).
    """

    def __init__(self, dev_name: str, lib_dir: str | None = None, threads: int = 1) -> None:
        self.lib = ggml_lib.load(lib_dir)
        self.name = f"ggml:{dev_name}"
        self.dev_name = dev_name
        self.dev = self.lib.ggml_backend_dev_by_name(dev_name.encode())
        if not self.dev:
            known = ", ".join(self.lib.device_names()) or "none"
            raise DeviceError(f"unknown ggml device {dev_name!r} in {self.lib.lib_dir} (devices: {known})")
        self.backend = self.lib.ggml_backend_dev_init(self.dev, None)
        if not self.backend:
            raise DeviceError(f"ggml device {dev_name} failed to initialise")
        self._builders = builders()
        reg = self.lib.ggml_backend_dev_backend_reg(self.dev)
        self.backend_name = self.lib.ggml_backend_reg_name(reg).decode() if reg else ""
        # set by the opener where the backend's memory can be read as stored (ggml:CANN*: through ACL)
        self.raw_reader: RawMemoryReader | None = None
        self._pending: tuple[OpCase, GraphBuilder, list[InputTensor], Any] | None = None  # see supports()
        self._set_threads(threads)

    @property
    def capabilities(self) -> frozenset[Capability]:
        caps = {Capability.TRANSFER, Capability.PERF, Capability.GRAPH}
        if self.backend_name == "CANN":
            caps.add(Capability.CANN_QUANT_LAYOUT)
        if self.raw_reader is not None:
            caps.add(Capability.RAW_MEMORY)
        return frozenset(caps)

    def _raw_inputs(self, tensors: list[InputTensor], sent: list[np.ndarray]) -> list[DeviceBytes | None]:
        """The allocation of each contiguous quantized input as stored on the device, read through
        ``raw_reader`` right after upload (the verdict compares it with what was sent)."""
        assert self.raw_reader is not None
        buft = self.lib.ggml_backend_get_default_buffer_type(self.backend)
        found: list[DeviceBytes | None] = []
        for t, raw in zip(tensors, sent, strict=True):
            if not dtypes.is_quantized(t.spec.dtype) or not t.spec.layout.is_contiguous:
                found.append(None)
                continue
            alloc = self.lib.ggml_backend_buft_get_alloc_size(buft, t.base)
            found.append(DeviceBytes(self.raw_reader(t.base.contents.data, alloc), raw.nbytes))
        return found

    def _set_threads(self, threads: int) -> None:
        reg = self.lib.ggml_backend_dev_backend_reg(self.dev)
        addr = self.lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_set_n_threads")
        if addr:
            trace.note_function_pointer_call(addr, "void (*)(ggml_backend_t, int)", (self.backend, threads))
            C.CFUNCTYPE(None, C.c_void_p, C.c_int)(addr)(self.backend, threads)

    def info(self) -> dict[str, Any]:
        return device_inventory(self.lib, self.dev) | {"spec": self.name}

    def builder_for(self, op: str) -> Builder:
        """The op's ggml constructor (``device/ggml/ops_*.py``)."""
        build = self._builders.get(op)
        if build is None:  # a gap in this harness, not the backend declining: an ERROR record
            raise GraphBuildError(f"harness error: device/ggml has no constructor for {op}")
        return build

    def _graph(self, case: OpCase) -> tuple[GraphBuilder, list[InputTensor], Any]:
        build = self.builder_for(case.op)
        g = GraphBuilder(self.lib, n_tensors=4 * len(case.inputs) + 16)
        try:
            inputs = input_tensors(g, case.inputs)
            out = build(g, [t.tensor for t in inputs], case)
            if not out:
                raise GraphBuildError(f"{case.op} constructor returned NULL")
        except BaseException:
            g.free()
            raise
        return g, inputs, out

    def supports(self, case: OpCase) -> bool | None:
        """The backend's ``supports_op`` on the case's graph. The graph is kept for a ``run`` of the same
        case right after (the worker's supports-then-run), so a case is built once."""
        self._drop_pending()
        g, tensors, out = self._graph(case)
        try:
            supported = bool(self.lib.ggml_backend_supports_op(self.backend, out))
        except BaseException:
            g.free()
            raise
        if supported:
            self._pending = (case, g, tensors, out)
        else:
            g.free()
        return supported

    def _drop_pending(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending[1].free()

    def _take_graph(self, case: OpCase) -> tuple[GraphBuilder, list[InputTensor], Any]:
        """The case's one-op graph: the one ``supports`` kept for it, else a fresh build."""
        pending, self._pending = self._pending, None
        if pending is not None and pending[0] is case:
            return pending[1], pending[2], pending[3]
        if pending is not None:
            pending[1].free()
        return self._graph(case)

    def prepare(self, case: OpCase) -> PreparedGraph:
        """The case's one-op graph ready to allocate on this backend (the caller frees it)."""
        g, tensors, out = self._take_graph(case)
        try:
            return PreparedGraph(self.lib, self.backend, self.name, g, tensors, [out])
        except BaseException:
            g.free()
            raise

    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        with self.prepare(case) as prepared:
            prepared.allocate()
            prepared.upload(inputs)
            raw_inputs = self._raw_inputs(prepared.inputs, prepared.sent) if self.raw_reader is not None else None
            elapsed = prepared.compute()
            out = prepared.outputs[0]
            # the contract's array type for the tensor's dtype (read_tensor gives float64 values)
            output = prepared.read(out, as_output=True).astype(output_dtype(tensor_dtype(out)), copy=False)
            backs, intact = prepared.inputs_back()
            # every byte read back as sent (padding included) says more than the values would: they
            # travel back only when some input changed, for the record's detail
            after = None if all(intact) else [unpack(b, t.spec) for b, t in zip(backs, prepared.inputs, strict=True)]
            extra = {"compute_s": elapsed, "input_bytes_intact": intact}
            return RunResult(output, after, extra, raw_inputs)

    def run_graph(self, case: GraphCase, inputs: list[np.ndarray]) -> GraphRunResult:
        """A graph case fused, with fusion blocked, and allocated by ggml's graph allocator
        (``device/ggml/graph_runs.py``)."""
        return run_graph(self, case, inputs)

    def transfer(
        self, spec: TensorSpec, raw: np.ndarray, writes: list[tuple[int, int]], reads: list[tuple[int, int]]
    ) -> dict[str, Any]:
        """Upload ``raw`` (the tensor's ggml bytes) in the given (offset, size) chunks through the
        backend's set_tensor, then read it back whole and in the given chunks through get_tensor.

        On CANN, quantized tensors go through the device layout transform on the way in and out, so
        a chunked write or an offset read exercises paths a whole-tensor copy never does."""
        lib = self.lib
        g = GraphBuilder(lib, 4)
        buffer = None
        try:
            t = g.new_tensor(spec.dtype, spec.ne)
            if spec.name:
                lib.ggml_set_name(t, spec.name.encode())
            buffer = lib.ggml_backend_alloc_ctx_tensors(g.ctx, self.backend)
            if not buffer:
                raise DeviceError(f"{self.name}: buffer allocation failed")
            nbytes = lib.ggml_nbytes(t)
            data = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
            if data.nbytes != nbytes:
                raise ValueError(f"transfer: {data.nbytes} bytes given for a tensor of {nbytes}")
            for offset, size in writes:
                lib.ggml_backend_tensor_set(t, data[offset:].ctypes.data, offset, size)
            whole = np.empty(nbytes, dtype=np.uint8)
            lib.ggml_backend_tensor_get(t, whole.ctypes.data, 0, nbytes)
            pieces = []
            for offset, size in reads:
                piece = np.empty(size, dtype=np.uint8)
                lib.ggml_backend_tensor_get(t, piece.ctypes.data, offset, size)
                pieces.append(piece)
            buft = lib.ggml_backend_get_default_buffer_type(self.backend)
            return {"whole": whole, "pieces": pieces, "nbytes": nbytes,
                    "alloc_size": lib.ggml_backend_buft_get_alloc_size(buft, t)}
        finally:
            if buffer:
                lib.ggml_backend_buffer_free(buffer)
            g.free()

    def time_case(self, case: OpCase, inputs: list[np.ndarray], settings: PerfSettings) -> dict[str, Any]:
        """Perf mode: warm, repeated, synchronised compute times of the case (``device/ggml/perf.py``)."""
        self._drop_pending()
        return time_prepared(self.prepare(case), inputs, settings)

    def close(self) -> None:
        self._drop_pending()
        if self.backend:
            self.lib.ggml_backend_free(self.backend)
            self.backend = None


def device_inventory(lib: ggml_lib.GgmlLib, dev: int | None) -> dict[str, Any]:
    free, total = C.c_size_t(0), C.c_size_t(0)
    lib.ggml_backend_dev_memory(dev, C.byref(free), C.byref(total))
    reg = lib.ggml_backend_dev_backend_reg(dev)
    return {
        "name": lib.ggml_backend_dev_name(dev).decode(),
        "description": (lib.ggml_backend_dev_description(dev) or b"").decode(errors="replace"),
        "backend": lib.ggml_backend_reg_name(reg).decode() if reg else "",
        "type": lib.dev_type_names.get(lib.ggml_backend_dev_type(dev), "?"),  # the enum differs by release
        "memory_free": free.value,
        "memory_total": total.value,
        "library_path": str(lib.lib_dir),
    } | lib.release_info()


def list_ggml_devices(lib_dir: str | None = None) -> list[dict[str, Any]]:
    lib = ggml_lib.load(lib_dir)
    return [device_inventory(lib, d) | {"spec": "ggml:" + lib.ggml_backend_dev_name(d).decode()} for d in lib.devices()]


def open_ggml_device(dev_name: str, options: dict[str, Any]) -> GgmlDevice:
    threads = int(options.get("threads") or os.environ.get("GGML_CONFORM_THREADS", "1"))
    return GgmlDevice(dev_name, options.get("ggml_lib"), threads=threads)

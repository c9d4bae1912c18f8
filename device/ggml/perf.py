"""Timing one case's compute on a ggml backend, for perf mode (``conform perf``).

The graph is built, allocated and its inputs uploaded once; then it is computed a few times
unmeasured (warm-up: caches, the backend's own graph caches and pools) and timed repeatedly, each
compute followed by ``ggml_backend_synchronize`` so an asynchronous backend's queue is drained
inside the measurement. The median of the timed runs is the figure; the count adapts so the timed
runs take about ``target_s`` (between ``min_repeats`` and ``max_repeats`` of them).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from device.base import DeviceError, Unsupported
from golden.case import OpCase
from golden.geometry import pack

if TYPE_CHECKING:
    from device.ggml.device import GgmlDevice

GGML_STATUS_SUCCESS = 0


@dataclass(frozen=True)
class PerfSettings:
    warmup: int = 2
    min_repeats: int = 5
    max_repeats: int = 200
    target_s: float = 0.5  # timed seconds aimed for per case


def time_case(device: GgmlDevice, case: OpCase, inputs: list[np.ndarray], settings: PerfSettings) -> dict[str, Any]:
    """Warm, repeated, synchronised compute times of ``case`` on ``device``: ``median_s``, ``min_s``,
    ``max_s``, ``mean_s`` (seconds), ``repeats`` timed and ``warmup`` untimed runs, and the output's
    ``output_bytes`` and ``output_elements``.
    Raises :class:`Unsupported` when the backend's supports_op declines the case."""
    lib = device.lib
    backend = device.backend
    g, tensors, out = device._graph(case)  # the same one-op graph the conformance run builds
    buffer = None
    try:
        if not lib.ggml_backend_supports_op(backend, out):
            raise Unsupported("the device's supports_op rejects this case")
        graph = lib.ggml_new_graph_custom(g.ctx, 64, False)
        lib.ggml_build_forward_expand(graph, out)
        buffer = lib.ggml_backend_alloc_ctx_tensors(g.ctx, backend)
        if not buffer:
            raise DeviceError(f"{device.name}: buffer allocation failed")
        for t, values in zip(tensors, inputs, strict=True):
            raw = pack(values, t.spec)
            lib.ggml_backend_tensor_set(t.base, raw.ctypes.data, 0, raw.nbytes)
        lib.ggml_backend_synchronize(backend)

        def once() -> float:
            start = time.perf_counter()
            status = lib.ggml_backend_graph_compute(backend, graph)
            lib.ggml_backend_synchronize(backend)
            elapsed = time.perf_counter() - start
            if status != GGML_STATUS_SUCCESS:
                raise DeviceError(f"{device.name}: graph compute returned status {status}")
            return elapsed

        for _ in range(settings.warmup):
            once()
        samples = [once()]
        wanted = int(settings.target_s / max(samples[0], 1e-9))
        for _ in range(max(settings.min_repeats, min(settings.max_repeats, wanted)) - 1):
            samples.append(once())
        elements = 1
        for n in out.contents.ne:
            elements *= int(n)
        return {"median_s": statistics.median(samples), "min_s": min(samples), "max_s": max(samples),
                "mean_s": statistics.fmean(samples), "repeats": len(samples), "warmup": settings.warmup,
                "output_bytes": int(lib.ggml_nbytes(out)), "output_elements": elements}
    finally:
        if buffer:
            lib.ggml_backend_buffer_free(buffer)
        g.free()

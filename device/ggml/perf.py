"""Timing one case's compute on a ggml backend, for perf mode (``conform perf``).

The graph is built, allocated and its inputs uploaded once; then it is computed a few times
unmeasured (warm-up: caches, the backend's own graph caches and pools) and timed repeatedly, each
compute followed by ``ggml_backend_synchronize`` so an asynchronous backend's queue is drained
inside the measurement. The median of the timed runs is the figure; the count adapts so the timed
runs take about ``target_s`` (between ``min_repeats`` and ``max_repeats`` of them).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np

from device.base import Unsupported
from device.ggml.prepared import PreparedGraph


@dataclass(frozen=True)
class PerfSettings:
    warmup: int = 2
    min_repeats: int = 5
    max_repeats: int = 200
    target_s: float = 0.5  # timed seconds aimed for per case


def time_prepared(prepared: PreparedGraph, inputs: list[np.ndarray], settings: PerfSettings) -> dict[str, Any]:
    """Warm, repeated, synchronised compute times of a prepared graph (the same one-op graph the
    conformance run builds; freed here): ``median_s``, ``min_s``, ``max_s``, ``mean_s`` (seconds),
    ``repeats`` timed and ``warmup`` untimed runs, and the output's ``output_bytes`` and
    ``output_elements``. Raises :class:`Unsupported` when the backend's supports_op declines it."""
    with prepared:
        out = prepared.outputs[-1]
        if prepared.supported([out]) is not None:
            raise Unsupported("the device's supports_op rejects this case")
        prepared.allocate()
        prepared.upload(inputs)
        prepared.lib.ggml_backend_synchronize(prepared.backend)
        for _ in range(settings.warmup):
            prepared.compute(synchronize=True)
        samples = [prepared.compute(synchronize=True)]
        wanted = int(settings.target_s / max(samples[0], 1e-9))
        for _ in range(max(settings.min_repeats, min(settings.max_repeats, wanted)) - 1):
            samples.append(prepared.compute(synchronize=True))
        elements = 1
        for n in out.contents.ne:
            elements *= int(n)
        return {"median_s": statistics.median(samples), "min_s": min(samples), "max_s": max(samples),
                "mean_s": statistics.fmean(samples), "repeats": len(samples), "warmup": settings.warmup,
                "output_bytes": int(prepared.lib.ggml_nbytes(out)), "output_elements": elements}

"""Per-case overhead of the ggml:CPU path, next to the raw ctypes floor.

Prints, for a 16-element F32 GELU_QUICK case and a 2 × 16k-element F32 ADD case:
  raw ctypes floor   ggml_backend_graph_compute on a graph built once (nothing per case but compute)
  in process         the worker's per-case work without the process boundary (device.serve.serve_run:
                     supports_op, then run: context + graph, allocate, upload, compute, read back,
                     the result checked against the device contract)
  worker round trip  the same through the device worker process, as the suite runs it
and the worker's ratio to in-process. The paths are timed in alternating rounds, so a machine
shared with other work slows each of them alike; medians over the rounds are printed (and the best
round, the figure least disturbed by other processes).
Run: python benchmarks/bench_case_overhead.py [--rounds 30] [--n 100]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from device.ggml.device import GgmlDevice  # noqa: E402
from device.ggml.graph import GraphBuilder, InputTensor, builders  # noqa: E402
from device.serve import serve_run  # noqa: E402
from device.worker import DeviceWorker  # noqa: E402
from golden.case import OpCase, TensorSpec  # noqa: E402


def per_call_us(fn: Callable[[], object], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def floor_us(device: GgmlDevice, case: OpCase, inputs: list[np.ndarray], n: int) -> Callable[[], float]:
    """A timer of compute alone: everything built, allocated and uploaded once."""
    lib = device.lib
    g = GraphBuilder(lib, 16)
    srcs = [InputTensor(g, spec, i) for i, spec in enumerate(case.inputs)]
    out = builders()[case.op](g, [s.tensor for s in srcs], case)
    graph = lib.ggml_new_graph_custom(g.ctx, 64, False)
    lib.ggml_build_forward_expand(graph, out)
    lib.ggml_backend_alloc_ctx_tensors(g.ctx, device.backend)
    for s, x in zip(srcs, inputs, strict=True):
        lib.ggml_backend_tensor_set(s.base, x.ctypes.data, 0, x.nbytes)
    return lambda: per_call_us(lambda: lib.ggml_backend_graph_compute(device.backend, graph), n)


def measure(name: str, case: OpCase, inputs: list[np.ndarray], device: GgmlDevice, worker: DeviceWorker,
            rounds: int, n: int) -> None:
    timers = {
        "raw ctypes compute floor": floor_us(device, case, inputs, n),
        "in process (serve_run)": lambda: per_call_us(lambda: serve_run(device, case, inputs), n),
        "worker round trip": lambda: per_call_us(lambda: worker.attempt(case, inputs), n),
    }
    reply = worker.attempt(case, inputs)
    assert reply.answered, reply.message
    seen: dict[str, list[float]] = {k: [] for k in timers}
    for _ in range(rounds):
        for key, timer in timers.items():
            seen[key].append(timer())
    print(f"\n{name}")
    print(f"{'path':<30}{'median µs':>11}{'best µs':>9}")
    for key, values in seen.items():
        print(f"{key:<30}{statistics.median(values):>11.1f}{min(values):>9.1f}")
    ratio = [w / d for w, d in zip(seen["worker round trip"], seen["in process (serve_run)"], strict=True)]
    print(f"worker / in process: {statistics.median(ratio):.2f}× (median of the rounds' ratios)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--n", type=int, default=100, help="calls per round and path")
    args = parser.parse_args()
    device = GgmlDevice("CPU", threads=1)
    worker = DeviceWorker("ggml:CPU", {"threads": 1})
    worker.start()
    try:
        small = OpCase("GELU_QUICK", (TensorSpec("f32", (16, 1, 1, 1)),))
        x = np.linspace(-4, 4, 16, dtype=np.float32).reshape(1, 1, 1, 16)
        measure("16-element F32 GELU_QUICK", small, [x], device, worker, args.rounds, args.n)
        ne = (4096, 4, 1, 1)
        large = OpCase("ADD", (TensorSpec("f32", ne), TensorSpec("f32", ne)))
        rng = np.random.default_rng(0)
        a, b = (rng.uniform(-1, 1, (1, 1, 4, 4096)).astype(np.float32) for _ in range(2))
        measure("2 × 16k-element F32 ADD", large, [a, b], device, worker, max(1, args.rounds // 3), max(1, args.n // 4))
    finally:
        worker.close()
        device.close()


if __name__ == "__main__":
    main()

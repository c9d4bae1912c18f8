"""Per-case overhead of the ggml:CPU path for tiny tensors, next to the raw ctypes floor.

Prints three figures for a 16-element F32 GELU_QUICK case:
  raw ctypes floor   ggml_backend_graph_compute on a graph built once (nothing per case but compute)
  device.run         our GgmlDevice.run: build context + graph, allocate, upload, compute, read back
  worker round trip  the same through the device worker process (pickling + pipe), as the suite runs it
Run: python benchmarks/bench_case_overhead.py [--n 2000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from device.ggml.device import GgmlDevice
from device.ggml.graph import GraphBuilder, InputTensor, builders
from device.worker import DeviceWorker
from golden.case import OpCase, TensorSpec


def per_call_us(fn, n: int) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    args = parser.parse_args()
    case = OpCase("GELU_QUICK", (TensorSpec("f32", (16, 1, 1, 1)),))
    x = np.linspace(-4, 4, 16, dtype=np.float32).reshape(1, 1, 1, 16)
    device = GgmlDevice("CPU", threads=1)
    lib = device.lib

    # floor: everything built and allocated once; the loop only computes
    g = GraphBuilder(lib, 16)
    src = InputTensor(g, case.inputs[0], 0)
    out = builders()["GELU_QUICK"](g, [src.tensor], case)
    graph = lib.ggml_new_graph_custom(g.ctx, 64, False)
    lib.ggml_build_forward_expand(graph, out)
    buf = lib.ggml_backend_alloc_ctx_tensors(g.ctx, device.backend)
    lib.ggml_backend_tensor_set(src.base, x.ctypes.data, 0, x.nbytes)
    floor = per_call_us(lambda: lib.ggml_backend_graph_compute(device.backend, graph), args.n)
    lib.ggml_backend_buffer_free(buf)
    g.free()

    direct = per_call_us(lambda: device.run(case, [x]), args.n)
    worker = DeviceWorker("ggml:CPU", {"threads": 1})
    worker.start()
    via_worker = per_call_us(lambda: worker.attempt(case, [x]), args.n)
    worker.close()
    device.close()
    print(f"{'path':<28}{'µs per case':>12}")
    print(f"{'raw ctypes compute floor':<28}{floor:>12.1f}")
    print(f"{'GgmlDevice.run (in process)':<28}{direct:>12.1f}")
    print(f"{'worker round trip':<28}{via_worker:>12.1f}")


if __name__ == "__main__":
    main()

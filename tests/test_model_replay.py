"""The golden's forward pass (conformance.model.GoldenReplay) keeps only the KV cache from one graph to the next.

A context shift runs its own graph inside the step's llama_decode, before the step's graph, in the same compute
buffer. For a quantized K cache llama.cpp converts each layer's K view to F32 there (a CPY whose output is named
``cache_k_l0 (view) (copy)``), ropes it and copies it back. The replay kept that F32 scratch as if it were the
cache (it went by the name), and laid it over the next graph's inputs where the allocator had put them (the
token positions): measured on b8121's libllama, q8_0 K, ``--ctx 8 --decode 3``: every node passed, but the
node-by-node logits NMSE was 0.229 (bar 0.92, so the run passed) where it is 3.5e-4 now."""

from __future__ import annotations

import numpy as np

from conformance.model import GoldenReplay
from device.llama.capture import CapturedNode, CapturedTensor

COMPUTE, KV = 1, 2  # the compute buffer and the KV cache's buffer


def _tensor(name: str, dtype: str, values: np.ndarray, address: int, buffer: int, op: str) -> CapturedTensor:
    arr = np.asarray(values, {"f32": np.float32, "f16": np.float16}[dtype])
    size = arr.itemsize * arr.size
    return CapturedTensor(name, dtype, (arr.size, 1, 1, 1), (arr.itemsize, size, size, size),
                          arr.view(np.uint8).copy(), address, buffer, op)


def test_a_shift_graphs_scratch_is_neither_the_cache_nor_the_next_graphs_input() -> None:
    cache = _tensor("cache_k_l0", "f16", np.arange(8) / 8, 0, KV, "NONE")
    view = _tensor("cache_k_l0 (view)", "f16", np.arange(8) / 8, 0, KV, "VIEW")
    cast = _tensor("cache_k_l0 (view) (copy)", "f32", np.arange(8) / 8, 0, COMPUTE, "CPY")  # the shift's scratch
    # the step's own graph: the host's input where the scratch was, and a node reading it
    positions = _tensor("leaf_5", "f32", np.full(8, 5.0), 0, COMPUTE, "NONE")
    total = _tensor("sum", "f32", np.full(8, 10.0), 64, COMPUTE, "ADD")
    replay = GoldenReplay()
    replay.advance([CapturedNode(0, 3, view.name, "VIEW", bytes(64), [cache], view),
                    CapturedNode(1, 3, cast.name, "CPY", bytes(64), [view], cast),
                    CapturedNode(2, 3, total.name, "ADD", bytes(64), [positions, positions], total)])
    assert not replay.gaps
    # the input as the host set it (5 + 5), not the scratch the golden wrote there in the graph before
    np.testing.assert_array_equal(replay.memory.read(total).values().ravel(), np.full(8, 10.0))
    assert replay.cache_buffers == {KV}
    # and the next step finds nothing of the scratch: only the cache persists
    replay.memory.new_step()
    assert not replay.memory.regions.get(COMPUTE)

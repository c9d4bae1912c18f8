"""The named model sizes benchmarks/bench_model.py asks for: the published models' dimensions, and
tensors of the shapes those dimensions give (timings are the benchmark's, never a test's)."""

from __future__ import annotations

import math

import pytest

from conformance.model_synthetic import SIZES, TINY, _arch_tensors


def test_tiny_is_the_test_model() -> None:
    assert SIZES["tiny"] == TINY


@pytest.mark.parametrize(("size", "dims", "layer_params"), [
    # 135M-class llama: q,o 576²; k,v 192×576 (3 KV heads of 64); gate, up, down 1536×576; two norms
    ("135m", (49152, 576, 9, 3, 1536, 30), 2 * 576 * 576 + 2 * 192 * 576 + 3 * 1536 * 576 + 2 * 576),
    # Llama-3.2-1B: q,o 2048²; k,v 512×2048 (8 KV heads of 64); gate, up, down 8192×2048; two norms
    ("1b", (128256, 2048, 32, 8, 8192, 16), 2 * 2048 * 2048 + 2 * 512 * 2048 + 3 * 8192 * 2048 + 2 * 2048),
])
def test_named_sizes_have_the_published_dimensions(size: str, dims: tuple[int, ...], layer_params: int) -> None:
    s = SIZES[size]
    assert (s.n_vocab, s.n_embd, s.n_head, s.n_head_kv, s.n_ff, s.n_layer) == dims
    assert s.head_dim == 64
    tensors = _arch_tensors("llama", s)
    assert tensors["attn_k"] == (s.head_dim * s.n_head_kv, s.n_embd)
    assert sum(math.prod(shape) for shape in tensors.values()) == layer_params

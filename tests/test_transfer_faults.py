"""The set/get round-trip check catches the seed's quantized-transfer bugs (B18, L1)."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.harness import CaseFailed, Harness
from golden import quant
from golden.case import TensorSpec


@pytest.fixture(scope="module")
def seed_like():
    h = Harness("tests.plugins.faulty:seed_like_quant_transfers", {}, timeout=60)
    yield h
    h.close()


@pytest.fixture(scope="module")
def cpu():
    h = Harness("ggml:CPU", {}, timeout=60)
    yield h
    h.close()


def q4_tensor() -> tuple[TensorSpec, np.ndarray]:
    values = np.random.default_rng(3).uniform(-2, 2, size=(4, 64)).astype(np.float32)
    return TensorSpec("q4_0", (64, 4, 1, 1)), quant.quantize(values, "q4_0")


def test_whole_tensor_copies_round_trip_on_the_seed_model(seed_like: Harness) -> None:
    spec, raw = q4_tensor()
    assert seed_like.check_transfer(spec, raw, [(0, raw.size)], [(0, raw.size)]).outcome == "pass"


def test_chunked_upload_is_caught(seed_like: Harness) -> None:
    spec, raw = q4_tensor()
    with pytest.raises(CaseFailed, match="whole read differs"):
        seed_like.check_transfer(spec, raw, [(0, 72), (72, 72)], [(0, raw.size)])


def test_offset_read_is_caught(seed_like: Harness) -> None:
    spec, raw = q4_tensor()
    with pytest.raises(CaseFailed, match="at offset 36 differs"):
        seed_like.check_transfer(spec, raw, [(0, raw.size)], [(36, 72)])


@pytest.mark.parametrize("dtype", ["f32", "q8_0"])
def test_cpu_backend_round_trips_chunks_and_offsets(cpu: Harness, dtype: str) -> None:
    values = np.random.default_rng(4).uniform(-2, 2, size=(3, 96)).astype(np.float32)
    raw = quant.quantize(values, dtype) if dtype == "q8_0" else values.view(np.uint8).reshape(-1)
    spec = TensorSpec(dtype, (96, 3, 1, 1))
    record = cpu.check_transfer(spec, raw, [(50, raw.size - 50), (0, 50)], [(7, 90), (raw.size - 1, 1)])
    assert record.outcome == "pass" and record.metrics["nbytes"] == raw.size

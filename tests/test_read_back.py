"""The ggml device's read-back (``device/ggml/prepared.py``, ``device/ggml/graph.py``): inputs
compared a chunk at a time, outputs read in their own array type, each the same answer as a
whole-buffer comparison and the float64 path give."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.data import as_stored
from conformance.inputs import make_inputs
from golden.case import parse_case_id

# 2^21 F32 elements padded: 8+ MiB, more than one comparison chunk
BIG = "ADD(type0=f32,ne0=[2048,1024,1,1],lay0=pad[1,1,0,0],type1=f32,ne1=[2048,1,1,1],dst=f32,data=uniform:3)"


@pytest.fixture(scope="module")
def device():  # type: ignore[no-untyped-def]
    from device.ggml.device import GgmlDevice

    try:
        dev = GgmlDevice("CPU", None)
    except Exception as exc:  # noqa: BLE001 - no ggml library on this host
        pytest.skip(f"ggml:CPU cannot be opened here: {exc}")
    yield dev
    dev.close()


def _inputs(case_id: str) -> tuple[object, list[np.ndarray]]:
    case = parse_case_id(case_id)
    return case, [as_stored(x, t.dtype) for x, t in zip(make_inputs(case), case.inputs, strict=True)]


@pytest.mark.parametrize("where", ["first chunk", "past the first chunk", "last byte"])
def test_a_changed_input_byte_anywhere_is_found_and_read_back_whole(device, where: str) -> None:  # type: ignore[no-untyped-def]
    from device.ggml import prepared as prepared_module

    case, inputs = _inputs(BIG)
    with device.prepare(case) as prepared:
        prepared.allocate()
        prepared.upload(inputs)
        sent = prepared.sent[0]
        assert sent.nbytes > 2 * prepared_module._COMPARE_CHUNK
        offset = {"first chunk": 10, "past the first chunk": prepared_module._COMPARE_CHUNK + 5,
                  "last byte": sent.nbytes - 1}[where]
        changed = np.array([sent[offset] ^ 0x5A], dtype=np.uint8)
        device.lib.ggml_backend_tensor_set(prepared.inputs[0].base, changed.ctypes.data, offset, 1)
        backs, intact = prepared.inputs_back()
    assert intact == [False, True]
    expected = sent.copy()
    expected[offset] = changed[0]
    assert np.array_equal(backs[0], expected)
    assert np.array_equal(backs[1], prepared.sent[1])


def test_an_untouched_run_reads_back_intact_and_its_output_is_the_float64_paths(device) -> None:  # type: ignore[no-untyped-def]
    from device.ggml.graph import read_tensor

    case, inputs = _inputs(BIG)
    with device.prepare(case) as prepared:
        prepared.allocate()
        prepared.upload(inputs)
        prepared.compute()
        out = prepared.outputs[0]
        direct = prepared.read(out, as_output=True)
        through_float64 = read_tensor(device.lib, out).astype(np.float32)
        _, intact = prepared.inputs_back()
    assert intact == [True, True]
    assert direct.dtype == np.float32 and direct.shape == through_float64.shape
    assert np.array_equal(direct.view(np.uint32), through_float64.view(np.uint32))
    assert np.array_equal(direct, inputs[0] + inputs[1])

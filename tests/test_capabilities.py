"""Devices declare capabilities; the harness relies on them instead of matching device names.

The raw-memory path: a device with RAW_MEMORY returns the bytes of its quantized inputs as stored,
and the verdict compares them with what it must store (``to_cann`` of the blocks and zeroed padding
with CANN_QUANT_LAYOUT). The ggml device gets its reader from the opener (the ACL side for
ggml:CANN*); here a host reader on ggml's CPU buffers shows the hook returns exactly the stored bytes.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from conformance.data import as_stored
from conformance.harness import CaseFailed, Harness
from conformance.inputs import make_inputs
from conformance.verdict.raw import judge_raw_inputs
from device.base import Capability, capabilities_of
from device.golden_device import GoldenDevice
from device.registry import open_device
from golden import quant
from golden.case import OpCase, TensorSpec

PLUGINS = "tests.plugins.faulty"
GET_ROWS_Q4 = OpCase("GET_ROWS", (TensorSpec("q4_0", (64, 5, 1, 1)), TensorSpec("i32", (3, 1, 1, 1))),
                     data_seed=3)


def stored_inputs(case: OpCase) -> list[np.ndarray]:
    from conformance import cases

    cases.load_all()  # the GET_ROWS index maker
    return [as_stored(x, t.dtype) for x, t in zip(make_inputs(case), case.inputs, strict=True)]


def test_absent_capabilities_are_none() -> None:
    class Bare:
        name = "bare"

    assert capabilities_of(Bare()) == frozenset()
    assert capabilities_of(GoldenDevice) == {Capability.IN_PROCESS, Capability.GRAPH}


def test_ggml_cpu_declares_transfer_perf_and_graph_only() -> None:
    cpu = open_device("ggml:CPU", {})
    try:
        # not CANN's layout, no raw reader
        assert capabilities_of(cpu) == {Capability.TRANSFER, Capability.PERF, Capability.GRAPH}
    finally:
        cpu.close()


def test_the_ggml_raw_hook_returns_the_stored_bytes() -> None:
    cpu = open_device("ggml:CPU", {})
    try:
        # the CPU backend's buffers are host memory: read them where they are
        cpu.raw_reader = lambda address, size: np.frombuffer(ctypes.string_at(address, size), np.uint8).copy()
        assert Capability.RAW_MEMORY in capabilities_of(cpu)
        inputs = stored_inputs(GET_ROWS_Q4)
        result = cpu.run(GET_ROWS_Q4, inputs)
    finally:
        cpu.close()
    assert result.raw_inputs is not None and result.raw_inputs[1] is None  # i32 indices are not read
    stored = result.raw_inputs[0]
    assert stored is not None and np.array_equal(stored.data, inputs[0].reshape(-1))
    assert judge_raw_inputs(GET_ROWS_Q4, inputs, result.raw_inputs, cann_layout=False).failures == []
    # judged as ggml-cann's layout, ggml's own block order is wrong
    assert judge_raw_inputs(GET_ROWS_Q4, inputs, result.raw_inputs, cann_layout=True).failures == ["src0_layout"]


def test_the_harness_judges_device_bytes_through_the_worker() -> None:
    good = Harness(f"{PLUGINS}:cann_layout_model", {}, timeout=60, keep_artefacts=False)
    try:
        assert good.capabilities == {Capability.RAW_MEMORY, Capability.CANN_QUANT_LAYOUT}
        record = good.check(GET_ROWS_Q4)
        assert record is not None  # outside a Hypothesis test every case runs
        raw = record.extra["cann_raw"] if record.extra else {}
        assert raw["src0_layout"]["ok"] and raw["src0_padding"]["ok"]
        assert raw["src0_padding"]["alloc_size"] == quant.cann_alloc_size("q4_0", (64, 5, 1, 1))
    finally:
        good.close()


@pytest.mark.parametrize(("factory", "failure"), [("stores_ggml_blocks", "src0_layout"),
                                                  ("dirty_padding", "src0_padding")])
def test_wrong_device_bytes_fail_the_case(factory: str, failure: str) -> None:
    h = Harness(f"{PLUGINS}:{factory}", {}, timeout=60, keep_artefacts=False)
    try:
        with pytest.raises(CaseFailed, match=f"device memory check failed: {failure}"):
            h.check(GET_ROWS_Q4)
    finally:
        h.close()


def test_set_get_alloc_size_is_checked_only_where_the_layout_is_cann() -> None:
    """check_transfer's allocation rule is ggml-cann's: a device that declares no CANN layout is not held to it."""
    from conformance.set_get import SetGetCase

    case = SetGetCase(TensorSpec("q4_0", (64, 2, 1, 1)), ((0, 72),), ((0, 72),), 5)
    h = Harness("ggml:CPU", {}, timeout=60, keep_artefacts=False)
    try:
        record = h.check_set_get(case)
        assert record is not None
        assert record.metrics is not None and record.metrics["alloc_size"] == 72  # no padding on the CPU
    finally:
        h.close()

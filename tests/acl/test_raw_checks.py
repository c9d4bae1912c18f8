"""Raw device reads for the ggml:CANN device, on the test double; the verdict on what they read."""

from __future__ import annotations

import numpy as np
from fake_acl_support import FakeAcl

from conformance.verdict.raw import judge_raw_inputs
from device.acl.raw_checks import (
    device_reader,
    loaded_library_dir,
    memory_snapshot,
    open_process_runtime,
    read_device_bytes,
)
from device.base import DeviceBytes
from golden import quant
from golden.case import OpCase, TensorSpec


def test_read_device_bytes_sets_the_device_for_the_read(fake: FakeAcl) -> None:
    rt = fake.runtime
    with rt.device_buffer(40) as address:
        rt.upload(address, bytes(range(40)))
        fake.control.clear_log()
        data = read_device_bytes(rt, address + 8, 16, device_index=1)
    assert data.dtype == np.uint8 and data.tolist() == list(range(8, 24))
    names = fake.control.names()
    assert names[:3] == ["aclrtSetDevice", "aclrtMemcpy", "aclrtResetDevice"]
    assert fake.control.calls()[1].args.endswith("count=16, kind=2")
    assert read_device_bytes(rt, 0, 0).size == 0


def test_device_reader_reads_ggml_cann_bytes_for_the_verdict(fake: FakeAcl) -> None:
    """The reader the registry gives ggml:CANN devices: bytes as stored, judged by the verdict."""
    blocks = quant.quantize(np.random.default_rng(2).uniform(-3, 3, (2, 64)).astype(np.float32), "q8_0")
    case = OpCase("GET_ROWS", (TensorSpec("q8_0", (64, 2, 1, 1)), TensorSpec("i32", (1, 1, 1, 1))))
    rt = fake.runtime
    read = device_reader(1)
    with rt.device_buffer(blocks.size + 40) as address:  # the double fills fresh memory with 0xA5
        rt.upload(address, quant.to_cann(blocks, "q8_0").tobytes())
        stored = DeviceBytes(read(address, blocks.size + 40), blocks.size)
        dirty = judge_raw_inputs(case, [blocks, np.zeros(1, np.int32)], [stored, None], cann_layout=True)
        assert dirty.failures == ["src0_padding"] and dirty.checks["src0_layout"]["ok"]
        assert dirty.checks["src0_padding"]["mismatched"] == 40
        assert dirty.checks["src0_padding"]["first_offsets"][:2] == [blocks.size, blocks.size + 1]
        rt.memset(address + blocks.size, 40, 0, 40)
        rt.upload(address, blocks.tobytes())  # ggml's own layout, where ggml-cann's belongs
        stored = DeviceBytes(read(address, blocks.size + 40), blocks.size)
        wrong = judge_raw_inputs(case, [blocks, np.zeros(1, np.int32)], [stored, None], cann_layout=True)
    assert wrong.failures == ["src0_layout"] and wrong.checks["src0_padding"]["alloc_size"] == blocks.size + 40
    assert fake.control.device_refs(1) == 0


def test_memory_snapshot(fake: FakeAcl) -> None:
    rt = fake.runtime
    before = memory_snapshot(rt, 0)
    with rt.device_buffer(4000):
        during = memory_snapshot(rt, 0)
    assert during.used_since(before) == 4000 + 32  # a multiple of 32 already, +32 like ACL
    assert memory_snapshot(rt, 0).used_since(before) == 0
    assert before.as_record() == {"device": 0, "free": 64 << 20, "total": 64 << 20}
    assert fake.control.device_refs(0) == 0


def test_the_runtime_already_in_the_process_is_reused(fake: FakeAcl, fake_dir, tmp_path) -> None:
    assert loaded_library_dir() == fake_dir  # the fixture loaded the double
    assert loaded_library_dir("libnot-there.so") is None
    assert loaded_library_dir(maps=tmp_path / "missing") is None
    runtime = open_process_runtime(environ={"ASCEND_TOOLKIT_HOME": str(tmp_path)})
    assert runtime.libraries.paths["runtime"] == str(fake_dir / "libascendcl.so")

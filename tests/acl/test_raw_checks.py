"""Raw device reads for the ggml:CANN device, on the test double."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
from fake_acl_support import FakeAcl

from device.acl.raw_checks import (
    check_padding_zeroed,
    compare_with_cann_layout,
    loaded_library_dir,
    memory_snapshot,
    open_process_runtime,
    read_device_bytes,
)


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


def test_padding_check(fake: FakeAcl) -> None:
    rt = fake.runtime
    with rt.device_buffer(100) as address:  # the double fills fresh memory with 0xA5
        rt.upload(address, b"\x01" * 64)
        dirty = check_padding_zeroed(rt, address, 64, 100)
        assert not dirty.ok and dirty.mismatched == 36 and dirty.first_offsets[:2] == (64, 65)
        rt.memset(address + 64, 36, 0, 36)
        assert check_padding_zeroed(rt, address, 64, 100).ok
        rt.memset(address + 90, 1, 7, 1)
        late = check_padding_zeroed(rt, address, 64, 100)
        assert late.as_record() == {"ok": False, "expected_size": 36, "mismatched": 1, "first_offsets": [90]}
    with pytest.raises(ValueError, match="alloc_size 10 < data_size 20"):
        check_padding_zeroed(rt, 0, 20, 10)


def test_compare_with_cann_layout_uses_golden_to_cann(fake: FakeAcl, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}

    def to_cann(raw: np.ndarray, qtype: str) -> np.ndarray:  # stand-in for golden.quant.to_cann
        seen["args"] = (raw.tobytes(), qtype)
        return raw[::-1].copy()

    monkeypatch.setitem(sys.modules, "golden.quant", types.SimpleNamespace(to_cann=to_cann))
    raw = np.arange(34, dtype=np.uint8)  # one Q8_0 block's bytes
    rt = fake.runtime
    with rt.device_buffer(64) as address:
        rt.upload(address, raw[::-1].tobytes())
        assert compare_with_cann_layout(rt, address, raw, "q8_0").ok
        assert seen["args"] == (raw.tobytes(), "q8_0")
        rt.upload(address, raw.tobytes())
        wrong = compare_with_cann_layout(rt, address, raw, "q8_0", device_index=0)
    assert wrong.mismatched == 34 and wrong.expected_size == 34


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

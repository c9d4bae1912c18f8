"""The libascendcl bindings driven through the test double: arguments, results, errors, cleanup."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from fake_acl_support import FakeAcl, compile_fake

from device.acl.errors import AclError
from device.acl.loader import AclLibraries
from device.acl.runtime import (
    DDR_MEM,
    HBM_MEM,
    MEMCPY_DEVICE_TO_DEVICE,
    MEMCPY_DEVICE_TO_HOST,
    MEMCPY_HOST_TO_DEVICE,
    MEMCPY_HOST_TO_HOST,
    AclRuntime,
)


def test_init_and_finalize(fake: FakeAcl) -> None:
    rt, ctl = fake.runtime, fake.control
    assert rt.init() is True
    assert rt.init() is False  # ACL_ERROR_REPEAT_INITIALIZE: someone (ggml) initialised first
    rt.finalize()
    assert [(c.name, c.args, c.result) for c in ctl.calls()] == [
        ("aclInit", "configPath=NULL", "0"),
        ("aclInit", "configPath=NULL", "100002"),
        ("aclFinalize", "", "0"),
    ]


def test_init_passes_the_config_path(fake: FakeAcl) -> None:
    fake.runtime.init("/tmp/acl.json")
    assert fake.control.calls()[0].args == "configPath=/tmp/acl.json"


def test_initialized_finalizes_only_what_it_initialised(fake: FakeAcl) -> None:
    rt, ctl = fake.runtime, fake.control
    with rt.initialized():
        with rt.initialized():  # nested: already initialised, so no finalize on this exit
            pass
        assert ctl.names() == ["aclInit", "aclInit"]
    assert ctl.names() == ["aclInit", "aclInit", "aclFinalize"]


def test_initialized_finalizes_on_error(fake: FakeAcl) -> None:
    with pytest.raises(RuntimeError), fake.runtime.initialized():
        raise RuntimeError("body failed")
    assert fake.control.names()[-1] == "aclFinalize"


def test_failed_init_raises_with_code_name_and_message(fake: FakeAcl) -> None:
    fake.control.fail("aclInit", 100003)
    with pytest.raises(AclError) as info:
        fake.runtime.init()
    error = info.value
    assert (error.function, error.code, error.code_name) == ("aclInit", 100003, "ACL_ERROR_INVALID_FILE")
    assert error.message == "fake: aclInit failed as instructed (code 100003)"
    assert str(error) == f"aclInit failed with 100003 (ACL_ERROR_INVALID_FILE): {error.message}"
    # the message came from aclGetRecentErrMsg, called right after the failure
    assert [c.name for c in fake.control.calls(include_err_msg=True)] == ["aclInit", "aclGetRecentErrMsg"]


def test_recent_error_message_empty_when_none(fake: FakeAcl) -> None:
    assert fake.runtime.recent_error_message() == ""


def test_device_count_and_selection(fake: FakeAcl) -> None:
    rt, ctl = fake.runtime, fake.control
    ctl.lib.fake_set_device_count(3)
    assert rt.device_count() == 3
    rt.set_device(2)
    rt.reset_device(2)
    assert [(c.name, c.args) for c in ctl.calls()][1:] == [("aclrtSetDevice", "deviceId=2"),
                                                          ("aclrtResetDevice", "deviceId=2")]
    with pytest.raises(AclError) as info:
        rt.set_device(3)
    assert info.value.code_name == "ACL_ERROR_RT_INVALID_DEVICEID"
    assert "no device 3" in info.value.message


def test_using_device_resets_also_on_error(fake: FakeAcl) -> None:
    with pytest.raises(ValueError), fake.runtime.using_device(1):
        assert fake.control.device_refs(1) == 1
        raise ValueError
    assert fake.control.device_refs(1) == 0
    assert fake.control.names() == ["aclrtSetDevice", "aclrtResetDevice"]


def test_soc_name(fake: FakeAcl) -> None:
    fake.control.lib.fake_set_soc_name(b"Ascend310P3")
    assert fake.runtime.soc_name() == "Ascend310P3"
    fake.control.lib.fake_set_soc_name(b"")  # NULL from the runtime
    assert fake.runtime.soc_name() is None


def test_mem_info_passes_attr_and_reads_both_sizes(fake: FakeAcl) -> None:
    rt = fake.runtime
    with rt.using_device(0):
        before = rt.mem_info(HBM_MEM)
        with rt.device_buffer(1000):
            during = rt.mem_info(DDR_MEM)
    assert before.total == during.total == 64 << 20
    assert before.free - during.free == 1056  # 1000 rounded to 32, +32 (ACL's rule, as the fake does)
    assert [c.args for c in fake.control.calls() if c.name == "aclrtGetMemInfo"] == ["attr=1", "attr=0"]


def test_mem_info_without_device_is_an_error(fake: FakeAcl) -> None:
    with pytest.raises(AclError) as info:
        fake.runtime.mem_info()
    assert info.value.code_name == "ACL_ERROR_RT_CONTEXT_NULL"


def test_malloc_free_and_policy(fake: FakeAcl) -> None:
    rt = fake.runtime
    address = rt.malloc(100, policy=2)
    assert address % 64 == 0
    rt.free(address)
    calls = fake.control.calls()
    assert calls[0].name == "aclrtMalloc" and calls[0].args == "size=100, policy=2"
    assert calls[1].args == f"devPtr={hex(address)}"


def test_malloc_failure(fake: FakeAcl) -> None:
    fake.control.fail("aclrtMalloc", 207001)
    with pytest.raises(AclError, match=r"aclrtMalloc failed with 207001 \(ACL_ERROR_RT_MEMORY_ALLOCATION\)"):
        fake.runtime.malloc(16)


def test_device_buffer_is_freed_when_the_body_raises(fake: FakeAcl) -> None:
    with pytest.raises(KeyError), fake.runtime.device_buffer(64):
        raise KeyError
    assert fake.control.names() == ["aclrtMalloc", "aclrtFree"]


def test_free_of_unknown_pointer(fake: FakeAcl) -> None:
    with pytest.raises(AclError) as info:
        fake.runtime.free(0x1000)
    assert info.value.code_name == "ACL_ERROR_RT_MEMORY_FREE"


def test_memcpy_all_four_kinds(fake: FakeAcl) -> None:
    rt = fake.runtime
    data = np.arange(16, dtype=np.uint8)
    back = np.zeros(16, dtype=np.uint8)
    host_copy = np.zeros(16, dtype=np.uint8)
    with rt.device_buffer(16) as first, rt.device_buffer(16) as second:
        rt.memcpy(first, 16, data.ctypes.data, 16, MEMCPY_HOST_TO_DEVICE)
        rt.memcpy(second, 16, first, 16, MEMCPY_DEVICE_TO_DEVICE)
        rt.memcpy(back.ctypes.data, 16, second, 16, MEMCPY_DEVICE_TO_HOST)
        rt.memcpy(host_copy.ctypes.data, 16, back.ctypes.data, 16, MEMCPY_HOST_TO_HOST)
    assert np.array_equal(host_copy, data)
    kinds = [c.args.rsplit("kind=", 1)[1] for c in fake.control.calls() if c.name == "aclrtMemcpy"]
    assert kinds == ["1", "3", "2", "0"]


def test_memcpy_wrong_kind_and_overflow_are_errors(fake: FakeAcl) -> None:
    rt = fake.runtime
    host = np.zeros(8, dtype=np.uint8)
    with rt.device_buffer(8) as address:
        with pytest.raises(AclError, match="does not match dst host / src device"):
            rt.memcpy(host.ctypes.data, 8, address, 8, MEMCPY_HOST_TO_DEVICE)
        with pytest.raises(AclError, match="count 9 > destMax 8"):
            rt.memcpy(address, 8, host.ctypes.data, 9, MEMCPY_HOST_TO_DEVICE)


def test_upload_download_and_memset(fake: FakeAcl) -> None:
    rt = fake.runtime
    with rt.device_buffer(8) as address:
        rt.upload(address, bytes(range(8)))
        rt.memset(address, 8, 0x7F, 3)
        assert rt.download(address, 8) == bytes([0x7F] * 3 + list(range(3, 8)))
    memset = [c for c in fake.control.calls() if c.name == "aclrtMemset"][0]
    assert memset.args.endswith("maxCount=8, value=127, count=3")


def test_streams(fake: FakeAcl) -> None:
    rt = fake.runtime
    stream = rt.create_stream()
    rt.synchronize_stream(stream)
    rt.destroy_stream(stream)
    with pytest.raises(AclError) as info:
        rt.synchronize_stream(stream)
    assert info.value.code_name == "ACL_ERROR_RT_INVALID_HANDLE"
    names = fake.control.names()
    assert names == ["aclrtCreateStream", "aclrtSynchronizeStream", "aclrtDestroyStream",
                     "aclrtSynchronizeStream"]
    assert fake.control.calls()[1].args == f"stream={hex(stream)}"


def test_stream_context_destroys_on_error(fake: FakeAcl) -> None:
    with pytest.raises(OSError), fake.runtime.stream():
        raise OSError
    assert fake.control.names() == ["aclrtCreateStream", "aclrtDestroyStream"]


def test_stream_create_failure(fake: FakeAcl) -> None:
    fake.control.fail("aclrtCreateStream", 207005)
    with pytest.raises(AclError, match="ACL_ERROR_RT_RESOURCE_ALLOC_FAIL"), fake.runtime.stream():
        pass


def test_cann_version_prefers_the_string_api(fake: FakeAcl) -> None:
    fake.control.lib.fake_set_version(b"8.5.0.alpha001")
    assert fake.runtime.cann_version() == "8.5.0.alpha001"
    assert [(c.name, c.args) for c in fake.control.calls()] == [("aclsysGetVersionStr", "pkgName=runtime")]


def test_cann_version_falls_back_to_the_struct_api(fake: FakeAcl) -> None:
    fake.control.lib.fake_set_version(b"8.0.RC2")
    fake.control.fail("aclsysGetVersionStr", 100003)
    assert fake.runtime.cann_version() == "8.0.RC2"
    assert [(c.name, c.args) for c in fake.control.calls()][-1] == ("aclsysGetCANNVersion", "name=0")
    fake.control.fail("aclsysGetVersionStr", 100003)
    fake.control.fail("aclsysGetCANNVersion", 100003)
    assert fake.runtime.cann_version() is None


def test_struct_layout_matches_the_c_side(fake: FakeAcl) -> None:
    from device.acl.prototypes import AclCANNPackageVersion

    assert fake.control.lib.fake_sizeof_package_version() == ctypes.sizeof(AclCANNPackageVersion)
    version = AclCANNPackageVersion()
    function = fake.libraries.runtime.aclsysGetCANNVersion
    function.argtypes = [ctypes.c_int, ctypes.POINTER(AclCANNPackageVersion)]
    assert function(0, ctypes.byref(version)) == 0
    assert version.majorVersion == b"major-of-8.0.RC2" and version.reserved == b"reserved"


def test_older_runtime_without_the_string_api(tmp_path) -> None:
    directory = compile_fake(tmp_path / "lib64", "FAKE_NO_VERSION_STR", parts=(
        ("FAKE_PART_RUNTIME", "libascendcl.so", ()),))
    # RTLD_LOCAL: this second build must not capture the main fake's cross-library calls
    library = ctypes.CDLL(str(directory / "libascendcl.so"), mode=ctypes.RTLD_LOCAL)
    runtime = AclRuntime(AclLibraries(runtime=library, nnopbase=None))
    assert not runtime.has("aclsysGetVersionStr") and runtime.has("aclsysGetCANNVersion")
    assert runtime.cann_version() == "8.0.RC2"

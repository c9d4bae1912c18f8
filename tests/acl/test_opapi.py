"""aclnn descriptors and the generic two-phase call, through the test double."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import numpy as np
import pytest
from fake_acl_support import FakeAcl

from device.acl.errors import AclError, AclLibraryNotFound
from device.acl.opapi import ACL_BOOL, ACL_FLOAT, ACL_FLOAT16, ACL_INT32, ACL_INT64
from device.acl.prototypes import op_names


def test_create_tensor_passes_dims_strides_offset_and_storage(fake: FakeAcl) -> None:
    with fake.runtime.device_buffer(256) as data:
        with fake.opapi.tensor([2, 3], ACL_FLOAT16, [8, 2], 5, [21], data):
            pass
    create, destroy = [c for c in fake.control.calls() if "Tensor" in c.name]
    assert create.args == (
        "viewDims=[2,3], dataType=1, stride=[8,2], offset=5, format=2, storageDims=[21], "
        f"tensorData={hex(data)}"
    )
    assert destroy.name == "aclDestroyTensor" and destroy.args == create.result


def test_create_tensor_null_is_an_error_with_the_runtime_message(fake: FakeAcl) -> None:
    with fake.runtime.device_buffer(64) as data:
        with pytest.raises(AclError) as info:
            fake.opapi.create_tensor([4, 4], ACL_FLOAT, [4, 1], 0, [8], data)  # view beyond storage
    assert info.value.code is None and info.value.code_name == "NULL handle"
    assert "view reaches element 15 of storage 8" in info.value.message
    with pytest.raises(ValueError, match="2 view dims but 1 strides"):
        fake.opapi.create_tensor([2, 2], ACL_FLOAT, [1], 0, [4], 64)


def test_destroy_failure_raises_after_the_body(fake: FakeAcl) -> None:
    fake.control.fail("aclDestroyScalar", 161002)
    with pytest.raises(AclError, match=r"aclDestroyScalar failed with 161002 \(ACLNN_ERR_PARAM_INVALID\)"):
        with fake.opapi.scalar(1.0):
            pass
    fake.control.lib.fake_count(b"descriptor", -1)  # the fake kept the scalar it refused to destroy


@pytest.mark.parametrize(
    ("value", "data_type", "logged"),
    [(1.5, ACL_FLOAT, "1.5"), (-7, ACL_INT32, "-7"), (2**40, ACL_INT64, "1.09951163e+12"),
     (True, ACL_BOOL, "1")],
)
def test_scalars(fake: FakeAcl, value: float, data_type: int, logged: str) -> None:
    with fake.opapi.scalar(value, data_type):
        pass
    create, destroy = fake.control.calls()
    assert create.args == f"value={logged}, dataType={data_type}"
    assert destroy.name == "aclDestroyScalar"


def test_scalar_of_unsupported_type(fake: FakeAcl) -> None:
    with pytest.raises(ValueError, match="no host scalar type"):
        fake.opapi.create_scalar(1.0, ACL_FLOAT16)


def test_arrays(fake: FakeAcl) -> None:
    with fake.opapi.int_array([3, -1, 2**40]), fake.opapi.float_array([0.5, 2.0]), \
            fake.opapi.bool_array([True, False, True]):
        pass
    calls = {c.name: c for c in fake.control.calls()}
    assert calls["aclCreateIntArray"].args == "value=[3,-1,1099511627776], size=3"
    assert calls["aclCreateFloatArray"].args == "value=[0.5,2], size=2"
    assert calls["aclCreateBoolArray"].args == "value=[1,0,1], size=3"  # one byte per bool
    assert {"aclDestroyIntArray", "aclDestroyFloatArray", "aclDestroyBoolArray"} <= set(calls)


def test_array_creation_failure(fake: FakeAcl) -> None:
    fake.control.fail("aclCreateIntArray", 0)
    with pytest.raises(AclError, match="aclCreateIntArray returned NULL"), fake.opapi.int_array([1]):
        pass


class _Vectors:
    """Three 6-element f32 device vectors and a stream, for the two-phase tests."""

    def __init__(self, fake: FakeAcl, scope) -> None:
        rt, op = fake.runtime, fake.opapi
        self.stream = scope.enter_context(rt.stream())
        self.addresses = [scope.enter_context(rt.device_buffer(24)) for _ in range(3)]
        rt.upload(self.addresses[0], np.arange(6, dtype=np.float32).tobytes())
        rt.upload(self.addresses[1], np.full(6, 2, dtype=np.float32).tobytes())
        self.tensors = [scope.enter_context(op.tensor([2, 3], ACL_FLOAT, [3, 1], 0, [6], a))
                        for a in self.addresses]

    def result(self, fake: FakeAcl) -> np.ndarray:
        return np.frombuffer(fake.runtime.download(self.addresses[2], 24), dtype=np.float32)


@pytest.fixture
def vectors(fake: FakeAcl) -> Iterator[_Vectors]:
    with ExitStack() as scope:
        yield _Vectors(fake, scope)


def test_two_phase_call_order_and_workspace(fake: FakeAcl, vectors: _Vectors) -> None:
    fake.control.lib.fake_set_workspace_size(4096)
    fake.control.clear_log()
    a, b, out = vectors.tensors
    assert fake.opapi.call("aclnnMul", a, b, out, stream=vectors.stream) == 4096
    calls = fake.control.calls()
    assert np.array_equal(vectors.result(fake), np.arange(6) * 2)
    assert [c.name for c in calls] == ["aclnnMulGetWorkspaceSize", "aclrtMalloc", "aclnnMul",
                                       "aclrtSynchronizeStream", "aclrtFree"]
    workspace = calls[1].rest.split("ptr=")[1]
    assert calls[1].args.startswith("size=4096")
    assert calls[2].args.startswith(f"workspace={workspace}, workspaceSize=4096, executor=0x")
    assert calls[2].args.endswith(f"stream={hex(vectors.stream)}")
    assert calls[4].args == f"devPtr={workspace}"


def test_two_phase_without_workspace_passes_null(fake: FakeAcl, vectors: _Vectors) -> None:
    fake.control.lib.fake_set_workspace_size(0)
    fake.control.clear_log()
    a, b, out = vectors.tensors
    fake.opapi.call("aclnnDiv", a, b, out, stream=vectors.stream)
    calls = fake.control.calls()
    assert [c.name for c in calls] == ["aclnnDivGetWorkspaceSize", "aclnnDiv", "aclrtSynchronizeStream"]
    assert calls[1].args.startswith("workspace=(nil), workspaceSize=0")


def test_first_phase_failure_allocates_nothing(fake: FakeAcl, vectors: _Vectors) -> None:
    fake.control.clear_log()
    fake.control.fail("aclnnMulGetWorkspaceSize", 561003)
    a, b, out = vectors.tensors
    with pytest.raises(AclError) as info:
        fake.opapi.call("aclnnMul", a, b, out, stream=vectors.stream)
    assert info.value.function == "aclnnMulGetWorkspaceSize"
    assert info.value.code_name == "ACLNN_ERR_INNER_FIND_KERNEL_ERROR"
    assert fake.control.names() == ["aclnnMulGetWorkspaceSize"]


def test_second_phase_failure_frees_the_workspace(fake: FakeAcl, vectors: _Vectors) -> None:
    fake.control.clear_log()
    fake.control.fail("aclnnMul", 361001)
    a, b, out = vectors.tensors
    with pytest.raises(AclError) as info:
        fake.opapi.call("aclnnMul", a, b, out, stream=vectors.stream)
    assert (info.value.function, info.value.code_name) == ("aclnnMul", "ACLNN_ERR_RUNTIME_ERROR")
    assert "failed as instructed" in info.value.message
    assert fake.control.names() == ["aclnnMulGetWorkspaceSize", "aclrtMalloc", "aclnnMul", "aclrtFree"]


def test_synchronize_failure_still_frees_the_workspace(fake: FakeAcl, vectors: _Vectors) -> None:
    fake.control.clear_log()
    fake.control.fail("aclrtSynchronizeStream", 507015)
    a, b, out = vectors.tensors
    with pytest.raises(AclError, match="ACL_ERROR_RT_AICORE_EXCEPTION"):
        fake.opapi.call("aclnnMul", a, b, out, stream=vectors.stream)
    assert fake.control.names()[-2:] == ["aclrtSynchronizeStream", "aclrtFree"]


def test_shape_errors_from_the_op_carry_its_message(fake: FakeAcl, vectors: _Vectors) -> None:
    with fake.runtime.device_buffer(64) as data, fake.opapi.tensor([4], ACL_FLOAT, [1], 0, [4], data) as bad:
        with pytest.raises(AclError, match="inputs do not broadcast to the output shape"):
            fake.opapi.call("aclnnMul", vectors.tensors[0], bad, vectors.tensors[2], stream=vectors.stream)


def test_every_bound_op_runs_both_phases(fake: FakeAcl, vectors: _Vectors) -> None:
    """Each aclnn op the bindings know, called once with its exact argument types."""
    op, stream = fake.opapi, vectors.stream
    a, b, out = vectors.tensors
    with ExitStack() as scope:
        gamma_data = scope.enter_context(fake.runtime.device_buffer(32))
        gamma = scope.enter_context(op.tensor([3], ACL_FLOAT, [1], 0, [3], gamma_data))
        normalized = scope.enter_context(op.int_array([3]))
        alpha = scope.enter_context(op.scalar(1.0))
        m_data = scope.enter_context(fake.runtime.device_buffer(16))
        m2 = scope.enter_context(op.tensor([3, 1], ACL_FLOAT, [1, 1], 0, [3], m_data))
        m_out = scope.enter_context(op.tensor([2, 1], ACL_FLOAT, [1, 1], 0, [2], m_data))
        fake.runtime.upload(gamma_data, np.ones(3, dtype=np.float32).tobytes())
        arguments = {
            "aclnnAdd": (a, b, alpha, out),
            "aclnnMul": (a, b, out),
            "aclnnDiv": (a, b, out),
            "aclnnSilu": (a, out),
            "aclnnGelu": (a, out),
            "aclnnSoftmax": (a, -1, out),
            "aclnnCast": (a, ACL_FLOAT, out),
            "aclnnLayerNorm": (a, normalized, gamma, None, 1e-5, out, None, None),
            "aclnnRmsNorm": (a, gamma, 1e-6, out, None),
        }
        arguments["aclnnMatmul"] = (a, m2, m_out, 1)
        assert set(arguments) == set(op_names())
        for name, args in arguments.items():
            op.call(name, *args, stream=stream)
    log = fake.control.log()
    for name in op_names():
        assert f"\n{name}GetWorkspaceSize(" in log and f"\n{name}(workspace=" in log, name
    # widths that would be garbage if declared wrong: double eps, int8 cubeMathType, int64 dim
    assert "eps=1.0000000000000001e-05" in log and "epsilon=9.9999999999999995e-07" in log
    assert "cubeMathType=1) -> 0" in log and "dim=1, out=" in log  # -1 normalised to 1 of 2 dims


def test_missing_op_is_a_clear_error(fake: FakeAcl) -> None:
    assert not fake.opapi.has_op("aclnnNope")
    with pytest.raises(AclLibraryNotFound, match="aclnnNope is not exported by the loaded aclnn libraries"):
        fake.opapi.call("aclnnNope", stream=0)


def test_the_double_exports_every_bound_function_from_the_right_library(fake: FakeAcl) -> None:
    """Guards the tests themselves: each binding is looked up where the real CANN keeps it."""
    from device.acl.prototypes import NNOPBASE_PROTOTYPES, RUNTIME_PROTOTYPES, all_prototypes, parse_prototype

    runtime_names = {parse_prototype(p).name for p in RUNTIME_PROTOTYPES}
    nnopbase_names = {parse_prototype(p).name for p in NNOPBASE_PROTOTYPES}
    libraries = fake.libraries
    for name in all_prototypes():
        if name in runtime_names:
            library = libraries.runtime
        elif name in nnopbase_names:
            library = libraries.nnopbase
        else:
            library = libraries.opapi[0]
        assert hasattr(library, name), f"the test double's {library._name} lacks {name}"
    assert not hasattr(libraries.runtime, "aclCreateTensor")  # meta API is not in libascendcl

"""The acl:N device end to end on the test double: ggml semantics in, numpy-checked results out.

The double computes each aclnn op on host memory from the aclTensor views it is given, so these
tests check the ggml -> aclTensor mapping (dim order, strides, offsets, broadcast splits, casts)
without an NPU. Kernel accuracy is the real hardware's business (test_npu.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
from fake_acl_support import FakeAcl

from device.acl import AclDevice, AclError, open_acl_device
from device.base import Device, DeviceError, Unsupported
from golden.case import CONTIGUOUS, Layout, OpCase, TensorSpec

RNG = np.random.default_rng(1234)


@pytest.fixture
def acl_device(fake: FakeAcl, fake_env: dict[str, str]) -> Iterator[AclDevice]:
    device = open_acl_device(0, environ=fake_env, install_roots=())
    yield device
    device.close()


def values(spec: TensorSpec) -> np.ndarray:
    data = RNG.uniform(-2, 2, size=spec.np_shape).astype(np.float32)
    if spec.dtype == "f16":
        return data.astype(np.float16)
    if spec.dtype == "bf16":  # float32 values already rounded to bf16 (the suite's convention)
        bits = data.view(np.uint32)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).view(np.float32)
    return data


def case(op: str, *inputs: TensorSpec, out: str = "f32", **params: object) -> OpCase:
    return OpCase(op=op, inputs=tuple(inputs), params=tuple(params.items()), dst=out)


def f32(ne: tuple[int, int, int, int], dtype: str = "f32", layout: Layout = CONTIGUOUS) -> TensorSpec:
    return TensorSpec(dtype, ne, layout)


def run(device: AclDevice, c: OpCase) -> tuple[list[np.ndarray], np.ndarray]:
    inputs = [values(spec) for spec in c.inputs]
    result = device.run(c, inputs)
    assert result.inputs_after is not None
    for before, after in zip(inputs, result.inputs_after, strict=True):
        assert np.array_equal(before, after), "the op changed an input"
    return inputs, result.output


def test_the_device_meets_the_contract(acl_device: AclDevice) -> None:
    assert isinstance(acl_device, Device)
    assert acl_device.name == "acl:0"
    info = acl_device.info()
    assert info["soc_name"] == "Ascend910B3" and info["hbm_total"] == 64 << 20 and info["cube_math_type"] == 1
    assert info["spec"] == "acl:0" and info["memory_total"] == 64 << 20 and info["backend"] == "aclnn"
    assert info["cann_version"] == "8.0.RC2"
    assert set(info["libraries"]) == {"runtime", "nnopbase", "libopapi.so"}


@pytest.mark.parametrize(("op", "fn"), [("ADD", np.add), ("MUL", np.multiply), ("DIV", np.divide)])
@pytest.mark.parametrize("b_ne", [(6, 5, 3, 2), (6, 1, 3, 1), (1, 5, 1, 2), (1, 1, 1, 1)])
def test_binary_ops_with_aclnn_expressible_broadcasting(acl_device: AclDevice, op: str, fn, b_ne) -> None:
    (a, b), out = run(acl_device, case(op, f32((6, 5, 3, 2)), f32(b_ne)))
    np.testing.assert_allclose(out, fn(a, b), rtol=1e-6)
    assert out.shape == (2, 3, 5, 6) and out.dtype == np.float32


def test_add_uses_alpha_one(acl_device: AclDevice, fake: FakeAcl) -> None:
    run(acl_device, case("ADD", f32((4, 1, 1, 1)), f32((4, 1, 1, 1))))
    assert "aclCreateScalar(value=1, dataType=0)" in fake.control.log()


def test_cyclic_tiling_is_unsupported(acl_device: AclDevice) -> None:
    c = case("ADD", f32((6, 4, 1, 1)), f32((3, 4, 1, 1)))  # ggml repeats src1 twice along ne0
    assert acl_device.supports(c) is False
    with pytest.raises(Unsupported, match=r"ne1\[0\]=3 into 6"):
        acl_device.run(c, [values(s) for s in c.inputs])


def test_half_precision_binary(acl_device: AclDevice) -> None:
    (a, b), out = run(acl_device, case("MUL", f32((8, 3, 1, 1), "f16"), f32((8, 3, 1, 1), "f16"), out="f16"))
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, (a.astype(np.float32) * b.astype(np.float32)).astype(np.float16))


def test_bf16_binary(acl_device: AclDevice) -> None:
    c = case("ADD", f32((8, 2, 1, 1), "bf16"), f32((8, 2, 1, 1), "bf16"), out="bf16")
    (a, b), out = run(acl_device, c)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, a + b, rtol=2**-8)


def test_unary_ops(acl_device: AclDevice) -> None:
    (x,), silu = run(acl_device, case("SILU", f32((7, 3, 2, 1))))
    np.testing.assert_allclose(silu, x / (1 + np.exp(-x.astype(np.float64))), rtol=1e-6)
    (x,), gelu = run(acl_device, case("GELU", f32((7, 3, 2, 1))))
    erf = np.vectorize(math.erf)
    np.testing.assert_allclose(gelu, 0.5 * x * (1 + erf(x / math.sqrt(2))), rtol=1e-6, atol=1e-7)


def test_soft_max_runs_along_ne0(acl_device: AclDevice, fake: FakeAcl) -> None:
    (x,), out = run(acl_device, case("SOFT_MAX", f32((9, 4, 3, 1)), scale=1.0, max_bias=0.0))
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=-1, keepdims=True), rtol=1e-6)
    assert "aclnnSoftmaxGetWorkspaceSize(self=T(dtype=0,dims=[1,3,4,9]), dim=3," in fake.control.log()


@pytest.mark.parametrize("c", [
    case("SOFT_MAX", f32((9, 4, 1, 1)), scale=0.5, max_bias=0.0),
    case("SOFT_MAX", f32((9, 4, 1, 1)), f32((9, 4, 1, 1)), scale=1.0, max_bias=0.0),
    case("SOFT_MAX", f32((9, 4, 1, 1)), scale=1.0, max_bias=8.0),
    case("ADD", TensorSpec("q4_0", (32, 1, 1, 1)), f32((32, 1, 1, 1))),
    case("MUL_MAT", TensorSpec("q8_0", (32, 2, 1, 1)), f32((32, 3, 1, 1))),
    case("ROPE", f32((8, 2, 1, 1))),
    case("ADD", f32((0, 2, 1, 1)), f32((0, 2, 1, 1))),
    case("CPY", f32((32, 1, 1, 1)), out="q8_0"),
], ids=lambda c: c.case_id)
def test_cases_aclnn_cannot_express_are_declined(acl_device: AclDevice, c: OpCase) -> None:
    assert acl_device.supports(c) is False


def mul_mat_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ggml: dst[i3, i2] = b[i3, i2] @ a[i3 // r3, i2 // r2].T (blocked broadcast)."""
    r3, r2 = b.shape[0] // a.shape[0], b.shape[1] // a.shape[1]
    out = np.empty((b.shape[0], b.shape[1], b.shape[2], a.shape[2]), dtype=np.float64)
    for i3 in range(b.shape[0]):
        for i2 in range(b.shape[1]):
            out[i3, i2] = b[i3, i2].astype(np.float64) @ a[i3 // r3, i2 // r2].astype(np.float64).T
    return out


@pytest.mark.parametrize(("a_ne", "b_ne"), [
    ((5, 4, 1, 1), (5, 3, 1, 1)),
    ((5, 4, 2, 3), (5, 3, 2, 3)),
    ((5, 4, 1, 1), (5, 3, 3, 2)),  # src0 broadcast as size-1 dims
    ((5, 4, 2, 1), (5, 3, 6, 1)),  # blocked broadcast r2 = 3 over 2 weight slices
    ((5, 4, 2, 2), (5, 3, 4, 6)),  # blocked in both batch dims
])
def test_mul_mat(acl_device: AclDevice, fake: FakeAcl, a_ne, b_ne) -> None:
    (a, b), out = run(acl_device, case("MUL_MAT", f32(a_ne), f32(b_ne)))
    assert out.shape == (b_ne[3], b_ne[2], b_ne[1], a_ne[1])
    np.testing.assert_allclose(out, mul_mat_reference(a, b), rtol=1e-5)
    assert "cubeMathType=1) -> 0" in fake.control.log()


def test_mul_mat_half_weights_cast_src1_and_widen_dst(acl_device: AclDevice, fake: FakeAcl) -> None:
    (a, b), out = run(acl_device, case("MUL_MAT", f32((8, 4, 1, 1), "f16"), f32((8, 3, 1, 1))))
    # src1 rounded to f16 on the device, products summed, the f16 result widened to f32
    expected = mul_mat_reference(a, b.astype(np.float16)).astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(out, expected)
    names = [c.name for c in fake.control.calls() if c.name.endswith("GetWorkspaceSize")]
    assert names == ["aclnnCastGetWorkspaceSize", "aclnnMatmulGetWorkspaceSize", "aclnnCastGetWorkspaceSize"]


def test_mul_mat_weight_is_passed_transposed(acl_device: AclDevice, fake: FakeAcl) -> None:
    run(acl_device, case("MUL_MAT", f32((5, 4, 1, 1)), f32((5, 3, 1, 1))))
    create_lines = [line for line in fake.control.log().splitlines() if line.startswith("aclCreateTensor")]
    # weight ggml ne [K=5, N=4] -> ACL view [1,1,5,4] with strides [.., 1, 5] (ne0/ne1 swapped)
    assert any("viewDims=[1,1,5,4], dataType=0, stride=[20,20,1,5]" in line for line in create_lines)


@pytest.mark.parametrize(("src", "dst"), [("f32", "f16"), ("f16", "f32"), ("f32", "bf16"), ("bf16", "f32")])
def test_cpy_converts(acl_device: AclDevice, src: str, dst: str) -> None:
    (x,), out = run(acl_device, case("CPY", f32((6, 5, 1, 1), src), out=dst))
    if dst == "f16":
        np.testing.assert_array_equal(out, x.astype(np.float16))
    elif dst == "bf16":
        np.testing.assert_array_equal(out, values_bf16(x))
    else:
        np.testing.assert_array_equal(out, x.astype(np.float32))


def values_bf16(x: np.ndarray) -> np.ndarray:
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).view(np.float32)


@pytest.mark.parametrize("layout", [
    Layout(perm=(1, 0, 2, 3)),
    Layout(pad=(3, 1, 0, 2)),
    Layout(offset=7),
    Layout(perm=(0, 2, 1, 3), pad=(1, 0, 2, 0), offset=5),
])
def test_strided_layouts_reach_aclnn_as_views(acl_device: AclDevice, layout: Layout) -> None:
    a_spec, b_spec = f32((6, 5, 3, 2), layout=layout), f32((6, 5, 3, 2), layout=layout)
    (a, b), out = run(acl_device, case("ADD", a_spec, b_spec))
    np.testing.assert_allclose(out, a + b, rtol=1e-6)
    (x,), silu = run(acl_device, case("SILU", a_spec))
    np.testing.assert_allclose(silu, x / (1 + np.exp(-x.astype(np.float64))), rtol=1e-6)


def test_failed_kernel_raises_and_releases_everything(acl_device: AclDevice, fake: FakeAcl) -> None:
    before = fake.control.live()
    fake.control.fail("aclnnMul", 507015)
    c = case("MUL", f32((4, 4, 1, 1)), f32((4, 4, 1, 1)))
    with pytest.raises(AclError) as info:
        acl_device.run(c, [values(s) for s in c.inputs])
    assert info.value.function == "aclnnMul" and info.value.code_name == "ACL_ERROR_RT_AICORE_EXCEPTION"
    assert fake.control.live() == before
    assert fake.control.device_refs(0) == 1  # only the device's own hold is left
    run(acl_device, c)  # the device is still usable


def test_failed_upload_releases_earlier_buffers(acl_device: AclDevice, fake: FakeAcl) -> None:
    before = fake.control.live()
    fake.control.fail("aclrtMemcpy", 107000, nth=2)
    c = case("ADD", f32((4, 4, 1, 1)), f32((4, 4, 1, 1)))
    with pytest.raises(AclError, match="aclrtMemcpy"):
        acl_device.run(c, [values(s) for s in c.inputs])
    assert fake.control.live() == before


def test_open_rejects_a_missing_index(fake: FakeAcl, fake_env: dict[str, str]) -> None:
    with pytest.raises(DeviceError, match=r"acl:5: no such NPU \(this host has 2\)"):
        open_acl_device(5, environ=fake_env, install_roots=())


def test_close_is_idempotent_and_releases_the_device(fake: FakeAcl, fake_env: dict[str, str]) -> None:
    device = open_acl_device(1, environ=fake_env, install_roots=())
    assert fake.control.device_refs(1) == 1 and fake.control.live()["streams"] == 1
    device.close()
    device.close()
    assert fake.control.device_refs(1) == 0 and fake.control.live()["streams"] == 0
    with pytest.raises(DeviceError, match="closed"):
        device.run(case("SILU", f32((2, 1, 1, 1))), [np.zeros((1, 1, 1, 2), np.float32)])


def test_staging_builds_the_padded_offset_storage() -> None:
    from device.acl.staging import acl_view, stage

    spec = TensorSpec("f32", (3, 2, 1, 1), Layout(pad=(2, 0, 0, 0), offset=4))
    data = np.arange(6, dtype=np.float32).reshape(1, 1, 2, 3)
    staged = stage(spec, data)
    assert staged.nb == (1, 5, 10, 10) and staged.offset == 4 and staged.storage.size == 4 + 10
    assert np.isnan(staged.storage[:4]).all() and np.isnan(staged.storage[[7, 8, 12, 13]]).all()
    assert staged.storage[[4, 5, 6, 9, 10, 11]].tolist() == list(range(6))
    assert np.array_equal(staged.logical(), data)
    # ggml ne/nb -> ACL: reversed, storage = offset + 1 + sum((ne-1)*nb), as ggml-cann computes it
    assert acl_view(staged.ne, staged.nb, staged.offset) == ([1, 1, 2, 3], [10, 10, 5, 1], [4 + 1 + 5 + 2])

"""Checks that need a real Ascend NPU and CANN toolkit; skipped elsewhere.

Run on an Ascend host after ``source <toolkit>/set_env.sh``:  ``python -m pytest tests/acl -m npu -v``.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from device.acl import AclDevice, AclError, acl_inventory, open_acl_device
from device.acl.errors import AclLibraryNotFound
from device.acl.inventory import open_runtime
from device.acl.raw_checks import memory_snapshot, read_device_bytes
from device.acl.runtime import AclRuntime
from golden.case import OpCase, TensorSpec

pytestmark = pytest.mark.npu


@pytest.fixture(scope="module")
def runtime() -> AclRuntime:
    try:
        rt = open_runtime()
    except AclLibraryNotFound as exc:
        pytest.skip(f"no real CANN runtime: {exc}")
    except AclError as exc:
        pytest.skip(f"CANN runtime present but not usable here: {exc}")
    if rt.device_count() == 0:
        pytest.skip("CANN runtime found but no NPU is visible")
    return rt


@pytest.fixture(scope="module")
def acl0(runtime: AclRuntime) -> Iterator[AclDevice]:
    try:
        device = open_acl_device(0)
    except AclLibraryNotFound as exc:
        pytest.skip(f"aclnn libraries missing: {exc}")
    yield device
    device.close()


def test_inventory_is_sane(runtime: AclRuntime) -> None:
    devices = acl_inventory()
    assert len(devices) == runtime.device_count() >= 1
    for entry in devices:
        assert "error" not in entry, entry
        assert entry["soc_name"], entry
        assert 0 < entry["hbm_free"] <= entry["hbm_total"], entry
        assert entry["hbm_total"] >= 4 << 30, entry  # every Ascend inference/training card has >= 4 GiB
        assert entry["cann_version"] and entry["cann_version"][0].isdigit(), entry


def test_memory_info_tracks_an_allocation(runtime: AclRuntime) -> None:
    size = 256 << 20
    with runtime.using_device(0):
        before = memory_snapshot(runtime, 0)
        with runtime.device_buffer(size):
            during = memory_snapshot(runtime, 0)
    assert during.total == before.total
    assert during.used_since(before) >= size  # the driver may round up or reserve more, never less


def test_raw_readback_of_an_uploaded_buffer(runtime: AclRuntime) -> None:
    data = np.random.default_rng(7).integers(0, 256, size=4096, dtype=np.uint8)
    with runtime.using_device(0), runtime.device_buffer(8192) as address:
        runtime.upload(address, data.tobytes())
        runtime.memset(address + 4096, 4096, 0, 4096)
        assert np.array_equal(read_device_bytes(runtime, address, 4096, device_index=0), data)
        assert np.array_equal(read_device_bytes(runtime, address + 100, 50), data[100:150])
        assert not read_device_bytes(runtime, address + 4096, 4096, device_index=0).any()


def test_bad_device_index_maps_to_acl_error(runtime: AclRuntime) -> None:
    with pytest.raises(AclError) as info:
        runtime.set_device(runtime.device_count() + 7)
    assert info.value.code and not info.value.code_name.startswith("UNKNOWN"), info.value


def _case(op: str, *inputs: TensorSpec, out: str = "f32", **params: object) -> OpCase:
    return OpCase(op=op, inputs=tuple(inputs), params=tuple(params.items()), dst=out)


@pytest.mark.parametrize("b_ne", [(64, 33, 3, 2), (64, 1, 3, 1), (1, 33, 1, 2)])
def test_add_matches_numpy(acl0: AclDevice, b_ne: tuple[int, int, int, int]) -> None:
    rng = np.random.default_rng(0)
    c = _case("ADD", TensorSpec("f32", (64, 33, 3, 2)), TensorSpec("f32", b_ne))
    a, b = (rng.uniform(-8, 8, size=s.np_shape).astype(np.float32) for s in c.inputs)
    result = acl0.run(c, [a, b])
    np.testing.assert_array_equal(result.output, a + b)  # f32 add is exact on any IEEE unit
    assert all(np.array_equal(x, y) for x, y in zip([a, b], result.inputs_after or [], strict=True))


def test_f16_mul_matches_numpy(acl0: AclDevice) -> None:
    rng = np.random.default_rng(1)
    c = _case("MUL", TensorSpec("f16", (128, 16, 1, 1)), TensorSpec("f16", (128, 16, 1, 1)), out="f16")
    a, b = (rng.uniform(-4, 4, size=s.np_shape).astype(np.float16) for s in c.inputs)
    out = acl0.run(c, [a, b]).output
    np.testing.assert_array_equal(out, (a.astype(np.float32) * b.astype(np.float32)).astype(np.float16))


def test_softmax_and_unary(acl0: AclDevice) -> None:
    rng = np.random.default_rng(2)
    x = rng.uniform(-8, 8, size=(1, 4, 7, 100)).astype(np.float32)
    out = acl0.run(_case("SOFT_MAX", TensorSpec("f32", (100, 7, 4, 1)), scale=1.0, max_bias=0.0), [x]).output
    e = np.exp(x.astype(np.float64) - x.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-7)
    silu = acl0.run(_case("SILU", TensorSpec("f32", (100, 7, 4, 1))), [x]).output
    np.testing.assert_allclose(silu, x / (1 + np.exp(-x.astype(np.float64))), rtol=1e-5, atol=1e-6)


def test_mul_mat_matches_numpy(acl0: AclDevice) -> None:
    rng = np.random.default_rng(3)
    c = _case("MUL_MAT", TensorSpec("f32", (256, 48, 2, 1)), TensorSpec("f32", (256, 5, 6, 1)))
    a, b = (rng.uniform(-1, 1, size=s.np_shape).astype(np.float32) for s in c.inputs)
    out = acl0.run(c, [a, b]).output
    expected = np.einsum("ijmk,ijnk->ijmn", b.astype(np.float64), np.repeat(a, 3, axis=1).astype(np.float64))
    # cubeMathType 1 lets the cube unit drop fp32 to hf32/fp16 inputs: 1e-2 relative covers fp16 products
    np.testing.assert_allclose(out, expected, rtol=1e-2, atol=1e-2)

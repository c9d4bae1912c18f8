"""Library discovery order, missing-library messages and the NPU inventory."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest
from fake_acl_support import FakeControl

from device.acl import acl_inventory
from device.acl.errors import AclLibraryNotFound
from device.acl.inventory import open_runtime
from device.acl.loader import library_search_dirs, load_libraries
from device.base import DeviceError

ARCH = platform.machine()


def test_search_order_toolkit_then_ld_library_path_then_roots(tmp_path: Path) -> None:
    env = {"ASCEND_TOOLKIT_HOME": "/opt/cann", "LD_LIBRARY_PATH": "/ld/one:/ld/two::"}
    dirs = library_search_dirs(env, install_roots=[Path("/root1"), Path("/root2")])
    assert dirs == [Path("/opt/cann/lib64"), Path(f"/opt/cann/{ARCH}-linux/lib64"),
                    Path("/ld/one"), Path("/ld/two"),
                    Path("/root1/lib64"), Path(f"/root1/{ARCH}-linux/lib64"),
                    Path("/root2/lib64"), Path(f"/root2/{ARCH}-linux/lib64")]


def test_search_skips_stub_dirs_and_duplicates() -> None:
    env = {"ASCEND_TOOLKIT_HOME": "/opt/cann",
           "LD_LIBRARY_PATH": "/opt/cann/runtime/lib64/stub:/opt/cann/lib64:/x"}
    dirs = library_search_dirs(env, install_roots=[])
    assert dirs == [Path("/opt/cann/lib64"), Path(f"/opt/cann/{ARCH}-linux/lib64"), Path("/x")]


def test_standard_roots_are_the_documented_ones() -> None:
    dirs = library_search_dirs({})
    assert Path("/usr/local/Ascend/cann/lib64") in dirs
    assert Path("/usr/local/Ascend/ascend-toolkit/latest/lib64") in dirs
    assert Path.home() / "Ascend/ascend-toolkit/latest/lib64" in dirs


def _link_fake(fake_dir: Path, target: Path, names: tuple[str, ...] = ()) -> Path:
    """The fake's libraries under another directory, as symlinks (see compile_fake on why)."""
    target.mkdir(parents=True, exist_ok=True)
    for library in fake_dir.iterdir():
        if not names or library.name in names:
            (target / library.name).symlink_to(library)
    return target


def test_toolkit_home_wins_over_ld_library_path_and_roots(fake_dir: Path, tmp_path: Path) -> None:
    toolkit = tmp_path / "toolkit"
    _link_fake(fake_dir, toolkit / "lib64")
    root = tmp_path / "root"
    _link_fake(fake_dir, root / "lib64")
    env = {"ASCEND_TOOLKIT_HOME": str(toolkit), "LD_LIBRARY_PATH": str(fake_dir)}
    libraries = load_libraries(env, install_roots=[root])
    assert libraries.paths["runtime"] == str(toolkit / "lib64" / "libascendcl.so")
    assert libraries.paths["nnopbase"] == str(toolkit / "lib64" / "libnnopbase.so")
    # without the toolkit variable, LD_LIBRARY_PATH comes before the install roots
    assert load_libraries({"LD_LIBRARY_PATH": str(fake_dir)}, [root]).paths["runtime"] == str(
        fake_dir / "libascendcl.so")
    # and with neither, the install roots are used
    from_roots = load_libraries({}, [tmp_path / "missing", root])
    assert from_roots.paths["runtime"] == str(root / "lib64" / "libascendcl.so")


def test_split_op_libraries_are_found(fake_dir: Path, tmp_path: Path) -> None:
    split = _link_fake(fake_dir, tmp_path / "lib64", ("libascendcl.so", "libnnopbase.so"))
    (split / "libopapi_math.so").symlink_to(fake_dir / "libopapi.so")
    libraries = load_libraries({"ASCEND_TOOLKIT_HOME": str(tmp_path)}, install_roots=[])
    assert "libopapi_math.so" in libraries.paths and "libopapi.so" not in libraries.paths


def test_missing_runtime_is_a_one_line_device_error(tmp_path: Path) -> None:
    with pytest.raises(AclLibraryNotFound) as info:
        load_libraries({"ASCEND_TOOLKIT_HOME": str(tmp_path)}, install_roots=[])
    message = str(info.value)
    assert isinstance(info.value, DeviceError)
    assert "\n" not in message and message.startswith("CANN runtime libascendcl.so not found")
    assert str(tmp_path / "lib64") in message and "set_env.sh" in message


def test_missing_op_libraries(fake_dir: Path, tmp_path: Path) -> None:
    only_runtime = _link_fake(fake_dir, tmp_path / "lib64", ("libascendcl.so",))
    env = {"ASCEND_TOOLKIT_HOME": str(tmp_path)}
    assert load_libraries(env, [], need_ops=False).paths == {"runtime": str(only_runtime / "libascendcl.so")}
    with pytest.raises(AclLibraryNotFound, match="libnnopbase.so not found"):
        load_libraries(env, [])
    _link_fake(fake_dir, only_runtime, ("libnnopbase.so",))
    with pytest.raises(AclLibraryNotFound, match=r"op library \(libopapi.so or libopapi_math.so"):
        load_libraries(env, [])


def test_unloadable_library_is_a_one_line_error(tmp_path: Path) -> None:
    broken = tmp_path / "lib64"
    broken.mkdir()
    (broken / "libascendcl.so").write_bytes(b"not an ELF file")
    with pytest.raises(AclLibraryNotFound) as info:
        load_libraries({"ASCEND_TOOLKIT_HOME": str(tmp_path)}, [])
    assert "could not load it" in str(info.value) and "\n" not in str(info.value)


def test_stub_runtime_is_reported_as_not_found(fake_env: dict[str, str]) -> None:
    control = FakeControl(load_libraries(fake_env, [], need_ops=False).runtime)
    control.reset()
    control.fail("aclInit", 100039)  # what CANN's link-only stub returns from every call
    with pytest.raises(AclLibraryNotFound, match="link-only stub"):
        open_runtime(fake_env, [])
    control.fail("aclInit", 100039)
    assert acl_inventory(fake_env, []) == []
    control.reset()


def test_inventory(fake_env: dict[str, str]) -> None:
    control = FakeControl(load_libraries(fake_env, [], need_ops=False).runtime)
    control.reset()
    control.lib.fake_set_version(b"8.3.RC1")
    devices = acl_inventory(fake_env, [])
    assert devices == [
        {"index": i, "soc_name": "Ascend910B3", "hbm_free": 64 << 20, "hbm_total": 64 << 20,
         "cann_version": "8.3.RC1"}
        for i in (0, 1)
    ]
    assert control.device_refs(0) == control.device_refs(1) == 0  # every aclrtSetDevice was paired
    assert acl_inventory(fake_env, []) == devices  # repeatable: a second aclInit is tolerated
    control.reset()


def test_inventory_without_runtime_is_empty(tmp_path: Path) -> None:
    assert acl_inventory({"ASCEND_TOOLKIT_HOME": str(tmp_path)}, install_roots=[]) == []


def test_inventory_records_a_failing_device(fake_env: dict[str, str]) -> None:
    control = FakeControl(load_libraries(fake_env, [], need_ops=False).runtime)
    control.reset()
    control.fail("aclrtGetMemInfo", 507033, nth=2)
    devices = acl_inventory(fake_env, [])
    assert "error" not in devices[0]
    assert devices[1]["hbm_total"] is None
    assert devices[1]["error"].startswith("aclrtGetMemInfo failed with 507033 (ACL_ERROR_RT_DEV_SETUP_ERROR)")
    assert control.device_refs(1) == 0
    control.reset()


def test_inventory_warns_when_the_runtime_fails_to_start(fake_env: dict[str, str]) -> None:
    control = FakeControl(load_libraries(fake_env, [], need_ops=False).runtime)
    control.reset()
    control.fail("aclrtGetDeviceCount", 207004)
    with pytest.warns(RuntimeWarning, match="ACL_ERROR_RT_NO_DEVICE"):
        assert acl_inventory(fake_env, []) == []
    control.reset()

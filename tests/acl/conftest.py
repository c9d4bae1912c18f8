"""Fixtures for the ACL binding tests: the C test double (fake_ascendcl.c) built at test time."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_acl_support import FakeAcl, FakeControl, compile_fake

from device.acl import loader
from device.acl.loader import load_libraries
from device.acl.opapi import AclOpApi
from device.acl.runtime import AclRuntime


@pytest.fixture(autouse=True)
def _load_libraries_locally(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test double is loaded RTLD_LOCAL (see device.acl.loader.LOAD_MODE): its symbols stay
    out of the process-wide namespace where a real CANN (test_npu.py) could bind to them.
    Module-scoped fixtures (the real runtime in test_npu.py) are set up before this runs and so
    load RTLD_GLOBAL as the product does."""
    monkeypatch.setattr(loader, "LOAD_MODE", ctypes.RTLD_LOCAL)


@pytest.fixture(scope="session")
def fake_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_fake(tmp_path_factory.mktemp("fake_acl") / "lib64")


@pytest.fixture(scope="session")
def fake_env(fake_dir: Path) -> dict[str, str]:
    """An environment whose only route to a CANN runtime is the test double."""
    return {"LD_LIBRARY_PATH": str(fake_dir)}


@pytest.fixture
def fake(fake_env: dict[str, str]) -> Iterator[FakeAcl]:
    """The bindings loaded against the test double with its state reset (ACL not yet initialised).
    Fails the test if it leaked device memory, streams, descriptors or executors."""
    libraries = load_libraries(fake_env, install_roots=())
    control = FakeControl(libraries.runtime)
    control.reset()
    baseline = control.live()
    runtime = AclRuntime(libraries)
    opapi = AclOpApi(runtime, libraries)
    yield FakeAcl(libraries, runtime, opapi, control)
    leaked = {k: v - baseline[k] for k, v in control.live().items() if v != baseline[k]}
    control.reset()
    assert not leaked, f"test leaked fake ACL resources: {leaked}"

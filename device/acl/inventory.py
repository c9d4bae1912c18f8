"""Opening the CANN libraries and listing the NPUs (``conform devices``, the results header)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from device.acl.errors import ACL_ERROR_COMPILING_STUB_MODE, AclError, AclLibraryNotFound
from device.acl.loader import STANDARD_INSTALL_ROOTS, load_libraries
from device.acl.opapi import AclOpApi
from device.acl.runtime import HBM_MEM, AclRuntime


def open_runtime(
    environ: Mapping[str, str] | None = None,
    install_roots: Sequence[Path] = STANDARD_INSTALL_ROOTS,
) -> AclRuntime:
    """Load libascendcl and aclInit it (an earlier init by ggml in this process is fine).

    ACL is never finalised here: ggml-cann in the same process shares the one ACL instance and
    never finalises it either, so finalising would pull it out from under ggml.
    """
    return open_libraries(environ, install_roots, need_ops=False)[0]


def open_libraries(
    environ: Mapping[str, str] | None = None,
    install_roots: Sequence[Path] = STANDARD_INSTALL_ROOTS,
    need_ops: bool = True,
) -> tuple[AclRuntime, AclOpApi | None]:
    libraries = load_libraries(environ, install_roots, need_ops=need_ops)
    runtime = AclRuntime(libraries)
    try:
        runtime.init()
    except AclError as exc:
        if exc.code == ACL_ERROR_COMPILING_STUB_MODE:
            raise AclLibraryNotFound(
                f"{libraries.paths['runtime']} is CANN's link-only stub library; point ASCEND_TOOLKIT_HOME "
                "or LD_LIBRARY_PATH at the real runtime"
            ) from None
        raise
    opapi = AclOpApi(runtime, libraries) if need_ops else None
    return runtime, opapi


def acl_inventory(
    environ: Mapping[str, str] | None = None,
    install_roots: Sequence[Path] = STANDARD_INSTALL_ROOTS,
) -> list[dict[str, Any]]:
    """One dict per NPU: ``index, soc_name, hbm_free, hbm_total, cann_version``; ``[]`` when no
    CANN runtime is found (or it is the stub). A device that fails its query gets an ``error``
    key; a runtime that fails to start warns and yields ``[]``.
    """
    try:
        runtime = open_runtime(environ, install_roots)
        count = runtime.device_count()
    except AclLibraryNotFound:
        return []
    except AclError as exc:
        warnings.warn(f"CANN runtime found but unusable: {exc}", RuntimeWarning, stacklevel=2)
        return []
    version = runtime.cann_version()
    devices: list[dict[str, Any]] = []
    for index in range(count):
        entry: dict[str, Any] = {"index": index, "soc_name": None, "hbm_free": None, "hbm_total": None,
                                 "cann_version": version}
        try:
            with runtime.using_device(index):
                memory = runtime.mem_info(HBM_MEM)
                entry.update(soc_name=runtime.soc_name(), hbm_free=memory.free, hbm_total=memory.total)
        except AclError as exc:
            entry["error"] = str(exc)
        devices.append(entry)
    return devices

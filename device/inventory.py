"""Device inventory beyond ggml: ACL (Ascend) devices, when a CANN runtime is installed."""

from __future__ import annotations

from typing import Any


def acl_devices() -> list[dict[str, Any]]:
    """ACL devices (index, SoC, HBM free/total, CANN version); [] where no libascendcl is found."""
    try:
        from device.acl import acl_inventory
    except ImportError:
        return []
    try:
        return acl_inventory()
    except Exception as exc:  # an installed but broken runtime must not stop a ggml run
        return [{"error": f"{type(exc).__name__}: {exc}"}]

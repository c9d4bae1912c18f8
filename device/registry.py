"""Device selection: turn a ``--device`` spec into a Device.

Specs:
* ``golden`` — the NumPy oracle (in process).
* ``ggml:NAME`` — a ggml backend device by its registry name (``ggml:CPU``, ``ggml:CANN0``,
  ``ggml:CUDA0``); ``ggml:CANN*`` expands to every matching device (see :func:`expand_specs`).
* ``acl:N`` — Ascend device N driven directly through aclnn (needs the CANN toolkit).
* ``package.module:factory`` — a third-party device: ``factory(options)`` returns an object with
  the :class:`device.base.Device` members.

``options`` carries ``ggml_lib`` (library directory) and ``threads``.
"""

from __future__ import annotations

import fnmatch
import importlib
from typing import Any

from device.base import Device, DeviceError


def open_device(spec: str, options: dict[str, Any] | None = None) -> Device:
    options = dict(options or {})
    kind, _, rest = spec.partition(":")
    if spec == "golden":
        from device.golden_device import open_golden_device

        return open_golden_device(options)
    if kind == "ggml":
        if not rest:
            raise DeviceError("ggml device spec needs a device name, e.g. ggml:CPU")
        from device.ggml.device import open_ggml_device

        return open_ggml_device(rest, options)
    if kind == "acl":
        if not rest.isdigit():
            raise DeviceError(f"acl device spec needs an index, e.g. acl:0 (got {spec!r})")
        try:
            from device.acl.device import open_acl_device
        except ImportError as exc:
            raise DeviceError(f"acl devices are not available: {exc}") from None
        return open_acl_device(int(rest))
    if kind and rest:
        try:
            module = importlib.import_module(kind)
        except ImportError as exc:
            raise DeviceError(f"device plug-in {spec!r}: cannot import module {kind!r}: {exc}") from None
        factory = getattr(module, rest, None)
        if factory is None or not callable(factory):
            raise DeviceError(f"device plug-in {spec!r}: module {kind!r} has no callable {rest!r}")
        device = factory(options)
        missing = [m for m in ("name", "info", "supports", "run") if not hasattr(device, m)]
        if missing:
            raise DeviceError(f"device plug-in {spec!r} lacks {', '.join(missing)} (see the Device contract)")
        return device
    raise DeviceError(
        f"unknown device {spec!r}: use golden, ggml:NAME (e.g. ggml:CPU), acl:N, or package.module:factory"
    )


def expand_specs(specs: list[str], options: dict[str, Any] | None = None) -> list[str]:
    """Expand glob patterns over ggml device names (``ggml:CANN*``) and check each spec's form."""
    out: list[str] = []
    for spec in specs:
        kind, _, rest = spec.partition(":")
        if kind == "ggml" and any(ch in rest for ch in "*?["):
            from device.ggml import lib as ggml_lib

            names = ggml_lib.load((options or {}).get("ggml_lib")).device_names()
            matched = [f"ggml:{n}" for n in names if fnmatch.fnmatchcase(n, rest)]
            if not matched:
                raise DeviceError(f"no ggml device matches {rest!r} (devices: {', '.join(names) or 'none'})")
            out.extend(matched)
        else:
            out.append(spec)
    return list(dict.fromkeys(out))

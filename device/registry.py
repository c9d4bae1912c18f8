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

USAGE = "use golden, ggml:NAME (e.g. ggml:CPU), acl:N, or package.module:factory"


def _ggml_name(rest: str) -> str:
    if not rest:
        raise DeviceError("ggml device spec needs a device name, e.g. ggml:CPU")
    return rest


def _acl_index(rest: str, spec: str) -> int:
    if not rest.isdigit():
        raise DeviceError(f"acl device spec needs an index, e.g. acl:0 (got {spec!r})")
    try:
        import device.acl.device  # noqa: F401
    except ImportError as exc:
        raise DeviceError(f"acl devices are not available: {exc}") from None
    return int(rest)


def _plugin_factory(kind: str, rest: str, spec: str) -> Any:
    try:
        module = importlib.import_module(kind)
    except Exception as exc:  # ImportError, or the plug-in's own import-time failure
        raise DeviceError(
            f"unknown device {spec!r}: no importable plug-in module {kind!r} ({type(exc).__name__}: {exc}); {USAGE}"
        ) from None
    factory = getattr(module, rest, None)
    if not callable(factory):
        raise DeviceError(f"device plug-in {spec!r}: module {kind!r} has no callable {rest!r}")
    return factory


def open_device(spec: str, options: dict[str, Any] | None = None) -> Device:
    options = dict(options or {})
    kind, _, rest = spec.partition(":")
    if spec == "golden":
        from device.golden_device import open_golden_device

        return open_golden_device(options)
    if kind == "ggml":
        from device.ggml.device import open_ggml_device

        return open_ggml_device(_ggml_name(rest), options)
    if kind == "acl":
        from device.acl.device import open_acl_device

        return open_acl_device(_acl_index(rest, spec))
    if kind and rest:
        device = _plugin_factory(kind, rest, spec)(options)
        missing = [m for m in ("name", "info", "supports", "run") if not hasattr(device, m)]
        if missing:
            raise DeviceError(f"device plug-in {spec!r} lacks {', '.join(missing)} (see the Device contract)")
        return device
    raise DeviceError(f"unknown device {spec!r}: {USAGE}")


def check_spec(spec: str, options: dict[str, Any] | None = None, load_libraries: bool = True) -> None:
    """Check that ``spec`` names a device that can be opened, without opening it.

    Raises :class:`DeviceError` with a one-line reason: an unknown spec form, a ggml directory
    that is not a matching ggml build, a ggml device name the library does not have (``ggml:CPU7``),
    a plug-in module that does not import or lacks its factory. ``conform run`` calls this for
    every device before it starts pytest, so bad input is one line and not a failed session.
    With ``load_libraries=False`` the ggml directory is only looked at, not loaded (the pytest
    plug-in's check: loading ggml loads its backends, and CANN's starts the ACL runtime, in that
    process); the device name is then checked when the device opens.
    """
    options = dict(options or {})
    kind, _, rest = spec.partition(":")
    if spec == "golden":
        return
    if kind == "ggml":
        name = _ggml_name(rest)
        from device.ggml import lib as ggml_lib

        if not load_libraries:
            ggml_lib.resolve_lib_dir(options.get("ggml_lib"))
            return
        lib = ggml_lib.load(options.get("ggml_lib"))
        names = lib.device_names()
        if name not in names:
            raise DeviceError(f"unknown ggml device {name!r} in {lib.lib_dir} (devices: {', '.join(names) or 'none'})")
        return
    if kind == "acl":
        _acl_index(rest, spec)
        return
    if kind and rest:
        _plugin_factory(kind, rest, spec)
        return
    raise DeviceError(f"unknown device {spec!r}: {USAGE}")


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

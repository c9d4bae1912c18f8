"""Device selection: turn a :class:`~device.spec.DeviceSpec` into a Device.

Specs (see :mod:`device.spec`):
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
import importlib.util
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from device.base import Capability, Device, DeviceError, capabilities_of
from device.spec import USAGE, DeviceKind, DeviceSpec

CONTRACT_MEMBERS = ("name", "info", "supports", "run")


def _check_acl_importable() -> None:
    try:
        import device.acl.device  # noqa: F401
    except ImportError as exc:
        raise DeviceError(f"acl devices are not available: {exc}") from None


def plugins_import_from_cwd() -> None:
    """Plug-in modules import as under ``python -m``: from the current directory first, then the
    installed packages, so ``--device tests.plugins.faulty:...`` works from a checkout's root also
    through the ``conform`` script (whose ``sys.path`` starts at its own folder instead)."""
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def _plugin_factory(spec: DeviceSpec) -> Callable[[dict[str, Any]], Any]:
    plugins_import_from_cwd()
    try:
        module = importlib.import_module(spec.module)
    except Exception as exc:  # ImportError, or the plug-in's own import-time failure
        raise DeviceError(
            f"unknown device {spec.text!r}: no importable plug-in module {spec.module!r} "
            f"({type(exc).__name__}: {exc}); {USAGE}"
        ) from None
    factory = getattr(module, spec.factory, None)
    if not callable(factory):
        raise DeviceError(f"device plug-in {spec.text!r}: module {spec.module!r} has no callable {spec.factory!r}")
    return factory


def runs_in_process(spec: DeviceSpec) -> bool:
    """Whether the device declares :attr:`Capability.IN_PROCESS` before it is opened.

    Only built-in devices whose class is known without loading anything can: the golden oracle.
    A plug-in always runs in a worker process (its code may abort), whatever it inherits.
    """
    if spec.kind is DeviceKind.GOLDEN:
        from device.golden_device import GoldenDevice

        return Capability.IN_PROCESS in capabilities_of(GoldenDevice)
    return False


def open_device(spec: DeviceSpec | str, options: dict[str, Any] | None = None) -> Device:
    spec = DeviceSpec.of(spec)
    options = dict(options or {})
    if spec.is_pattern:
        raise DeviceError(f"{spec.text} is a pattern; expand it to devices first (expand_specs)")
    if spec.kind is DeviceKind.GOLDEN:
        from device.golden_device import open_golden_device

        return open_golden_device(options)
    if spec.kind is DeviceKind.GGML:
        from device.ggml.device import open_ggml_device

        ggml = open_ggml_device(spec.ggml_name, options)
        if Capability.CANN_QUANT_LAYOUT in capabilities_of(ggml):
            # ggml's get_tensor converts ggml-cann's layout back; the ACL runtime reads it as stored
            from device.acl.raw_checks import device_reader

            ggml.raw_reader = device_reader(_device_index(spec.ggml_name))
        return ggml
    if spec.kind is DeviceKind.ACL:
        _check_acl_importable()
        from device.acl.device import open_acl_device

        return open_acl_device(spec.acl_index)
    try:
        device = _plugin_factory(spec)(options)
    except DeviceError as exc:
        message = str(exc)
        raise DeviceError(message if spec.text in message else f"device plug-in {spec.text!r}: {message}") from None
    except Exception as exc:  # the factory's own failure, named with the device it was opening
        raise DeviceError(f"device plug-in {spec.text!r} failed to open: {type(exc).__name__}: {exc}") from None
    missing = [m for m in CONTRACT_MEMBERS if not hasattr(device, m)]
    if missing:
        raise DeviceError(f"device plug-in {spec.text!r} lacks {', '.join(missing)} (see the Device contract)")
    return device


def import_root(spec: DeviceSpec) -> str | None:
    """The absolute directory a plug-in's module imports from (the ``sys.path`` entry holding its
    top-level package), or None when that cannot be told (a module not found, a zip import)."""
    if spec.kind is not DeviceKind.PLUGIN:
        return None
    plugins_import_from_cwd()
    try:
        found = importlib.util.find_spec(spec.module)
    except (ImportError, ValueError):
        return None
    if found is None or not found.origin or not os.path.isfile(found.origin):
        return None
    path = os.path.dirname(os.path.abspath(found.origin))  # the folder of module.py or of pkg/__init__.py
    levels = spec.module.count(".") + (1 if found.submodule_search_locations is not None else 0)
    for _ in range(levels):
        path = os.path.dirname(path)
    return path


def _device_index(ggml_name: str) -> int:
    """The runtime's device index of a ggml device name: ggml-cann names device N ``CANN<N>``."""
    digits = "".join(ch for ch in ggml_name if ch.isdigit())
    return int(digits) if digits else 0


def check_spec(spec: DeviceSpec | str, options: dict[str, Any] | None = None, load_libraries: bool = True) -> None:
    """Check that ``spec`` names a device that can be opened, without opening it.

    Raises :class:`DeviceError` with a one-line reason: an unknown spec form, a ggml directory
    that is not a matching ggml build, a ggml device name the library does not have (``ggml:CPU7``),
    a plug-in module that does not import or lacks its factory. ``conform run`` calls this for
    every device before it starts pytest, so bad input is one line and not a failed session.
    With ``load_libraries=False`` the ggml directory is only looked at, not loaded (the pytest
    plug-in's check: loading ggml loads its backends, and CANN's starts the ACL runtime, in that
    process); the device name is then checked when the device opens.
    """
    spec = DeviceSpec.of(spec)
    options = dict(options or {})
    if spec.kind is DeviceKind.GGML:
        from device.ggml import lib as ggml_lib

        if not load_libraries:
            ggml_lib.resolve_lib_dir(options.get("ggml_lib"))
            return
        lib = ggml_lib.load(options.get("ggml_lib"))
        names = lib.device_names()
        if spec.ggml_name not in names:
            raise DeviceError(
                f"unknown ggml device {spec.ggml_name!r} in {lib.lib_dir} (devices: {', '.join(names) or 'none'})"
            )
    elif spec.kind is DeviceKind.ACL:
        _check_acl_importable()
    elif spec.kind is DeviceKind.PLUGIN:
        _plugin_factory(spec)


def expand_specs(specs: Iterable[DeviceSpec | str], options: dict[str, Any] | None = None) -> list[DeviceSpec]:
    """Parse each spec and expand patterns over ggml device names (``ggml:CANN*``); duplicates go."""
    out: list[DeviceSpec] = []
    for given in specs:
        spec = DeviceSpec.of(given)
        if spec.is_pattern:
            from device.ggml import lib as ggml_lib

            names = ggml_lib.load((options or {}).get("ggml_lib")).device_names()
            matched = [DeviceSpec.ggml(n) for n in names if fnmatch.fnmatchcase(n, spec.ggml_name)]
            if not matched:
                raise DeviceError(f"no ggml device matches {spec.ggml_name!r} (devices: {', '.join(names) or 'none'})")
            out.extend(matched)
        else:
            out.append(spec)
    return list(dict.fromkeys(out))

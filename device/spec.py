"""``--device`` specs, parsed once into a :class:`DeviceSpec` that every process hands on as is.

Forms:
* ``golden`` — the NumPy oracle.
* ``ggml:NAME`` — a ggml backend device by its registry name (``ggml:CPU``, ``ggml:CANN0``); ``NAME``
  may be an fnmatch pattern (``ggml:CANN*``), which :func:`device.registry.expand_specs` expands.
* ``acl:N`` — Ascend NPU ``N`` driven directly through aclnn.
* ``package.module:factory`` — a third-party device plug-in.

A spec's text (:meth:`DeviceSpec.text`, also ``str(spec)``) is canonical: ``DeviceSpec.parse(spec.text)
== spec``. It is what results records, repro lines and pytest ids carry, and what crosses to xdist
workers (which take only plain values).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from device.base import DeviceError

USAGE = "use golden, ggml:NAME (e.g. ggml:CPU), acl:N, or package.module:factory"
GLOB_CHARS = "*?["


class DeviceKind(StrEnum):
    GOLDEN = "golden"
    GGML = "ggml"
    ACL = "acl"
    PLUGIN = "plugin"


@dataclass(frozen=True)
class DeviceSpec:
    """One device as the user named it. Build it with :meth:`parse` or the ``golden``/``ggml``/
    ``acl``/``plugin`` constructors; the fields that do not belong to ``kind`` stay empty."""

    kind: DeviceKind
    ggml_name: str = ""  # GGML: the backend device name, or an fnmatch pattern over them
    acl_index: int = -1  # ACL: the NPU index
    module: str = ""  # PLUGIN: the importable module
    factory: str = ""  # PLUGIN: the callable in it, called as factory(options)

    # -- construction ----------------------------------------------------------------------------
    @classmethod
    def golden(cls) -> DeviceSpec:
        return cls(DeviceKind.GOLDEN)

    @classmethod
    def ggml(cls, name: str) -> DeviceSpec:
        if not name:
            raise DeviceError("ggml device spec needs a device name, e.g. ggml:CPU")
        return cls(DeviceKind.GGML, ggml_name=name)

    @classmethod
    def acl(cls, index: int) -> DeviceSpec:
        if index < 0:
            raise DeviceError(f"acl device index must be 0 or more (got {index})")
        return cls(DeviceKind.ACL, acl_index=index)

    @classmethod
    def plugin(cls, module: str, factory: str) -> DeviceSpec:
        return cls(DeviceKind.PLUGIN, module=module, factory=factory)

    @classmethod
    def parse(cls, text: str) -> DeviceSpec:
        """The spec ``text`` names; :class:`DeviceError` with a one-line reason when it names none.

        Only the form is checked here: whether the ggml device exists or the plug-in imports is
        :func:`device.registry.check_spec`'s business.
        """
        text = text.strip()
        if text == "golden":
            return cls.golden()
        prefix, colon, rest = text.partition(":")
        if prefix == "ggml":
            return cls.ggml(rest)
        if prefix == "acl":
            if not rest.isdigit():
                raise DeviceError(f"acl device spec needs an index, e.g. acl:0 (got {text!r})")
            return cls.acl(int(rest))
        if colon and _is_dotted_name(prefix) and rest.isidentifier():
            return cls.plugin(prefix, rest)
        raise DeviceError(f"unknown device {text!r}: {USAGE}")

    @classmethod
    def of(cls, spec: DeviceSpec | str) -> DeviceSpec:
        """``spec`` itself, or parsed when it is still the user's text (API entry points take both)."""
        return spec if isinstance(spec, DeviceSpec) else cls.parse(spec)

    # -- reading ---------------------------------------------------------------------------------
    @property
    def text(self) -> str:
        if self.kind is DeviceKind.GOLDEN:
            return "golden"
        if self.kind is DeviceKind.GGML:
            return f"ggml:{self.ggml_name}"
        if self.kind is DeviceKind.ACL:
            return f"acl:{self.acl_index}"
        return f"{self.module}:{self.factory}"

    def __str__(self) -> str:
        return self.text

    @property
    def is_pattern(self) -> bool:
        """A ggml spec whose name is a pattern (``ggml:CANN*``) rather than one device."""
        return self.kind is DeviceKind.GGML and any(ch in self.ggml_name for ch in GLOB_CHARS)


def _is_dotted_name(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))

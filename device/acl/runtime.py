"""The ACL runtime (libascendcl) through ctypes: every call checked, every resource scoped."""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from device.acl.errors import ACL_ERROR_REPEAT_INITIALIZE, ACL_SUCCESS, AclError
from device.acl.loader import AclLibraries
from device.acl.prototypes import (
    OPTIONAL_RUNTIME_FUNCTIONS,
    RUNTIME_PROTOTYPES,
    AclCANNPackageVersion,
    ctypes_signature,
    parse_prototype,
)

# aclrtMemcpyKind
MEMCPY_HOST_TO_HOST = 0
MEMCPY_HOST_TO_DEVICE = 1
MEMCPY_DEVICE_TO_HOST = 2
MEMCPY_DEVICE_TO_DEVICE = 3
# aclrtMemMallocPolicy: what ggml-cann uses for tensors
MEM_MALLOC_HUGE_FIRST = 0
# aclrtMemAttr
DDR_MEM = 0
HBM_MEM = 1
# aclCANNPackageName
PKG_NAME_CANN = 0
# ACL_PKG_VERSION_MAX_SIZE: the buffer aclsysGetVersionStr writes into
VERSION_STRING_SIZE = 128
# The package aclsysGetVersionStr is asked about: "runtime" is the name CANN's own sample uses.
VERSION_PACKAGE = b"runtime"


def bind_function(library: ctypes.CDLL, prototype_text: str) -> Callable[..., Any]:
    """Look up one function and give it the argtypes/restype of its C prototype."""
    proto = parse_prototype(prototype_text)
    function = getattr(library, proto.name)  # AttributeError when the symbol is absent
    function.restype, function.argtypes = ctypes_signature(proto)
    return function


def _decode(raw: bytes | None) -> str:
    return raw.decode("utf-8", "replace") if raw else ""


@dataclass(frozen=True)
class MemInfo:
    free: int
    total: int


class AclRuntime:
    """The bound runtime functions of one loaded libascendcl.

    Methods raise :class:`AclError` on a non-zero status. Low-level methods map one-to-one to ACL
    calls; the context managers (:meth:`device_buffer`, :meth:`stream`, :meth:`using_device`,
    :meth:`initialized`) pair each acquisition with its release, also when the body raises.
    """

    def __init__(self, libraries: AclLibraries) -> None:
        self.libraries = libraries
        self._fn: dict[str, Callable[..., Any]] = {}
        for text in RUNTIME_PROTOTYPES:
            name = parse_prototype(text).name
            try:
                self._fn[name] = bind_function(libraries.runtime, text)
            except AttributeError:
                if name not in OPTIONAL_RUNTIME_FUNCTIONS:
                    raise
        self.initialized_here = False

    def has(self, name: str) -> bool:
        return name in self._fn

    # -- error reporting ---------------------------------------------------------------------
    def recent_error_message(self) -> str:
        """``aclGetRecentErrMsg()``: the runtime's text for the last failure ("" if none)."""
        return _decode(self._fn["aclGetRecentErrMsg"]())

    def check(self, function: str, status: int) -> None:
        if status != ACL_SUCCESS:
            raise AclError(function, status, self.recent_error_message())

    def _call(self, name: str, *args: Any) -> None:
        self.check(name, self._fn[name](*args))

    # -- init / devices ----------------------------------------------------------------------
    def init(self, config_path: str | None = None) -> bool:
        """``aclInit``; returns False when ACL was already initialised in this process (ggml's
        backend registration may have done it), which is not an error for us."""
        encoded = config_path.encode() if config_path is not None else None
        status = self._fn["aclInit"](encoded)
        if status == ACL_ERROR_REPEAT_INITIALIZE:
            return False
        self.check("aclInit", status)
        self.initialized_here = True
        return True

    def finalize(self) -> None:
        self._call("aclFinalize")
        self.initialized_here = False

    @contextmanager
    def initialized(self, config_path: str | None = None) -> Iterator[AclRuntime]:
        """aclInit on entry; aclFinalize on exit only if this call initialised ACL."""
        did_init = self.init(config_path)
        try:
            yield self
        finally:
            if did_init:
                self.finalize()

    def device_count(self) -> int:
        count = ctypes.c_uint32(0)
        self._call("aclrtGetDeviceCount", ctypes.byref(count))
        return count.value

    def set_device(self, index: int) -> None:
        self._call("aclrtSetDevice", index)

    def reset_device(self, index: int) -> None:
        self._call("aclrtResetDevice", index)

    @contextmanager
    def using_device(self, index: int) -> Iterator[int]:
        """aclrtSetDevice for this thread, aclrtResetDevice on exit (the pair is ref-counted)."""
        self.set_device(index)
        try:
            yield index
        finally:
            self.reset_device(index)

    def soc_name(self) -> str | None:
        """``aclrtGetSocName()``; None when it returns NULL. With several cards it always
        describes device 0 (ACL's documented behaviour)."""
        raw = self._fn["aclrtGetSocName"]()
        return _decode(raw) if raw else None

    def mem_info(self, attr: int = HBM_MEM) -> MemInfo:
        """``aclrtGetMemInfo`` for the current device (needs set_device first)."""
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        self._call("aclrtGetMemInfo", attr, ctypes.byref(free), ctypes.byref(total))
        return MemInfo(free=free.value, total=total.value)

    # -- memory ------------------------------------------------------------------------------
    def malloc(self, size: int, policy: int = MEM_MALLOC_HUGE_FIRST) -> int:
        pointer = ctypes.c_void_p(None)
        self._call("aclrtMalloc", ctypes.byref(pointer), size, policy)
        if not pointer.value:
            raise AclError("aclrtMalloc", None, self.recent_error_message())
        return pointer.value

    def free(self, address: int) -> None:
        self._call("aclrtFree", address)

    @contextmanager
    def device_buffer(self, size: int, policy: int = MEM_MALLOC_HUGE_FIRST) -> Iterator[int]:
        """A device allocation of ``size`` bytes, freed on exit."""
        address = self.malloc(size, policy)
        try:
            yield address
        finally:
            self.free(address)

    def memcpy(self, dst: int, dst_max: int, src: int, count: int, kind: int) -> None:
        self._call("aclrtMemcpy", dst, dst_max, src, count, kind)

    def memset(self, address: int, max_count: int, value: int, count: int) -> None:
        self._call("aclrtMemset", address, max_count, value, count)

    def upload(self, dst: int, data: bytes | bytearray | memoryview) -> None:
        """Host bytes -> device (synchronous aclrtMemcpy HOST_TO_DEVICE)."""
        buffer = (ctypes.c_char * len(data)).from_buffer_copy(data)
        self.memcpy(dst, len(data), ctypes.addressof(buffer), len(data), MEMCPY_HOST_TO_DEVICE)

    def download(self, src: int, size: int) -> bytes:
        """Device -> host bytes (synchronous aclrtMemcpy DEVICE_TO_HOST)."""
        buffer = ctypes.create_string_buffer(size)
        self.memcpy(ctypes.addressof(buffer), size, src, size, MEMCPY_DEVICE_TO_HOST)
        return buffer.raw

    # -- streams -----------------------------------------------------------------------------
    def create_stream(self) -> int:
        handle = ctypes.c_void_p(None)
        self._call("aclrtCreateStream", ctypes.byref(handle))
        return handle.value or 0

    def destroy_stream(self, stream: int) -> None:
        self._call("aclrtDestroyStream", stream)

    def synchronize_stream(self, stream: int) -> None:
        self._call("aclrtSynchronizeStream", stream)

    @contextmanager
    def stream(self) -> Iterator[int]:
        handle = self.create_stream()
        try:
            yield handle
        finally:
            self.destroy_stream(handle)

    # -- versions ----------------------------------------------------------------------------
    def cann_version(self) -> str | None:
        """The CANN version string: ``aclsysGetVersionStr`` where the runtime has it (newest
        CANN), else ``aclsysGetCANNVersion(ACL_PKG_NAME_CANN)``; None when neither answers."""
        if self.has("aclsysGetVersionStr"):
            package = ctypes.create_string_buffer(VERSION_PACKAGE)
            text = ctypes.create_string_buffer(VERSION_STRING_SIZE)
            if self._fn["aclsysGetVersionStr"](package, text) == ACL_SUCCESS and text.value:
                return _decode(text.value)
        if self.has("aclsysGetCANNVersion"):
            version = AclCANNPackageVersion()
            if self._fn["aclsysGetCANNVersion"](PKG_NAME_CANN, ctypes.byref(version)) == ACL_SUCCESS:
                return _decode(version.version) or None
        return None

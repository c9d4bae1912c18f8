"""The aclnn op API: descriptors (libnnopbase) and the two-phase op call (libopapi*)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

from device.acl.errors import ACL_SUCCESS, AclError, AclLibraryNotFound
from device.acl.loader import AclLibraries
from device.acl.prototypes import (
    NNOPBASE_PROTOTYPES,
    OP_FIRST_PHASE_PROTOTYPES,
    OP_SECOND_PHASE,
    op_names,
    parse_prototype,
)
from device.acl.runtime import AclRuntime, bind_function

# aclDataType values (acl_base.h)
ACL_FLOAT = 0
ACL_FLOAT16 = 1
ACL_INT8 = 2
ACL_INT32 = 3
ACL_INT64 = 9
ACL_BOOL = 12
ACL_BF16 = 27
# aclFormat
ACL_FORMAT_ND = 2

_SCALAR_CTYPE: dict[int, Callable[[Any], ctypes._SimpleCData[Any]]] = {
    ACL_FLOAT: ctypes.c_float, ACL_INT32: ctypes.c_int32, ACL_INT64: ctypes.c_int64, ACL_BOOL: ctypes.c_bool,
}


def _int64_array(values: Sequence[int]) -> ctypes.Array:
    return (ctypes.c_int64 * max(len(values), 1))(*values)


class AclOpApi:
    """Descriptor creation/destruction and :meth:`call` for any bound aclnn op."""

    def __init__(self, runtime: AclRuntime, libraries: AclLibraries) -> None:
        if libraries.nnopbase is None or not libraries.opapi:
            raise AclLibraryNotFound("the aclnn libraries (libnnopbase, libopapi) were not loaded")
        self.runtime = runtime
        self._fn: dict[str, Callable[..., Any]] = {}
        for text in NNOPBASE_PROTOTYPES:
            self._fn[parse_prototype(text).name] = bind_function(libraries.nnopbase, text)
        second_phases = [OP_SECOND_PHASE.format(name=name) for name in op_names()]
        for text in list(OP_FIRST_PHASE_PROTOTYPES) + second_phases:
            name = parse_prototype(text).name
            for library in libraries.opapi:  # first op library that exports the symbol wins
                try:
                    self._fn[name] = bind_function(library, text)
                    break
                except AttributeError:
                    continue
        # an op missing from this CANN is reported when used, not at load

    def has_op(self, op: str) -> bool:
        return f"{op}GetWorkspaceSize" in self._fn and op in self._fn

    def _created(self, function: str, handle: int | None) -> int:
        if not handle:
            raise AclError(function, None, self.runtime.recent_error_message())
        return handle

    def _destroy(self, function: str, handle: int) -> None:
        status = self._fn[function](handle)
        if status != ACL_SUCCESS:
            raise AclError(function, status, self.runtime.recent_error_message())

    # -- descriptors (each a context manager that destroys what it created) -------------------
    def create_tensor(
        self,
        view_dims: Sequence[int],
        data_type: int,
        strides: Sequence[int],
        offset: int,
        storage_dims: Sequence[int],
        data: int,
        acl_format: int = ACL_FORMAT_ND,
    ) -> int:
        """``aclCreateTensor``; dims, strides and offset in elements, row-major (last dim fastest)."""
        if len(strides) != len(view_dims):
            raise ValueError(f"{len(view_dims)} view dims but {len(strides)} strides")
        handle = self._fn["aclCreateTensor"](
            _int64_array(view_dims), len(view_dims), data_type, _int64_array(strides), offset,
            acl_format, _int64_array(storage_dims), len(storage_dims), data,
        )
        return self._created("aclCreateTensor", handle)

    def destroy_tensor(self, handle: int) -> None:
        self._destroy("aclDestroyTensor", handle)

    @contextmanager
    def tensor(self, view_dims: Sequence[int], data_type: int, strides: Sequence[int], offset: int,
               storage_dims: Sequence[int], data: int, acl_format: int = ACL_FORMAT_ND) -> Iterator[int]:
        handle = self.create_tensor(view_dims, data_type, strides, offset, storage_dims, data, acl_format)
        try:
            yield handle
        finally:
            self.destroy_tensor(handle)

    def create_scalar(self, value: float | int | bool, data_type: int) -> int:
        """``aclCreateScalar`` from a host value of the given aclDataType."""
        try:
            holder = _SCALAR_CTYPE[data_type](value)
        except KeyError:
            raise ValueError(f"no host scalar type for aclDataType {data_type}") from None
        return self._created("aclCreateScalar", self._fn["aclCreateScalar"](ctypes.byref(holder), data_type))

    @contextmanager
    def scalar(self, value: float | int | bool, data_type: int = ACL_FLOAT) -> Iterator[int]:
        handle = self.create_scalar(value, data_type)
        try:
            yield handle
        finally:
            self._destroy("aclDestroyScalar", handle)

    @contextmanager
    def int_array(self, values: Sequence[int]) -> Iterator[int]:
        handle = self._created(
            "aclCreateIntArray", self._fn["aclCreateIntArray"](_int64_array(values), len(values))
        )
        try:
            yield handle
        finally:
            self._destroy("aclDestroyIntArray", handle)

    @contextmanager
    def float_array(self, values: Sequence[float]) -> Iterator[int]:
        array = (ctypes.c_float * max(len(values), 1))(*values)
        handle = self._created("aclCreateFloatArray", self._fn["aclCreateFloatArray"](array, len(values)))
        try:
            yield handle
        finally:
            self._destroy("aclDestroyFloatArray", handle)

    @contextmanager
    def bool_array(self, values: Sequence[bool]) -> Iterator[int]:
        array = (ctypes.c_bool * max(len(values), 1))(*values)
        handle = self._created("aclCreateBoolArray", self._fn["aclCreateBoolArray"](array, len(values)))
        try:
            yield handle
        finally:
            self._destroy("aclDestroyBoolArray", handle)

    # -- the two-phase call ------------------------------------------------------------------
    def call(self, op: str, *args: Any, stream: int) -> int:
        """Run ``op`` (``"aclnnAdd"``...) with its first-phase arguments (without the trailing
        workspace-size and executor pointers), then the second phase on ``stream``.

        The workspace is device memory allocated between the phases; the stream is synchronised
        before it is freed, because the kernel may still be reading it after the launch returns.
        On a failed second phase the workspace is freed too. Returns the workspace size.
        """
        if not self.has_op(op):
            raise AclLibraryNotFound(f"{op} is not exported by the loaded aclnn libraries (older CANN?)")
        workspace_size = ctypes.c_uint64(0)
        executor = ctypes.c_void_p(None)
        first = f"{op}GetWorkspaceSize"
        status = self._fn[first](*args, ctypes.byref(workspace_size), ctypes.byref(executor))
        if status != ACL_SUCCESS:
            raise AclError(first, status, self.runtime.recent_error_message())
        size = workspace_size.value
        with ExitStack() as scope:
            workspace = scope.enter_context(self.runtime.device_buffer(size)) if size > 0 else None
            status = self._fn[op](workspace, size, executor, stream)
            if status != ACL_SUCCESS:
                raise AclError(op, status, self.runtime.recent_error_message())
            self.runtime.synchronize_stream(stream)
        return size

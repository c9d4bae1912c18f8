"""The ``acl:N`` device: a handful of ggml ops run directly through aclnn, without ggml.

It exists for triage. When ``ggml:CANN0`` fails a case and ``acl:0`` passes it, the aclnn kernel is
fine and the fault is in ggml-cann's glue (tensor mapping, broadcasting, casts, buffers); when both
fail, the kernel itself is suspect. So each op is mapped the way ggml-cann maps it (same aclnn op,
same dim order, same ``cubeMathType``), and only cases aclnn can express directly are accepted: ggml's
cyclic-tiling broadcast, masks, ALiBi and quantized types raise :class:`Unsupported`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from device.acl.errors import AclError
from device.acl.inventory import open_libraries
from device.acl.loader import STANDARD_INSTALL_ROOTS
from device.acl.opapi import ACL_FLOAT, AclOpApi
from device.acl.runtime import HBM_MEM, MEMCPY_DEVICE_TO_HOST, MEMCPY_HOST_TO_DEVICE, AclRuntime
from device.acl.staging import StagedTensor, acl_view, contiguous, device_dtype, stage
from device.base import DeviceError, RunResult, Unsupported, output_dtype
from golden import dtypes
from golden.case import OpCase, TensorSpec

BINARY_OPS = {"ADD": "aclnnAdd", "MUL": "aclnnMul", "DIV": "aclnnDiv"}
UNARY_OPS = {"SILU": "aclnnSilu", "GELU": "aclnnGelu"}
# ggml op -> the aclnn op ggml-cann uses for it
ACLNN_OP = {**BINARY_OPS, **UNARY_OPS, "SOFT_MAX": "aclnnSoftmax", "MUL_MAT": "aclnnMatmul",
            "CPY": "aclnnCast"}
FLOAT_TYPES = dtypes.FLOAT_TYPES
# ggml-cann calls aclnnMatmul with ALLOW_FP32_DOWN_PRECISION (1); the device mirrors it by default
DEFAULT_CUBE_MATH_TYPE = 1


@dataclass
class _Buffers:
    """Device allocations of one run, with the host staging each came from."""

    staged: list[StagedTensor] = field(default_factory=list)
    addresses: list[int] = field(default_factory=list)


class AclDevice:
    """Implements :class:`device.base.Device` for one NPU, by index."""

    def __init__(self, runtime: AclRuntime, opapi: AclOpApi, index: int,
                 cube_math_type: int = DEFAULT_CUBE_MATH_TYPE) -> None:
        self.name = f"acl:{index}"
        self.index = index
        self.runtime = runtime
        self.opapi = opapi
        self.cube_math_type = cube_math_type
        self._lock = threading.Lock()  # one stream per device: runs are serialised
        self._stream: int | None = None
        runtime.set_device(index)  # held until close(): keeps the device context alive
        try:
            self._stream = runtime.create_stream()
        except AclError:
            runtime.reset_device(index)
            raise

    # -- contract ----------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        with self.runtime.using_device(self.index):
            memory = self.runtime.mem_info(HBM_MEM)
        soc_name = self.runtime.soc_name()
        return {
            # the keys every device reports in the results header (results/RESULTS.md)
            "spec": self.name,
            "name": self.name,
            "description": f"{soc_name or 'Ascend NPU'} via aclnn (no ggml)",
            "backend": "aclnn",
            "memory_free": memory.free,
            "memory_total": memory.total,
            # ACL specifics
            "index": self.index,
            "soc_name": soc_name,
            "hbm_free": memory.free,
            "hbm_total": memory.total,
            "cann_version": self.runtime.cann_version(),
            "libraries": dict(self.runtime.libraries.paths),
            "cube_math_type": self.cube_math_type,
        }

    def supports(self, case: OpCase) -> bool | None:
        try:
            self._check(case)
        except Unsupported:
            return False
        return True

    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        self._check(case)
        if self._stream is None:
            raise DeviceError(f"{self.name} is closed")
        with self._lock, ExitStack() as scope:
            # aclrtSetDevice is per thread: make this thread's current device ours for the run
            scope.enter_context(self.runtime.using_device(self.index))
            buffers = _Buffers()
            for spec, values in zip(case.inputs, inputs, strict=True):
                self._upload(scope, buffers, stage(spec, values))
            started = time.perf_counter()
            output, workspace = self._dispatch(scope, case, buffers)
            elapsed = time.perf_counter() - started
            result = self._download(output)
            inputs_after = [
                staged.logical(self._read_storage(staged, address))
                for staged, address in zip(
                    buffers.staged[: len(inputs)], buffers.addresses[: len(inputs)], strict=True
                )
            ]
        return RunResult(  # in the contract's array type for the destination (from_storage gives float64)
            output=result.reshape(tuple(reversed(output[0].ne))).astype(output_dtype(output[0].dtype), copy=False),
            inputs_after=inputs_after,
            extra={"acl_seconds": elapsed, "workspace_bytes": workspace},
        )

    def close(self) -> None:
        if self._stream is None:
            return
        stream, self._stream = self._stream, None
        try:
            self.runtime.destroy_stream(stream)
        finally:
            self.runtime.reset_device(self.index)

    def __enter__(self) -> AclDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what can be expressed ---------------------------------------------------------------
    def _check(self, case: OpCase) -> None:  # noqa: C901  (one flat list of aclnn limits; refactor with an NPU to check it on)
        """Raise Unsupported unless aclnn can run this case as given."""
        for spec in case.inputs:
            device_dtype(spec.dtype)
            if 0 in spec.ne:
                raise Unsupported("empty tensors are not sent to aclnn")
        op = case.op
        if op in BINARY_OPS:
            a, b = _inputs(case, 2)
            _float_types(case, a, b)
            for i in range(4):
                if b.ne[i] not in (1, a.ne[i]):
                    raise Unsupported(
                        f"ggml tiles src1 cyclically (ne1[{i}]={b.ne[i]} into {a.ne[i]}); "
                        "aclnn broadcasting only repeats size-1 dims"
                    )
        elif op in UNARY_OPS:
            (a,) = _inputs(case, 1)
            _float_types(case, a)
        elif op == "SOFT_MAX":
            if len(case.inputs) != 1:
                raise Unsupported("SOFT_MAX with a mask or sinks has no single aclnn op")
            (a,) = case.inputs
            if case.param("scale", 1.0) != 1.0 or case.param("max_bias", 0.0) != 0.0:
                raise Unsupported("SOFT_MAX scale/max_bias need more than aclnnSoftmax")
            if a.dtype != "f32" or case.dst != "f32":
                raise Unsupported("ggml SOFT_MAX is F32")
        elif op == "MUL_MAT":
            a, b = _inputs(case, 2)
            _float_types(case, a, b)
            if case.dst != "f32":
                raise Unsupported("ggml MUL_MAT writes F32")
            if a.ne[0] != b.ne[0] or b.ne[2] % a.ne[2] or b.ne[3] % a.ne[3]:
                raise Unsupported("MUL_MAT shapes ggml itself rejects")
        elif op == "CPY":
            (a,) = _inputs(case, 1)
            device_dtype(case.dst)
            dst_ne = case.param("dst_ne", None)
            if dst_ne is not None and tuple(dst_ne) != tuple(a.ne):
                raise Unsupported("CPY into a different shape is a reshape ggml does, not aclnnCast")
        else:
            raise Unsupported(f"acl device does not run {op}")
        aclnn = ACLNN_OP[op]
        if not self.opapi.has_op(aclnn):
            raise Unsupported(f"{aclnn} is not exported by the loaded aclnn libraries")

    # -- device memory -----------------------------------------------------------------------
    def _upload(self, scope: ExitStack, buffers: _Buffers, staged: StagedTensor) -> int:
        address = scope.enter_context(self.runtime.device_buffer(staged.nbytes))
        data = np.ascontiguousarray(staged.storage)
        self.runtime.memcpy(address, staged.nbytes, data.ctypes.data, staged.nbytes, MEMCPY_HOST_TO_DEVICE)
        buffers.staged.append(staged)
        buffers.addresses.append(address)
        return address

    def _read_storage(self, staged: StagedTensor, address: int) -> np.ndarray:
        out = np.empty_like(staged.storage)
        self.runtime.memcpy(out.ctypes.data, out.nbytes, address, out.nbytes, MEMCPY_DEVICE_TO_HOST)
        return out

    def _download(self, pair: tuple[StagedTensor, int]) -> np.ndarray:
        staged, address = pair
        return staged.logical(self._read_storage(staged, address)).reshape(-1)

    def _tensor(self, scope: ExitStack, dtype: str, ne: Sequence[int], nb: Sequence[int], offset: int,
                address: int) -> int:
        dims, strides, storage = acl_view(ne, nb, offset)
        return scope.enter_context(
            self.opapi.tensor(dims, device_dtype(dtype).acl_type, strides, offset, storage, address)
        )

    def _staged_tensor(self, scope: ExitStack, staged: StagedTensor, address: int) -> int:
        return self._tensor(scope, staged.dtype, staged.ne, staged.nb, staged.offset, address)

    def _new_output(self, scope: ExitStack, buffers: _Buffers, dtype: str, ne: Sequence[int]) -> tuple[
            StagedTensor, int, int]:
        staged = contiguous(dtype, ne)
        address = self._upload(scope, buffers, staged)
        return staged, address, self._staged_tensor(scope, staged, address)

    # -- ops ---------------------------------------------------------------------------------
    def _dispatch(self, scope: ExitStack, case: OpCase, buffers: _Buffers) -> tuple[
            tuple[StagedTensor, int], dict[str, int]]:
        """Create the aclTensors, run the op; returns the output buffer and workspace sizes."""
        stream = self._stream
        assert stream is not None
        workspace: dict[str, int] = {}
        pairs = zip(buffers.staged, buffers.addresses, strict=True)
        ins = [self._staged_tensor(scope, staged, address) for staged, address in pairs]
        if case.op == "MUL_MAT":
            return self._mul_mat(scope, buffers, ins, workspace), workspace
        out_staged, out_address, out = self._new_output(scope, buffers, case.dst, buffers.staged[0].ne)
        name, args = self._single_op_arguments(scope, case, ins, out)
        workspace[name] = self.opapi.call(name, *args, stream=stream)
        return (out_staged, out_address), workspace

    def _single_op_arguments(self, scope: ExitStack, case: OpCase, ins: list[int], out: int) -> tuple[
            str, tuple[Any, ...]]:
        """The aclnn op and its first-phase arguments for the ops that map to one call."""
        name = ACLNN_OP[case.op]
        if case.op == "ADD":
            alpha = scope.enter_context(self.opapi.scalar(1.0, ACL_FLOAT))  # as ggml-cann: alpha = 1.0f
            return name, (ins[0], ins[1], alpha, out)
        if case.op in BINARY_OPS:
            return name, (ins[0], ins[1], out)
        if case.op in UNARY_OPS:
            return name, (ins[0], out)
        if case.op == "SOFT_MAX":
            # ggml softmax runs along ne[0], the last of the 4 ACL dims (ggml-cann passes dim 3)
            return name, (ins[0], 3, out)
        return name, (ins[0], device_dtype(case.dst).acl_type, out)  # CPY

    def _mul_mat(self, scope: ExitStack, buffers: _Buffers, ins: list[int],
                 workspace: dict[str, int]) -> tuple[StagedTensor, int]:
        """dst[n, m, i2, i3] = sum_k a[k, n, i2/r2, i3/r3] * b[k, m, i2, i3] as one aclnnMatmul.

        ACL computes self @ mat2 = b[M,K] @ a^T[K,N]; a^T is a's view with ne0/ne1 and nb0/nb1
        swapped, as ggml-cann does. ggml broadcasts a's batch blocks (b slice i2 uses a slice
        i2 // r2), which numpy-style broadcasting can express by splitting b's batch dim into
        (r2, ne2 of a) and giving a a size-1 dim for r2.
        """
        stream = self._stream
        assert stream is not None
        (a, a_addr), (b, b_addr) = zip(buffers.staged[:2], buffers.addresses[:2], strict=True)
        compute = a.dtype
        if b.dtype != compute:  # aclnnMatmul wants one dtype: convert src1 on the device
            b_conv, b_conv_addr, b_conv_tensor = self._new_output(scope, buffers, compute, b.ne)
            workspace["aclnnCast(src1)"] = self.opapi.call(
                "aclnnCast", ins[1], device_dtype(compute).acl_type, b_conv_tensor, stream=stream
            )
            b, b_addr = b_conv, b_conv_addr
        K, N, M = a.ne[0], a.ne[1], b.ne[1]
        a_ne, a_nb = [N, K], [a.nb[1], a.nb[0]]  # transposed: ACL sees [.., K, N]
        b_ne, b_nb = [K, M], [b.nb[0], b.nb[1]]
        out_ne = [N, M]
        for dim in (2, 3):
            r = b.ne[dim] // a.ne[dim]
            if r > 1 and a.ne[dim] > 1:
                b_ne += [r, a.ne[dim]]
                b_nb += [b.nb[dim], b.nb[dim] * r]
                a_ne += [1, a.ne[dim]]
                a_nb += [0, a.nb[dim]]
                out_ne += [r, a.ne[dim]]
            else:
                b_ne.append(b.ne[dim])
                b_nb.append(b.nb[dim])
                a_ne.append(a.ne[dim])
                a_nb.append(a.nb[dim])
                out_ne.append(b.ne[dim])
        final_ne = [N, M, b.ne[2], b.ne[3]]
        mat2 = self._tensor(scope, a.dtype, a_ne, a_nb, a.offset, a_addr)
        self_ = self._tensor(scope, b.dtype, b_ne, b_nb, b.offset, b_addr)
        out_nb = [1]
        for n in out_ne[:-1]:
            out_nb.append(out_nb[-1] * n)
        if compute == "f32":
            result, result_addr = self._new_output(scope, buffers, "f32", final_ne)[:2]
            out = self._tensor(scope, "f32", out_ne, out_nb, 0, result_addr)
            workspace["aclnnMatmul"] = self.opapi.call(
                "aclnnMatmul", self_, mat2, out, self.cube_math_type, stream=stream
            )
            return result, result_addr
        # half-precision inputs: matmul in that type, then widen to F32 (ggml's dst type)
        low, low_addr = self._new_output(scope, buffers, compute, final_ne)[:2]
        low_out = self._tensor(scope, compute, out_ne, out_nb, 0, low_addr)
        workspace["aclnnMatmul"] = self.opapi.call(
            "aclnnMatmul", self_, mat2, low_out, self.cube_math_type, stream=stream
        )
        result, result_addr, result_tensor = self._new_output(scope, buffers, "f32", final_ne)
        low_tensor = self._staged_tensor(scope, low, low_addr)
        workspace["aclnnCast(dst)"] = self.opapi.call("aclnnCast", low_tensor, ACL_FLOAT, result_tensor,
                                                      stream=stream)
        return result, result_addr


def _inputs(case: OpCase, count: int) -> tuple[TensorSpec, ...]:
    if len(case.inputs) != count:
        raise Unsupported(f"{case.op} with {len(case.inputs)} inputs (expected {count})")
    return case.inputs


def _float_types(case: OpCase, *specs: TensorSpec) -> None:
    for spec in specs:
        if spec.dtype not in FLOAT_TYPES:
            raise Unsupported(f"{case.op} on {spec.dtype} is not run through aclnn here")
    if case.op != "MUL_MAT" and case.dst not in FLOAT_TYPES:
        raise Unsupported(f"{case.op} into {case.dst}")


def open_acl_device(
    index: int,
    environ: Mapping[str, str] | None = None,
    install_roots: Sequence[Path] = STANDARD_INSTALL_ROOTS,
    cube_math_type: int = DEFAULT_CUBE_MATH_TYPE,
) -> AclDevice:
    """Open ``acl:<index>``: load the CANN libraries, aclInit (tolerating an earlier init by ggml),
    check the index, select the device and create its stream. Raises :class:`DeviceError`
    (:class:`AclLibraryNotFound` when there is no toolkit) with a one-line message."""
    runtime, opapi = open_libraries(environ, install_roots, need_ops=True)
    assert opapi is not None
    count = runtime.device_count()
    if not 0 <= index < count:
        raise DeviceError(f"acl:{index}: no such NPU (this host has {count})")
    return AclDevice(runtime, opapi, index, cube_math_type)

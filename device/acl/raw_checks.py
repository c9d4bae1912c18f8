"""Raw device-memory reads for the ``ggml:CANN*`` device.

ggml-cann does not keep quantized tensors in ggml's block layout, and ggml's own ``get_tensor``
converts back, so a layout bug can cancel itself out in a round trip. These helpers read the bytes
as they really are on the device (``aclrtMemcpy`` DEVICE_TO_HOST from the tensor's data address)
and record device memory around a run. They only read: what the bytes must be is the verdict's
business (``conformance/verdict/raw.py`` compares them with ``golden.quant.to_cann``).

Typical use (the ggml device calls the reader with its tensors' addresses and allocation sizes)::

    read = device_reader(0)            # opens the libascendcl ggml-cann already loaded, on first use
    stored = read(tensor_data, alloc_size)
    runtime = open_process_runtime()
    before = memory_snapshot(runtime, 0)
    ...
    delta = memory_snapshot(runtime, 0).used_since(before)
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from device.acl.inventory import open_runtime
from device.acl.loader import RUNTIME_LIBRARY
from device.acl.runtime import HBM_MEM, MEMCPY_DEVICE_TO_HOST, AclRuntime
from device.base import RawMemoryReader


def loaded_library_dir(name: str = RUNTIME_LIBRARY, maps: Path = Path("/proc/self/maps")) -> Path | None:
    """The directory of ``name`` if it is already mapped into this process (Linux), else None."""
    try:
        text = maps.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        fields = line.split(maxsplit=5)  # address perms offset dev inode [path]
        if len(fields) == 6 and Path(fields[5]).name == name:
            return Path(fields[5]).parent
    return None


def open_process_runtime(environ: Mapping[str, str] | None = None) -> AclRuntime:
    """The ACL runtime for reading ggml-cann's buffers: the very libascendcl ggml already loaded
    when there is one (a second copy from another toolkit would be a separate runtime that knows
    nothing of ggml's allocations), otherwise the usual discovery."""
    loaded = loaded_library_dir()
    if loaded is not None:
        return open_runtime({"LD_LIBRARY_PATH": str(loaded)}, install_roots=())
    return open_runtime(environ)


def _on_device(runtime: AclRuntime, device_index: int | None) -> Any:
    """aclrtSetDevice for the calling thread when an index is given (ggml may run us on any thread)."""
    return nullcontext() if device_index is None else runtime.using_device(device_index)


def read_device_bytes(
    runtime: AclRuntime, address: int, size: int, device_index: int | None = None
) -> np.ndarray:
    """``size`` bytes at device ``address``, as a uint8 array (synchronous copy)."""
    out = np.empty(size, dtype=np.uint8)
    if size == 0:
        return out
    with _on_device(runtime, device_index):
        runtime.memcpy(out.ctypes.data, size, address, size, MEMCPY_DEVICE_TO_HOST)
    return out


def device_reader(device_index: int, environ: Mapping[str, str] | None = None) -> RawMemoryReader:
    """A :data:`~device.base.RawMemoryReader` for NPU ``device_index``: ``read(address, size)``.

    The runtime is opened on the first read, in the process that reads (the device worker, after
    ggml-cann has loaded libascendcl there)."""
    runtime: list[AclRuntime] = []

    def read(address: int, size: int) -> np.ndarray:
        if not runtime:
            runtime.append(open_process_runtime(environ))
        return read_device_bytes(runtime[0], address, size, device_index)

    return read


@dataclass(frozen=True)
class MemorySnapshot:
    device_index: int
    free: int
    total: int

    def used_since(self, earlier: MemorySnapshot) -> int:
        """Bytes of device memory taken between ``earlier`` and this snapshot (negative: freed)."""
        return earlier.free - self.free

    def as_record(self) -> dict[str, int]:
        return {"device": self.device_index, "free": self.free, "total": self.total}


def memory_snapshot(runtime: AclRuntime, device_index: int) -> MemorySnapshot:
    """``aclrtGetMemInfo(ACL_HBM_MEM)`` of one device, now."""
    with runtime.using_device(device_index):
        info = runtime.mem_info(HBM_MEM)
    return MemorySnapshot(device_index, info.free, info.total)

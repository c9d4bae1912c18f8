"""Raw device-memory checks for the ``ggml:CANN*`` device.

ggml-cann does not keep quantized tensors in ggml's block layout: on upload it packs all quants
first, then all F16 scales, and pads rows to MATRIX_ROW_PADDING with zeros. ggml's own
``get_tensor`` converts back, so a layout bug can cancel itself out in a round trip. These helpers
read the bytes as they really are on the device (``aclrtMemcpy`` DEVICE_TO_HOST from the tensor's
data address) so the suite can compare them with the golden ``golden.quant.to_cann`` layout, check
the padding, and record device memory around a run.

Typical use from the ggml device (the address and sizes come from the ggml tensor)::

    runtime = open_process_runtime()   # the libascendcl ggml-cann already loaded
    before = memory_snapshot(runtime, 0)
    ...
    layout = compare_with_cann_layout(runtime, tensor_data, raw_blocks, "q4_0", device_index=0)
    padding = check_padding_zeroed(runtime, tensor_data, data_size, alloc_size, device_index=0)
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

# How many differing offsets a report keeps: enough to see a pattern, small enough for a record.
MAX_REPORTED_OFFSETS = 16


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


@dataclass(frozen=True)
class ByteComparison:
    """Device bytes against expected bytes."""

    expected_size: int
    mismatched: int  # count of differing bytes
    first_offsets: tuple[int, ...]  # up to MAX_REPORTED_OFFSETS differing byte offsets

    @property
    def ok(self) -> bool:
        return self.mismatched == 0

    def as_record(self) -> dict[str, Any]:
        return {"ok": self.ok, "expected_size": self.expected_size, "mismatched": self.mismatched,
                "first_offsets": list(self.first_offsets)}


def compare_bytes(actual: np.ndarray, expected: np.ndarray) -> ByteComparison:
    expected = np.asarray(expected, dtype=np.uint8).reshape(-1)
    actual = np.asarray(actual, dtype=np.uint8).reshape(-1)
    differing = np.flatnonzero(actual != expected)
    first = tuple(int(i) for i in differing[:MAX_REPORTED_OFFSETS])
    return ByteComparison(len(expected), int(differing.size), first)


def compare_with_cann_layout(
    runtime: AclRuntime, address: int, raw_blocks: np.ndarray, qtype: str, device_index: int | None = None
) -> ByteComparison:
    """Compare the device bytes at ``address`` with ``golden.quant.to_cann(raw_blocks, qtype)``:
    the layout ggml-cann should have produced from the ggml blocks that were uploaded."""
    from golden.quant import to_cann  # another layer's module: imported where it is needed

    expected = np.asarray(to_cann(raw_blocks, qtype), dtype=np.uint8).reshape(-1)
    actual = read_device_bytes(runtime, address, expected.size, device_index)
    return compare_bytes(actual, expected)


def check_padding_zeroed(
    runtime: AclRuntime, address: int, data_size: int, alloc_size: int, device_index: int | None = None
) -> ByteComparison:
    """Bytes ``[data_size, alloc_size)`` past the tensor data must be zero (ggml-cann memsets the
    row padding of quantized tensors; matmul kernels read it)."""
    if alloc_size < data_size:
        raise ValueError(f"alloc_size {alloc_size} < data_size {data_size}")
    tail = read_device_bytes(runtime, address + data_size, alloc_size - data_size, device_index)
    comparison = compare_bytes(tail, np.zeros_like(tail))
    # report offsets from the tensor start, which is what a reader looks up
    return ByteComparison(comparison.expected_size, comparison.mismatched,
                          tuple(data_size + i for i in comparison.first_offsets))


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

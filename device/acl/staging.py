"""Host-side staging of ggml tensors for the ``acl:N`` device.

A :class:`golden.case.TensorSpec` says how a tensor sits in device memory (padded strides, an
element offset, a permutation). :func:`stage` builds that storage on the host from the logical
values; :func:`acl_view` turns ggml's ``ne``/``nb`` into aclTensor view dims and strides the way
ggml-cann's ``ggml_cann_create_tensor`` does (strides in elements, both arrays reversed because
ggml's ``ne[0]`` is innermost while ACL's last dim is).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from device.acl.opapi import ACL_BF16, ACL_FLOAT, ACL_FLOAT16, ACL_INT32
from device.base import Unsupported
from golden import dtypes
from golden.case import TensorSpec

# The aclDataType of each plain ggml type; sizes and storage come from golden.dtypes.
ACL_TYPE: dict[str, int] = {"f32": ACL_FLOAT, "f16": ACL_FLOAT16, "bf16": ACL_BF16, "i32": ACL_INT32}


@dataclass(frozen=True)
class DeviceDtype:
    acl_type: int
    storage: np.dtype[Any]  # numpy dtype of the raw device elements (bf16: its raw bits)
    itemsize: int


def device_dtype(name: str) -> DeviceDtype:
    if name not in ACL_TYPE:
        raise Unsupported(f"acl device has no plain {name} tensors (quantized types go through ggml:CANN)")
    return DeviceDtype(ACL_TYPE[name], dtypes.STORAGE_DTYPE[name], dtypes.type_size(name))


def to_storage(values: np.ndarray, dtype: str) -> np.ndarray:
    """Logical values -> device element representation (bf16 values arrive as float32)."""
    return dtypes.to_storage(values, dtype)


def from_storage(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Device elements -> logical values (bf16 widened to float32; the others as stored)."""
    if dtype == "bf16":
        return dtypes.bf16_to_f32(raw)
    return raw


@dataclass
class StagedTensor:
    """One tensor's device storage, built on the host. ``ne``/``nb`` are ggml-order logical dims
    and element strides; ``offset`` is the logical view's first element within ``storage``."""

    dtype: str
    ne: tuple[int, ...]
    nb: tuple[int, ...]
    offset: int
    storage: np.ndarray  # 1-D, storage dtype

    @property
    def nbytes(self) -> int:
        return int(self.storage.nbytes)

    def logical(self, storage: np.ndarray | None = None) -> np.ndarray:
        """The logical values (numpy order) seen through this tensor's view of ``storage``."""
        flat = self.storage if storage is None else storage
        item = flat.itemsize
        view = np.lib.stride_tricks.as_strided(
            flat[self.offset:],
            shape=tuple(reversed(self.ne)),
            strides=tuple(item * s for s in reversed(self.nb)),
            writeable=False,
        )
        return from_storage(np.array(view), self.dtype)


def stage(spec: TensorSpec, values: np.ndarray) -> StagedTensor:
    """Lay ``values`` (numpy order, logical shape) out in device storage as ``spec.layout`` says."""
    dtype = device_dtype(spec.dtype)
    layout = spec.layout
    if np.shape(values) != spec.np_shape:
        raise ValueError(f"input has shape {np.shape(values)}, spec says {spec.np_shape}")
    stored_ne = [spec.ne[layout.perm[i]] for i in range(4)]
    padded = [stored_ne[i] + layout.pad[i] for i in range(4)]
    stored_nb = [1, padded[0], padded[0] * padded[1], padded[0] * padded[1] * padded[2]]
    nb = [0, 0, 0, 0]
    for i in range(4):  # ggml_permute: stored dim i becomes logical dim perm[i]
        nb[layout.perm[i]] = stored_nb[i]
    total = layout.offset + int(np.prod(padded))
    storage: np.ndarray = np.zeros(total, dtype=dtype.storage)
    if spec.dtype in ("f32", "f16"):
        # NaN in the gaps: a kernel that reads outside its view shows up in the output
        storage[:] = np.nan
    staged = StagedTensor(spec.dtype, tuple(spec.ne), tuple(nb), layout.offset, storage)
    window = np.lib.stride_tricks.as_strided(
        storage[layout.offset:],
        shape=spec.np_shape,
        strides=tuple(storage.itemsize * s for s in reversed(nb)),
    )
    window[...] = to_storage(values, spec.dtype)
    return staged


def contiguous(dtype: str, ne: Sequence[int]) -> StagedTensor:
    """An output buffer: contiguous; NaN-filled for f32/f16 so an element the op never writes
    cannot pass as a plausible value (zero for the other types)."""
    d = device_dtype(dtype)
    nb = [1, ne[0], ne[0] * ne[1], ne[0] * ne[1] * ne[2]][: len(ne)]
    storage: np.ndarray = np.zeros(int(np.prod(ne)), dtype=d.storage)
    if dtype in ("f32", "f16"):
        storage[:] = np.nan
    return StagedTensor(dtype, tuple(ne), tuple(nb), 0, storage)


def acl_view(ne: Sequence[int], nb: Sequence[int], offset: int = 0) -> tuple[list[int], list[int], list[int]]:
    """ggml ne/nb (elements) -> (ACL view dims, ACL strides, 1-D storage dims) like ggml-cann:
    storage length = offset + 1 + sum((ne[i]-1) * nb[i])."""
    extent = 1 + sum((n - 1) * s for n, s in zip(ne, nb, strict=True)) if all(n > 0 for n in ne) else 1
    return list(reversed(ne)), list(reversed(nb)), [offset + extent]

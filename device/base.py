"""The device plug-in contract.

A device runs one :class:`golden.case.OpCase` on concrete input arrays and returns the outputs as
numpy arrays. Everything the suite knows about a device goes through these four members, so a
vendor can plug in a device without editing this repository (``--device my.module:factory``).

* ``name``: the spec the user selected it with (``ggml:CPU``, ``golden``, ``acl:0``...).
* ``info()``: a JSON-able inventory dict (description, memory, library versions) for the results
  header and ``conform devices``.
* ``supports(case)``: ``True``/``False`` when the device can say (ggml devices ask the backend's own
  ``supports_op``), ``None`` when it cannot tell before trying.
* ``run(case, inputs)``: computes the case. ``inputs`` holds one array per ``case.inputs`` entry in
  numpy order (reversed ne): float32/float16/int32 values for plain dtypes (BF16 values as float32
  already rounded to BF16), raw ``uint8`` ggml blocks for quantized dtypes. Returns a
  :class:`RunResult`.

Devices may raise :class:`Unsupported` to decline a case at run time.

Optionally a device declares :attr:`capabilities` (a frozenset of :class:`Capability`): what the
harness may rely on beyond the four members. A device without the attribute has none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

import numpy as np

from golden.case import OpCase


class Unsupported(Exception):
    """The device declines this case (a recorded outcome, not an error)."""


class DeviceError(Exception):
    """A device could not be opened or used; the message is meant for the user as is."""


class Capability(StrEnum):
    """Something a device can do or is, declared by the device instead of guessed from its name."""

    # Pure Python that cannot abort the process: may run in the test process, without a worker.
    IN_PROCESS = "in_process"
    # Has ``transfer(spec, raw, writes, reads)``: set/get round trips through the backend.
    TRANSFER = "transfer"
    # Returns the bytes of its uploaded quantized inputs as stored on the device
    # (``RunResult.raw_inputs``), bypassing the backend's own conversions.
    RAW_MEMORY = "raw_memory"
    # Keeps Q4_0/Q8_0 tensors the way ggml-cann does: the stored bytes are ``golden.quant.to_cann``
    # of the ggml blocks, allocations are ``golden.quant.cann_alloc_size`` and the padding is zeroed.
    CANN_QUANT_LAYOUT = "cann_quant_layout"


def capabilities_of(device: object) -> frozenset[Capability]:
    """What ``device`` (an instance or a class) declares; nothing when it declares nothing."""
    declared = getattr(device, "capabilities", None)
    if declared is None:
        return frozenset()
    return frozenset(Capability(c) for c in declared)


# Reads ``size`` bytes at a device address as they are stored there: (address, size) -> uint8 array.
RawMemoryReader = Callable[[int, int], np.ndarray]


@dataclass(frozen=True)
class DeviceBytes:
    """One tensor's allocation as stored on the device: ``stored[:data_size]`` holds the data, the
    rest (up to the allocation size the backend asked for) is padding."""

    stored: np.ndarray  # uint8
    data_size: int

    @property
    def data(self) -> np.ndarray:
        return self.stored[: self.data_size]

    @property
    def padding(self) -> np.ndarray:
        return self.stored[self.data_size :]


@dataclass
class RunResult:
    """What one run returns.

    ``output``: the op's result in numpy order, as the device stored it (float32/float16/int32
    values, or raw uint8 blocks for a quantized destination).
    ``inputs_after``: each input's logical values read back from the device after the run, or None
    where the device cannot read them back; the suite checks they are unchanged.
    ``extra``: device-specific measurements (timings, memory) recorded with the case.
    ``raw_inputs``: with :attr:`Capability.RAW_MEMORY`, each input's allocation as stored on the
    device after upload (None for inputs it does not read: plain dtypes, views).
    """

    output: np.ndarray
    inputs_after: list[np.ndarray] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    raw_inputs: list[DeviceBytes | None] | None = None


@runtime_checkable
class Device(Protocol):
    name: str

    def info(self) -> dict[str, Any]: ...

    def supports(self, case: OpCase) -> bool | None: ...

    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult: ...

    def close(self) -> None: ...

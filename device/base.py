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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from golden.case import OpCase


class Unsupported(Exception):
    """The device declines this case (a recorded outcome, not an error)."""


class DeviceError(Exception):
    """A device could not be opened or used; the message is meant for the user as is."""


@dataclass
class RunResult:
    """What one run returns.

    ``output``: the op's result in numpy order, as the device stored it (float32/float16/int32
    values, or raw uint8 blocks for a quantized destination).
    ``inputs_after``: each input's logical values read back from the device after the run, or None
    where the device cannot read them back; the suite checks they are unchanged.
    ``extra``: device-specific measurements (timings, memory) recorded with the case.
    """

    output: np.ndarray
    inputs_after: list[np.ndarray] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Device(Protocol):
    name: str

    def info(self) -> dict[str, Any]: ...

    def supports(self, case: OpCase) -> bool | None: ...

    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult: ...

    def close(self) -> None: ...

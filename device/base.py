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
  :class:`RunResult` whose ``output`` follows the same convention for the destination dtype
  (:func:`output_dtype`; :func:`as_output` converts exact values).

The worker calls ``supports(case)`` and then, unless it returned False, ``run(case, inputs)``:
nothing else runs a case, so an override of ``run`` is always what runs. It checks what ``run``
returned (:func:`result_problem`) and makes ``extra`` and ``info()`` JSON-safe (:func:`json_safe`);
a result that breaks the contract is an ERROR record saying how.

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

from golden import dtypes
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
    # Has ``time_case(case, inputs, settings)``: warm, repeated, synchronised compute times (perf mode).
    PERF = "perf"
    # Has ``run_graph(graph_case, inputs)``: runs a multi-node graph case (golden/graphs) three ways
    # and returns a :class:`GraphRunResult`; a device without it records graph cases as unsupported.
    GRAPH = "graph"


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


class GraphRun(StrEnum):
    """The three ways a graph case runs on a device."""

    FUSED = "fused"  # only the outputs flagged: the backend may fuse every chain it recognises
    BLOCKED = "blocked"  # every intermediate flagged output: nothing fuses, every node is read back
    GALLOCR = "gallocr"  # intermediates placed by ggml's graph allocator, which reuses buffers in place


@dataclass
class GraphRunResult:
    """What ``run_graph`` returns: per run, the values of the nodes it read back (by node name, numpy
    order, in the contract's output array type), whether each graph input's bytes came back as sent,
    and why a run could not be made (a release without the graph allocator)."""

    nodes: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  # run -> node -> values
    inputs_intact: dict[str, list[bool]] = field(default_factory=dict)  # run -> per graph input
    not_run: dict[str, str] = field(default_factory=dict)  # run -> reason
    extra: dict[str, Any] = field(default_factory=dict)
    # run -> node -> (address, bytes) where the run placed it (the graph-allocator run's reuse of freed
    # blocks; a device that does not say leaves it empty)
    placement: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)


@runtime_checkable
class Device(Protocol):
    name: str

    def info(self) -> dict[str, Any]: ...

    def supports(self, case: OpCase) -> bool | None: ...

    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult: ...

    def close(self) -> None: ...


# ---- the output convention, checked ---------------------------------------------------------------

def output_dtype(dst: str) -> np.dtype[Any]:
    """The numpy dtype ``RunResult.output`` has for destination dtype ``dst``: the inputs' convention
    (f32 and bf16 as float32, bf16 holding BF16 values; f16 as float16; i32 as int32; quantized as
    raw uint8 blocks)."""
    if dtypes.is_quantized(dst):
        return np.dtype(np.uint8)
    if dst in dtypes.INDEX_TYPES:  # integer results in their own width (COUNT_EQUAL's i64, I8/I16 copies)
        return dtypes.STORAGE_DTYPE[dst]
    return _PLAIN_OUTPUT[dst]


_PLAIN_OUTPUT: dict[str, np.dtype[Any]] = {
    "f32": np.dtype(np.float32), "bf16": np.dtype(np.float32), "f16": np.dtype(np.float16), "i32": np.dtype(np.int32),
}


def as_output(values: np.ndarray, dst: str) -> np.ndarray:
    """Exact (float64) values rounded once to plain dtype ``dst``, as the array ``run`` returns."""
    return dtypes.round_to(values, dst).astype(output_dtype(dst))


def result_problem(case: OpCase, result: Any) -> str | None:
    """How what ``run`` returned breaks the contract (one line), or None when it keeps it."""
    if not isinstance(result, RunResult):
        return f"run() returned {type(result).__name__}, not a RunResult"
    out = result.output
    if not isinstance(out, np.ndarray):
        return f"RunResult.output is {type(out).__name__}, not a numpy array"
    want = output_dtype(case.dst)
    if out.dtype != want:
        return f"RunResult.output has dtype {out.dtype}, but a {case.dst} destination is returned as {want}"
    if result.inputs_after is not None and (
        not isinstance(result.inputs_after, (list, tuple))
        or not all(isinstance(x, np.ndarray) for x in result.inputs_after)
    ):
        return "RunResult.inputs_after is neither None nor a list of numpy arrays"
    if not isinstance(result.extra, dict):
        return f"RunResult.extra is {type(result.extra).__name__}, not a dict"
    return None


class UnstorableValue(ValueError):
    """A value a results file cannot hold (``info()`` or ``RunResult.extra``); the message names it."""


MAX_STORED_ELEMENTS = 1024  # a small array in extra/info() is stored as a list; a big one is refused
_MAX_DEPTH = 32


def json_safe(value: Any, where: str, depth: int = 0) -> Any:
    """``value`` as plain JSON data: numpy scalars and small arrays, tuples, sets (sorted) and bytes
    (hex) are converted; anything else JSON cannot hold raises :class:`UnstorableValue` naming
    ``where`` (e.g. ``extra['timings']``). NaN and infinities stay floats (the writer spells them)."""
    if depth > _MAX_DEPTH:
        raise UnstorableValue(f"{where} is nested more than {_MAX_DEPTH} deep (or refers to itself)")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return json_safe(value.item(), where, depth + 1)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if isinstance(key, np.generic):
                key = key.item()
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise UnstorableValue(f"{where} has a key of type {type(key).__name__}, which JSON cannot hold")
            out[str(key)] = json_safe(item, f"{where}[{key!r}]", depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [json_safe(item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value)]
    if isinstance(value, (set, frozenset)):
        items = [json_safe(item, f"{where} item", depth + 1) for item in value]
        return sorted(items, key=repr)
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        if len(raw) > MAX_STORED_ELEMENTS:
            raise UnstorableValue(f"{where} holds {len(raw)} bytes; record a summary instead")
        return raw.hex()
    if isinstance(value, np.ndarray):
        if value.size > MAX_STORED_ELEMENTS or value.dtype.kind not in "biufc":
            raise UnstorableValue(f"{where} is an ndarray of {value.size} {value.dtype} elements; "
                                  f"record a summary (at most {MAX_STORED_ELEMENTS} numbers are stored)")
        if value.dtype.kind == "c":
            raise UnstorableValue(f"{where} holds complex numbers, which JSON cannot hold")
        return json_safe(value.tolist(), where, depth + 1)
    raise UnstorableValue(f"{where} holds a {type(value).__name__}, which a results file cannot store")

"""The messages between the harness and a device worker, and their wire form.

Requests :class:`RunRequest`, :class:`CallRequest`, :class:`InfoRequest`, :class:`ReopenRequest`,
:class:`Stop`; answers :class:`Opened`/:class:`OpenFailed` (after :class:`OpenRequest` and
:class:`ReopenRequest`), :class:`Reply` and :class:`InfoReply`. Both sides import them from here: the
parent (``device/worker.py``) and the child (``device/serve.py``, also forked by ``device/zygote.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from device.base import (
    Capability,
    RunResult,
)
from device.spec import DeviceSpec
from golden.case import CONTIGUOUS, Layout, OpCase, TensorSpec
from results.outcome import Outcome
from results.record import CrashInfo

# Optional device methods the parent may call by name, and the capability that declares each.
CALLABLE_METHODS: dict[str, Capability] = {"transfer": Capability.TRANSFER, "time_case": Capability.PERF,
                                           "run_graph": Capability.GRAPH}


# ---- messages -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class OpenRequest:
    spec: DeviceSpec
    options: dict[str, Any]


@dataclass(frozen=True)
class RunRequest:
    case: OpCase
    inputs: list[np.ndarray]


@dataclass(frozen=True)
class CallRequest:
    method: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class InfoRequest:
    """A fresh inventory (free memory now) and the device process' RSS."""


@dataclass(frozen=True)
class Stop:
    """Close the device and exit."""


@dataclass(frozen=True)
class ReopenRequest:
    """Close the device and open it again in the same process (answered by Opened or OpenFailed):
    a fresh device state for a sequence, without the cost of a new process."""


Request = RunRequest | CallRequest | InfoRequest | ReopenRequest | Stop


@dataclass(frozen=True)
class Opened:
    info: dict[str, Any]  # JSON-safe (checked_info)
    capabilities: frozenset[Capability]
    rss_bytes: int | None = None  # the device process' RSS once the device is open


@dataclass(frozen=True)
class OpenFailed:
    message: str


@dataclass(frozen=True)
class InfoReply:
    info: dict[str, Any]


@dataclass
class Reply:
    """One request's answer.

    ``outcome`` is None when the device answered (the verdict decides pass or fail); otherwise it is
    the outcome the case already has: UNSUPPORTED, ERROR, CRASH or TIMEOUT. ``result`` is the
    :class:`~device.base.RunResult` of a :class:`RunRequest`, or what the method of a
    :class:`CallRequest` returned. For CRASH and TIMEOUT, ``crash`` says how the process ended and
    ``history`` lists the case ids it ran since it started, in order, ending with this one
    (``history_dropped`` earlier ones did not fit :data:`device.worker.HISTORY_LIMIT`).
    """

    outcome: Outcome | None
    supported: bool | None = None
    result: Any = None
    message: str = ""
    duration_s: float = 0.0
    crash: CrashInfo | None = None
    history: tuple[str, ...] = ()
    history_dropped: int = 0
    rss_bytes: int | None = None  # the device process' RSS after the request (None: not measured)

    @property
    def answered(self) -> bool:
        return self.outcome is None


# ---- the wire form of a case's request and reply ----------------------------------------------------
# A pickled dataclass names its class, and each name costs a module lookup when it is written and
# again when it is read: with a few µs per name, the four or five names of a case's request and
# reply were a quarter of a small case's round trip. These two messages therefore cross as tuples of
# plain values (their arrays in the channel's short array form); all others pickle as themselves.

_RUN_WIRE, _REPLY_WIRE = "run", "reply"


def encode_message(message: Any) -> Any:
    """The wire form of a RunRequest or of a Reply that carries a RunResult (or nothing); any other
    message is itself."""
    kind = type(message)
    if kind is RunRequest:
        case = message.case
        specs = tuple((t.dtype, t.ne, t.layout.perm, t.layout.pad, t.layout.offset, t.name) for t in case.inputs)
        return (_RUN_WIRE, case.op, specs, case.params, case.dst, case.form, case.data_seed,
                case.distribution, message.inputs)
    if kind is Reply and message.crash is None:
        result = message.result
        if result is None:
            wire_result: Any = None
        elif type(result) is RunResult and result.raw_inputs is None:
            wire_result = (result.output, result.inputs_after, result.extra)
        else:
            return message
        outcome = None if message.outcome is None else message.outcome.value
        return (_REPLY_WIRE, outcome, message.supported, wire_result, message.message, message.duration_s,
                message.history, message.history_dropped, message.rss_bytes)
    return message


def decode_message(wire: Any) -> Any:
    """The message whose wire form is ``wire`` (see :func:`encode_message`). Messages themselves are
    dataclasses, never tuples, so any other value passes through as it is."""
    if type(wire) is not tuple or not wire:
        return wire
    if wire[0] == _RUN_WIRE:
        _, op, specs, params, dst, form, data_seed, distribution, inputs = wire
        tensors = tuple(
            TensorSpec(dtype, ne, CONTIGUOUS if offset == 0 and perm == _IDENTITY and pad == _NO_PAD
                       else Layout(perm, pad, offset), name)
            for dtype, ne, perm, pad, offset, name in specs
        )
        case = OpCase(op, tensors, params, dst, form, data_seed, distribution)
        return RunRequest(case, inputs)
    if wire[0] == _REPLY_WIRE:
        _, outcome, supported, wire_result, text, duration_s, history, dropped, rss = wire
        result = None if wire_result is None else RunResult(*wire_result)
        return Reply(None if outcome is None else Outcome(outcome), supported, result, text, duration_s,
                     None, history, dropped, rss)
    return wire


_IDENTITY, _NO_PAD = CONTIGUOUS.perm, CONTIGUOUS.pad



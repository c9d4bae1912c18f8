"""The device worker's child side: open the device, then serve requests until Stop.

Started as ``python -m device.serve`` by :class:`device.worker.DeviceWorker`, or forked by the fork
server (``device/zygote.py``); :class:`device.worker.InProcessRunner` uses the same functions in the
harness' own process. A case runs through :func:`serve_run` only: ``supports`` then ``run`` (the
documented contract), with what ``run`` returned checked before it leaves the device's process.
"""

from __future__ import annotations

import os
import pickle
import sys
import time
import traceback
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from device.base import (
    Device,
    DeviceError,
    UnstorableValue,
    Unsupported,
    capabilities_of,
    json_safe,
    result_problem,
)
from device.channel import REQUEST_SPIN_S, WORKER, Arena, Channel, unlink_quietly
from device.ggml.trace import note_case  # marks each case in a ggml call trace (conform repro --emit-c)
from device.interrupt import ignore_stop_signals
from device.messages import (
    CALLABLE_METHODS,
    CallRequest,
    InfoReply,
    InfoRequest,
    Opened,
    OpenFailed,
    OpenRequest,
    ReopenRequest,
    Reply,
    RunRequest,
    decode_message,
    encode_message,
)
from device.spec import DeviceSpec
from golden.case import OpCase
from results.outcome import Outcome

# ---- serving one device (in the child, or in process) ---------------------------------------------

_STATM: dict[str, int] = {}  # this process' open /proc/self/statm: {"pid", "fd"} (read per case, so kept open)
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def process_rss() -> int | None:
    """This process' resident memory in bytes (Linux /proc), or None where it cannot be read."""
    try:
        if _STATM.get("pid") != os.getpid():  # first call, or a forked child: /proc/self was the parent's
            _STATM["fd"] = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
            _STATM["pid"] = os.getpid()
        return int(os.pread(_STATM["fd"], 128, 0).split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return None


def serve_run(device: Device, case: OpCase, inputs: list[np.ndarray]) -> Reply:
    """Run one case the way the contract says: ``supports(case)``, then ``run(case, inputs)`` unless it
    said False. What ``run`` returned is checked here, next to the device: a result that breaks the
    contract (no RunResult, an output of the wrong type, an ``extra`` JSON cannot hold) is an ERROR
    reply naming the problem, never a lost record."""
    start = time.perf_counter()

    def reply(outcome: Outcome | None, supported: bool | None, result: Any = None, message: str = "") -> Reply:
        return Reply(outcome, supported, result, message=message, duration_s=time.perf_counter() - start,
                     rss_bytes=process_rss())

    supported: bool | None = None
    try:
        answer = device.supports(case)
        supported = None if answer is None else bool(answer)
        if supported is False:
            return reply(Outcome.UNSUPPORTED, False, message="the device's supports_op rejects this case")
        result = device.run(case, inputs)
    except Unsupported as exc:
        return reply(Outcome.UNSUPPORTED, None, message=str(exc))
    except Exception as exc:  # a Python-level failure of the device: an ERROR record
        tb = traceback.format_exc(limit=3)
        return reply(Outcome.ERROR, supported,
                     message=f"{type(exc).__name__}: {exc} | {tb.strip().splitlines()[-2:]}")
    problem = result_problem(case, result)
    if problem is None:
        try:
            result = replace(result, extra=json_safe(result.extra, "RunResult.extra"))
        except UnstorableValue as exc:
            problem = str(exc)
    if problem is not None:
        return reply(Outcome.ERROR, supported, message=f"device contract broken: {problem}")
    return reply(None, supported, result)


def serve_call(device: Device, method: str, args: tuple[Any, ...]) -> Reply:
    capability = CALLABLE_METHODS.get(method)
    if capability is None or capability not in capabilities_of(device):
        return Reply(Outcome.UNSUPPORTED, None, message=f"the device does not declare {method}()")
    start = time.perf_counter()
    try:
        result = getattr(device, method)(*args)
        return Reply(None, True, result, duration_s=time.perf_counter() - start, rss_bytes=process_rss())
    except Unsupported as exc:
        return Reply(Outcome.UNSUPPORTED, None, message=str(exc), duration_s=time.perf_counter() - start)
    except Exception as exc:
        return Reply(Outcome.ERROR, None, message=f"{type(exc).__name__}: {exc}",
                     duration_s=time.perf_counter() - start)


def checked_info(device: Device) -> dict[str, Any]:
    """``device.info()`` as JSON data; :class:`DeviceError` when it is not a dict or holds what a
    results header cannot store."""
    info = device.info()
    if not isinstance(info, dict):
        raise DeviceError(f"info() returned {type(info).__name__}, not a dict")
    try:
        return dict(json_safe(info, "info()"))
    except UnstorableValue as exc:
        raise DeviceError(str(exc)) from None


def serve_info(device: Device) -> dict[str, Any]:
    try:
        info = checked_info(device)
    except Exception as exc:
        info = {"error": f"{type(exc).__name__}: {exc}"}
    return info | {"worker_rss_bytes": process_rss()}


def open_checked(spec: DeviceSpec, options: dict[str, Any]) -> tuple[Device, dict[str, Any]]:
    """Open the device and read its inventory; any failure is a DeviceError that names the device."""
    from device.registry import open_device

    try:
        device = open_device(spec, options)
    except DeviceError:
        raise
    except Exception as exc:
        raise DeviceError(f"device {spec.text!r} failed to open: {type(exc).__name__}: {exc}") from None
    try:
        info = checked_info(device)
    except Exception as exc:
        reason = str(exc) if isinstance(exc, DeviceError) else f"info() raised {type(exc).__name__}: {exc}"
        try:
            device.close()
        except Exception:
            pass
        raise DeviceError(f"device {spec.text!r} breaks the device contract: {reason}") from None
    return device, info


def _send(conn: Connection | Channel, reply: Reply) -> None:
    """Send a reply; one that cannot be pickled (an odd object in the result) becomes an ERROR reply."""
    try:
        conn.send(reply)
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as exc:
        conn.send(Reply(Outcome.ERROR, reply.supported, duration_s=reply.duration_s, rss_bytes=reply.rss_bytes,
                        message=f"device contract broken: the result cannot be sent to the harness "
                                f"({type(exc).__name__}: {exc})"[:500]))


def _child_main(conn: Connection | Channel, request: OpenRequest) -> None:
    def opened() -> Device | None:
        try:
            device, info = open_checked(request.spec, request.options)
        except BaseException as exc:  # report any failure to open as one line
            message = str(exc) if isinstance(exc, DeviceError) else f"{type(exc).__name__}: {exc}"
            conn.send(OpenFailed(message))
            return None
        conn.send(Opened(info, capabilities_of(device), process_rss()))
        return device

    device = opened()
    if device is None:
        return
    while True:
        if isinstance(conn, Channel):
            conn.spin(REQUEST_SPIN_S)
        try:
            message = conn.recv()
        except EOFError:
            break
        if isinstance(message, RunRequest):
            note_case(message.case.case_id)
            _send(conn, serve_run(device, message.case, message.inputs))
            note_case(None)
        elif isinstance(message, CallRequest):
            note_case(getattr(message.args[0], "case_id", message.method) if message.args else message.method)
            _send(conn, serve_call(device, message.method, message.args))
            note_case(None)
        elif isinstance(message, InfoRequest):
            conn.send(InfoReply(serve_info(device)))
        elif isinstance(message, ReopenRequest):
            close_quietly(device)
            device = opened()
            if device is None:
                return
        else:  # Stop, or anything this worker does not know
            break
    close_quietly(device)


def close_quietly(device: Device) -> None:
    try:
        device.close()
    except Exception:
        pass


def serve(conn_fd: int, arena_path: str) -> None:
    """A worker's life: its socket and arena, the OpenRequest, then requests until Stop."""
    ignore_stop_signals()
    arena = Arena(arena_path) if arena_path else None
    unlink_quietly(arena_path)  # both ends hold it mapped; no file is left behind whatever happens
    conn = Channel(Connection(conn_fd), arena, WORKER, encode_message, decode_message)
    try:
        request = conn.recv()
    except EOFError:  # the harness went away before it asked for a device
        return
    if not isinstance(request, OpenRequest):
        raise SystemExit(f"device worker: expected an OpenRequest, got {type(request).__name__}")
    _child_main(conn, request)


def main() -> None:
    serve(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "")


if __name__ == "__main__":
    # Run as the imported module, not as __main__, so that whatever it defines pickles by the name
    # the parent knows it by.
    from device.serve import main as _main

    _main()

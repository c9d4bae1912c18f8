"""Device work in a child process, so a ggml abort is a recorded result and not a dead run.

:class:`DeviceWorker` owns one child process per device. Each :meth:`DeviceWorker.attempt` sends a
:class:`RunRequest` and waits (at most ``timeout`` seconds) for the :class:`Reply`. If the child dies
the reply is a CRASH carrying the exit signal and the tail of the child's stderr (where ggml prints
its failed GGML_ASSERT); if it does not answer in time it is killed and the reply is a TIMEOUT.
Either way the reply also carries the case ids that child ran since it started (its ``history``: a
crash that needs earlier cases is replayed from it), and the next attempt starts a fresh child.

:class:`InProcessRunner` serves a device that declares :attr:`Capability.IN_PROCESS` (the golden
oracle) with the same interface, without a child.

Messages are dataclasses, pickled over a socket pair: requests :class:`RunRequest`,
:class:`CallRequest`, :class:`InfoRequest`, :class:`ReopenRequest`, :class:`Stop`; answers
:class:`Opened`/:class:`OpenFailed` (after :class:`OpenRequest` and :class:`ReopenRequest`),
:class:`Reply` and :class:`InfoReply`.

A case runs through :func:`serve_run` only: ``supports`` then ``run`` (the documented contract), with
what ``run`` returned checked before it leaves the device's process. Each reply carries the device
process' RSS, which :class:`MemoryTrack` follows (the results footer's memory growth).
"""

from __future__ import annotations

import atexit
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from typing import Any, Protocol

import numpy as np

from device.base import (
    Capability,
    Device,
    DeviceError,
    RunResult,
    UnstorableValue,
    Unsupported,
    capabilities_of,
    json_safe,
    result_problem,
)
from device.channel import REPLY_SPIN_S, REQUEST_SPIN_S, WORKER, Arena, Channel, unlink_quietly
from device.interrupt import ignore_stop_signals, stopped_from_outside
from device.outcome import Outcome
from device.spec import DeviceKind, DeviceSpec
from device.zygote import ForkedWorker, ForkServer, ForkServerError
from golden.case import CONTIGUOUS, Layout, OpCase, TensorSpec

STDERR_TAIL_BYTES = 4000
# A crash record carries at most this many of the latest case ids; earlier ones are only counted.
HISTORY_LIMIT = 1000
# Optional device methods the parent may call by name, and the capability that declares each.
CALLABLE_METHODS: dict[str, Capability] = {"transfer": Capability.TRANSFER, "time_case": Capability.PERF}


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


@dataclass(frozen=True)
class CrashInfo:
    """How the device process ended: the signal (``SIGABRT``), or the exit code, and its stderr tail."""

    signal: str | None
    exitcode: int | None
    stderr_tail: str

    def to_json(self) -> dict[str, Any]:
        return {"signal": self.signal, "exitcode": self.exitcode, "stderr_tail": self.stderr_tail}


@dataclass
class Reply:
    """One request's answer.

    ``outcome`` is None when the device answered (the verdict decides pass or fail); otherwise it is
    the outcome the case already has: UNSUPPORTED, ERROR, CRASH or TIMEOUT. ``result`` is the
    :class:`~device.base.RunResult` of a :class:`RunRequest`, or what the method of a
    :class:`CallRequest` returned. For CRASH and TIMEOUT, ``crash`` says how the process ended and
    ``history`` lists the case ids it ran since it started, in order, ending with this one
    (``history_dropped`` earlier ones did not fit :data:`HISTORY_LIMIT`).
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
        return (_RUN_WIRE, case.op, specs, case.params, case.out_dtype, case.variant, case.data_seed,
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
        _, op, specs, params, out_dtype, variant, data_seed, distribution, inputs = wire
        tensors = tuple(
            TensorSpec(dtype, ne, CONTIGUOUS if offset == 0 and perm == _IDENTITY and pad == _NO_PAD
                       else Layout(perm, pad, offset), name)
            for dtype, ne, perm, pad, offset, name in specs
        )
        case = OpCase(op, tensors, params, out_dtype, variant, data_seed, distribution)
        return RunRequest(case, inputs)
    if wire[0] == _REPLY_WIRE:
        _, outcome, supported, wire_result, text, duration_s, history, dropped, rss = wire
        result = None if wire_result is None else RunResult(*wire_result)
        return Reply(None if outcome is None else Outcome(outcome), supported, result, text, duration_s,
                     None, history, dropped, rss)
    return wire


_IDENTITY, _NO_PAD = CONTIGUOUS.perm, CONTIGUOUS.pad


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
            _send(conn, serve_run(device, message.case, message.inputs))
        elif isinstance(message, CallRequest):
            _send(conn, serve_call(device, message.method, message.args))
        elif isinstance(message, InfoRequest):
            conn.send(InfoReply(serve_info(device)))
        elif isinstance(message, ReopenRequest):
            _close_quietly(device)
            device = opened()
            if device is None:
                return
        else:  # Stop, or anything this worker does not know
            break
    _close_quietly(device)


def _close_quietly(device: Device) -> None:
    try:
        device.close()
    except Exception:
        pass


# ---- the parent's side ----------------------------------------------------------------------------

def header_inventory(spec: DeviceSpec, info: dict[str, Any]) -> dict[str, Any]:
    """What the results header records for a device: its ``info()``, with ``spec`` set to the spec
    the harness opened (a plug-in may report another device's; that one is kept as ``info_spec``)
    and, for a plug-in, ``import_root``: the directory its module imports from (repro lines need it)."""
    inventory = dict(info)
    if "spec" in inventory and inventory["spec"] != spec.text:
        inventory["info_spec"] = inventory["spec"]
    inventory["spec"] = spec.text
    if spec.kind is DeviceKind.PLUGIN:
        from device.registry import import_root

        inventory["import_root"] = import_root(spec)
    return inventory


@dataclass
class MemoryTrack:
    """The device process' RSS: when the device opened, latest, and the largest growth seen in any
    one process (a worker replaced after a crash starts a new baseline)."""

    start: int | None = None  # RSS of the current process once its device opened
    latest: int | None = None
    growth_max: int | None = None
    processes: int = 0

    def opened(self, rss: int | None) -> None:
        self.start, self.latest = rss, rss
        self.processes += 1

    def seen(self, rss: int | None) -> None:
        if rss is None:
            return
        self.latest = rss
        if self.start is not None:
            growth = rss - self.start
            self.growth_max = growth if self.growth_max is None else max(self.growth_max, growth)

    def as_dict(self) -> dict[str, Any]:
        return {"worker_rss_start": self.start, "worker_rss_end": self.latest,
                "worker_rss_growth": None if self.start is None or self.latest is None else self.latest - self.start,
                "worker_rss_growth_max": self.growth_max, "worker_processes": self.processes}


class Runner(Protocol):
    """What the harness drives: a device behind a process boundary, or in process."""

    spec: DeviceSpec
    inventory: dict[str, Any]
    capabilities: frozenset[Capability]
    memory: MemoryTrack

    def attempt(self, case: OpCase, inputs: list[np.ndarray], timeout: float | None = None) -> Reply: ...

    def call(self, method: str, args: tuple[Any, ...], timeout: float | None = None, label: str = "") -> Reply: ...

    def refresh_info(self) -> dict[str, Any]: ...

    def reopen(self) -> None: ...

    def close(self) -> None: ...


class InProcessRunner:
    """Runs an in-process device (the golden oracle) with the worker's interface."""

    def __init__(self, spec: DeviceSpec, options: dict[str, Any] | None = None) -> None:
        self.spec = spec
        self.options = dict(options or {})
        self.memory = MemoryTrack()
        self.device, info = open_checked(spec, self.options)
        self.inventory = header_inventory(spec, info)
        self.capabilities = capabilities_of(self.device)
        # no MemoryTrack figures: this process is pytest's, whose growth (hypothesis, numpy) is no device's

    def attempt(self, case: OpCase, inputs: list[np.ndarray], timeout: float | None = None) -> Reply:
        return serve_run(self.device, case, inputs)

    def call(self, method: str, args: tuple[Any, ...], timeout: float | None = None, label: str = "") -> Reply:
        return serve_call(self.device, method, args)

    def refresh_info(self) -> dict[str, Any]:
        return serve_info(self.device)

    def reopen(self) -> None:
        """A fresh device object (its state gone), as :meth:`DeviceWorker.reopen`."""
        _close_quietly(self.device)
        self.device, _ = open_checked(self.spec, self.options)

    def close(self) -> None:
        self.device.close()


class DeviceWorker:
    """A device served by a child process (restarted after a crash or timeout)."""

    def __init__(self, spec: DeviceSpec | str, options: dict[str, Any] | None = None, timeout: float = 120.0,
                 fork_server: bool = True) -> None:
        self.spec = DeviceSpec.of(spec)
        self.options = dict(options or {})
        self.timeout = timeout
        self._proc: subprocess.Popen[bytes] | ForkedWorker | None = None
        self._conn: Channel | None = None
        self._stderr_fd = -1  # the child's stderr: a file unlinked once the child holds it, read through this
        # new children are forked from a process with Python, numpy and this package loaded
        # (device/zygote.py): a crash costs milliseconds, not an interpreter start
        self.use_fork_server = fork_server
        self.inventory: dict[str, Any] = {}
        self.capabilities: frozenset[Capability] = frozenset()
        self.restarts = 0  # fresh children started after the first (crash, timeout)
        self._starts = 0
        self.history: list[str] = []  # case ids the current child ran, in order (the latest HISTORY_LIMIT)
        self.history_dropped = 0
        self.memory = MemoryTrack()

    def start(self) -> dict[str, Any]:
        """Start the child and open the device there; raises DeviceError with its one-line reason."""
        self._stop()
        self.restarts += self._starts > 0
        self._starts += 1
        self.history, self.history_dropped = [], 0
        child = self._spawn()
        self._proc, self._conn, self._stderr_fd = child.proc, child.conn, child.stderr_fd
        parent = child.conn
        try:
            parent.send(OpenRequest(self.spec, self.options))
        except OSError:
            pass  # it died before it could be asked: recv below says so with its stderr
        if not parent.poll(max(self.timeout, 60.0)):
            self._stop()
            raise DeviceError(f"{self.spec}: the device worker did not start in time")
        try:
            answer = parent.recv()
        except EOFError:
            tail = self._stderr_tail()
            self._stop()
            raise DeviceError(f"{self.spec}: the device worker died while opening the device: {tail[-300:]}") from None
        if not isinstance(answer, Opened):
            self._stop()
            reason = answer.message if isinstance(answer, OpenFailed) else f"{self.spec}: answered {answer!r}"
            raise DeviceError(reason)
        self.inventory = header_inventory(self.spec, answer.info)
        self.capabilities = answer.capabilities
        self.memory.opened(answer.rss_bytes)
        return answer.info

    def _spawn(self) -> _Child:
        """A new worker process, its device not opened yet (no OpenRequest sent): forked by the fork
        server, else a fresh interpreter running this module.

        Never a fork of this process: it may hold threads and ggml state; not multiprocessing's
        spawn: it re-imports the caller's __main__. ggml prints its failed assert on stderr, which
        goes to a file the parent reads after a crash."""
        fd, stderr_path = tempfile.mkstemp(prefix="conform-worker-", suffix=".stderr")
        unlink_quietly(stderr_path)  # the child writes and the parent reads it through descriptors
        parent_sock, child_sock = socket.socketpair()
        env = dict(os.environ)
        env.setdefault("GGML_NO_BACKTRACE", "1")  # no gdb attach on abort: slow and noisy
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
        arena = Arena.create()
        arena_path = arena.path if arena else ""
        try:
            proc: subprocess.Popen[bytes] | ForkedWorker | None = None
            server = fork_server(env) if self.use_fork_server else None
            if server is not None:
                try:
                    proc = server.spawn(child_sock.fileno(), fd, arena_path, env)
                except ForkServerError:
                    proc = None  # a fresh interpreter, as without one
            if proc is None:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "device.worker", str(child_sock.fileno()), arena_path],
                    stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, pass_fds=(child_sock.fileno(),), env=env,
                )
        except BaseException:
            if arena is not None:
                arena.close()
            os.close(fd)
            raise
        finally:
            child_sock.close()
        return _Child(proc, Channel(Connection(parent_sock.detach()), arena, encode=encode_message,
                                    decode=decode_message), fd)

    def reopen(self) -> None:
        """Close the device and open it again in its process (a fresh process if none is running):
        the device's own state (cached graphs, pools) is gone, cheaper than :meth:`start`.
        Raises DeviceError when it does not open again."""
        if self._proc is None or self._proc.poll() is not None or self._conn is None:
            self.start()
            return
        conn = self._conn
        try:
            conn.send(ReopenRequest())
            if conn.poll(max(self.timeout, 60.0)):
                answer = conn.recv()
                if isinstance(answer, Opened):
                    self.capabilities = answer.capabilities
                    return
                self._kill()
                raise DeviceError(answer.message if isinstance(answer, OpenFailed)
                                  else f"{self.spec}: answered {type(answer).__name__} to a reopen")
        except (EOFError, BrokenPipeError, ConnectionResetError):
            pass
        self._kill()
        raise DeviceError(f"{self.spec}: the device worker did not reopen the device")

    def call(self, method: str, args: tuple[Any, ...], timeout: float | None = None, label: str = "") -> Reply:
        """Call an optional device method (see CALLABLE_METHODS) with crash and timeout handling;
        ``label`` (a case id) goes into the history."""
        return self._exchange(CallRequest(method, args), timeout, label)

    def attempt(self, case: OpCase, inputs: list[np.ndarray], timeout: float | None = None) -> Reply:
        return self._exchange(RunRequest(case, inputs), timeout, case.case_id)

    def _remember(self, label: str) -> None:
        if not label:
            return
        self.history.append(label)
        if len(self.history) > HISTORY_LIMIT:
            del self.history[0]
            self.history_dropped += 1

    def _running(self) -> Channel:
        if self._proc is None or self._proc.poll() is not None or self._conn is None:
            self.start()
        assert self._conn is not None
        return self._conn

    def _exchange(self, request: Request, timeout: float | None, label: str) -> Reply:
        conn = self._running()
        self._remember(label)
        limit = self.timeout if timeout is None else timeout
        start = time.perf_counter()
        try:
            conn.send(request)
            if conn.spin(REPLY_SPIN_S) or conn.poll(limit):
                reply = conn.recv()
                if not isinstance(reply, Reply):
                    raise DeviceError(f"{self.spec}: the device worker answered {type(reply).__name__}")
                self.memory.seen(reply.rss_bytes)
                return reply
        except (EOFError, BrokenPipeError, ConnectionResetError):
            return self._crashed(time.perf_counter() - start)
        # no answer in time: kill it and record a timeout
        tail = self._stderr_tail()
        history, dropped = tuple(self.history), self.history_dropped
        self._kill()
        return Reply(
            Outcome.TIMEOUT,
            message=f"no answer within {limit:g} s; worker killed",
            crash=CrashInfo("SIGKILL", None, tail),
            duration_s=time.perf_counter() - start,
            history=history, history_dropped=dropped,
        )

    def refresh_info(self) -> dict[str, Any]:
        """The device's inventory asked afresh (``memory_free`` now), plus ``worker_rss_bytes``.

        ``self.inventory`` keeps what the device said when it opened (the results header's copy).
        A dead worker is restarted first; one that does not answer within the timeout is killed
        and a DeviceError raised.
        """
        conn = self._running()
        try:
            conn.send(InfoRequest())
            if conn.poll(self.timeout):
                answer = conn.recv()
                if isinstance(answer, InfoReply):
                    self.memory.seen(answer.info.get("worker_rss_bytes"))
                    return answer.info
        except (EOFError, BrokenPipeError, ConnectionResetError):
            pass
        self._kill()
        raise DeviceError(f"{self.spec}: the device worker did not answer an info request")

    def _crashed(self, elapsed: float) -> Reply:
        assert self._proc is not None
        try:
            code = self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            code = self._proc.wait()
        sig = None
        if code is not None and code < 0:
            try:
                sig = signal.Signals(-code).name
            except ValueError:
                sig = str(-code)
        if stopped_from_outside(sig):
            self._stop()
            raise KeyboardInterrupt(f"the device worker of {self.spec} was stopped by {sig}")
        tail = self._stderr_tail()
        last = next((ln for ln in reversed(tail.strip().splitlines()) if ln.strip()), "")
        history, dropped = tuple(self.history), self.history_dropped
        self._stop()
        what = f"signal {sig}" if sig else f"exit code {code}"
        return Reply(
            Outcome.CRASH,
            message=f"device worker died ({what}): {last}"[:500],
            crash=CrashInfo(sig, code, tail),
            duration_s=elapsed,
            history=history, history_dropped=dropped,
        )

    def _stderr_tail(self) -> str:
        return _tail(self._stderr_fd)

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._stop()

    def _stop(self) -> None:
        if self._conn is not None:
            try:
                if self._proc is not None and self._proc.poll() is None:
                    self._conn.send(Stop())
            except (BrokenPipeError, OSError):
                pass
            self._conn.close()
            self._conn = None
        if self._proc is not None:
            try:
                self._proc.wait(2)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        if self._stderr_fd >= 0:
            os.close(self._stderr_fd)
            self._stderr_fd = -1

    def close(self) -> None:
        self._stop()


@dataclass
class _Child:
    """A started worker process, the parent's end of its channel, and the (unlinked) file its stderr goes to."""

    proc: subprocess.Popen[bytes] | ForkedWorker
    conn: Channel
    stderr_fd: int


_FORK_SERVER: ForkServer | None = None


def close_fork_server() -> None:
    """End this process' fork server now (it also ends when this process does)."""
    global _FORK_SERVER
    if _FORK_SERVER is not None:
        _FORK_SERVER.close()
        _FORK_SERVER = None


def fork_server(env: dict[str, str]) -> ForkServer | None:
    """This process' fork server (shared by its workers), started on first use or after it died;
    None where it cannot start."""
    global _FORK_SERVER
    if _FORK_SERVER is None or not _FORK_SERVER.alive:
        try:
            _FORK_SERVER = ForkServer(env)
        except OSError:
            return None
        atexit.register(_FORK_SERVER.close)
    return _FORK_SERVER


def _tail(fd: int) -> str:
    """The last STDERR_TAIL_BYTES of what a child wrote to its stderr file."""
    try:
        size = os.fstat(fd).st_size
        return os.pread(fd, STDERR_TAIL_BYTES, max(0, size - STDERR_TAIL_BYTES)).decode(errors="replace")
    except OSError:
        return ""


def open_runner(spec: DeviceSpec | str, options: dict[str, Any], timeout: float) -> InProcessRunner | DeviceWorker:
    """The device behind the runner it declares: in process (golden), else a started worker."""
    from device.registry import runs_in_process

    spec = DeviceSpec.of(spec)
    if runs_in_process(spec):
        return InProcessRunner(spec, options)
    worker = DeviceWorker(spec, options, timeout=timeout)
    worker.start()
    return worker


def open_each(devices: list[DeviceSpec], options: dict[str, Any], timeout: float) -> None:
    """Open every device once in a worker process (all at once) and close it again.

    What a cheap check of the spec cannot see without opening (a ggml device name the library lacks,
    a CANN runtime that is missing or will not start, a plug-in factory that raises) is then one
    DeviceError before a session starts, not an aborted session. A crash while opening stays in the worker.
    """
    from concurrent.futures import ThreadPoolExecutor

    from device.registry import runs_in_process

    def probe(spec: DeviceSpec) -> None:
        worker = DeviceWorker(spec, options, timeout=timeout)
        try:
            worker.start()
        finally:
            worker.close()

    remote = [d for d in devices if not runs_in_process(d)]
    if remote:
        with ThreadPoolExecutor(max_workers=min(8, len(remote))) as pool:
            for done in [pool.submit(probe, spec) for spec in remote]:
                done.result()


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
    # Run as the imported module, not as __main__: the messages must pickle as device.worker.*,
    # the names the parent knows them by.
    from device.worker import main as _main

    _main()

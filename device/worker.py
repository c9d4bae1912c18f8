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
:class:`CallRequest`, :class:`InfoRequest`, :class:`Stop`; answers :class:`Opened`/:class:`OpenFailed`
(once, after :class:`OpenRequest`), :class:`Reply` and :class:`InfoReply`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Protocol

import numpy as np

from device.base import Capability, Device, DeviceError, Unsupported, capabilities_of
from device.outcome import Outcome
from device.spec import DeviceSpec
from golden.case import OpCase

STDERR_TAIL_BYTES = 4000
# A crash record carries at most this many of the latest case ids; earlier ones are only counted.
HISTORY_LIMIT = 1000
# Optional device methods the parent may call by name, and the capability that declares each.
CALLABLE_METHODS: dict[str, Capability] = {"transfer": Capability.TRANSFER}


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


Request = RunRequest | CallRequest | InfoRequest | Stop


@dataclass(frozen=True)
class Opened:
    info: dict[str, Any]
    capabilities: frozenset[Capability]


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

    @property
    def answered(self) -> bool:
        return self.outcome is None


# ---- serving one device (in the child, or in process) ---------------------------------------------

def process_rss() -> int | None:
    """This process' resident memory in bytes (Linux /proc), or None where it cannot be read."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def serve_run(device: Device, case: OpCase, inputs: list[np.ndarray]) -> Reply:
    start = time.perf_counter()
    try:
        run_checked = getattr(device, "run_checked", None)
        if run_checked is not None:
            supported, result = run_checked(case, inputs)
        else:
            supported = device.supports(case)
            result = device.run(case, inputs) if supported is not False else None
        if supported is False:
            return Reply(Outcome.UNSUPPORTED, False, message="the device's supports_op rejects this case",
                         duration_s=time.perf_counter() - start)
        return Reply(None, supported, result, duration_s=time.perf_counter() - start)
    except Unsupported as exc:
        return Reply(Outcome.UNSUPPORTED, None, message=str(exc), duration_s=time.perf_counter() - start)
    except Exception as exc:  # a Python-level failure of the device: an ERROR record
        tb = traceback.format_exc(limit=3)
        return Reply(Outcome.ERROR, None, message=f"{type(exc).__name__}: {exc} | {tb.strip().splitlines()[-2:]}",
                     duration_s=time.perf_counter() - start)


def serve_call(device: Device, method: str, args: tuple[Any, ...]) -> Reply:
    capability = CALLABLE_METHODS.get(method)
    if capability is None or capability not in capabilities_of(device):
        return Reply(Outcome.UNSUPPORTED, None, message=f"the device does not declare {method}()")
    start = time.perf_counter()
    try:
        result = getattr(device, method)(*args)
        return Reply(None, True, result, duration_s=time.perf_counter() - start)
    except Unsupported as exc:
        return Reply(Outcome.UNSUPPORTED, None, message=str(exc), duration_s=time.perf_counter() - start)
    except Exception as exc:
        return Reply(Outcome.ERROR, None, message=f"{type(exc).__name__}: {exc}",
                     duration_s=time.perf_counter() - start)


def serve_info(device: Device) -> dict[str, Any]:
    try:
        info = dict(device.info())
    except Exception as exc:
        info = {"error": f"{type(exc).__name__}: {exc}"}
    return info | {"worker_rss_bytes": process_rss()}


def _child_main(conn: Connection, request: OpenRequest) -> None:
    from device.registry import open_device

    try:
        device = open_device(request.spec, request.options)
        conn.send(Opened(device.info(), capabilities_of(device)))
    except BaseException as exc:  # report any failure to open as one line
        conn.send(OpenFailed(str(exc) if isinstance(exc, DeviceError) else f"{type(exc).__name__}: {exc}"))
        return
    while True:
        try:
            message = conn.recv()
        except EOFError:
            break
        if isinstance(message, RunRequest):
            conn.send(serve_run(device, message.case, message.inputs))
        elif isinstance(message, CallRequest):
            conn.send(serve_call(device, message.method, message.args))
        elif isinstance(message, InfoRequest):
            conn.send(InfoReply(serve_info(device)))
        else:  # Stop, or anything this worker does not know
            break
    try:
        device.close()
    except Exception:
        pass


# ---- the parent's side ----------------------------------------------------------------------------

class Runner(Protocol):
    """What the harness drives: a device behind a process boundary, or in process."""

    spec: DeviceSpec
    inventory: dict[str, Any]
    capabilities: frozenset[Capability]

    def attempt(self, case: OpCase, inputs: list[np.ndarray], timeout: float | None = None) -> Reply: ...

    def call(self, method: str, args: tuple[Any, ...], timeout: float | None = None, label: str = "") -> Reply: ...

    def refresh_info(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


class InProcessRunner:
    """Runs an in-process device (the golden oracle) with the worker's interface."""

    def __init__(self, spec: DeviceSpec, device: Device) -> None:
        self.spec = spec
        self.device = device
        self.inventory = device.info()
        self.capabilities = capabilities_of(device)

    def attempt(self, case: OpCase, inputs: list[np.ndarray], timeout: float | None = None) -> Reply:
        return serve_run(self.device, case, inputs)

    def call(self, method: str, args: tuple[Any, ...], timeout: float | None = None, label: str = "") -> Reply:
        return serve_call(self.device, method, args)

    def refresh_info(self) -> dict[str, Any]:
        return serve_info(self.device)

    def close(self) -> None:
        self.device.close()


class DeviceWorker:
    """A device served by a child process (restarted after a crash or timeout)."""

    def __init__(self, spec: DeviceSpec | str, options: dict[str, Any] | None = None, timeout: float = 120.0) -> None:
        self.spec = DeviceSpec.of(spec)
        self.options = dict(options or {})
        self.timeout = timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._stderr_path = ""
        self.inventory: dict[str, Any] = {}
        self.capabilities: frozenset[Capability] = frozenset()
        self.restarts = 0  # fresh children started after the first (crash, timeout)
        self._starts = 0
        self.history: list[str] = []  # case ids the current child ran, in order (the latest HISTORY_LIMIT)
        self.history_dropped = 0

    def start(self) -> dict[str, Any]:
        """Start the child and open the device there; raises DeviceError with its one-line reason."""
        self._stop()
        self.restarts += self._starts > 0
        self._starts += 1
        self.history, self.history_dropped = [], 0
        fd, self._stderr_path = tempfile.mkstemp(prefix="conform-worker-", suffix=".stderr")
        # A fresh interpreter (not fork: the parent may hold threads and ggml state; not
        # multiprocessing's spawn: it re-imports the caller's __main__). ggml prints its failed
        # assert on stderr, which goes to a file the parent reads after a crash.
        parent_sock, child_sock = socket.socketpair()
        env = dict(os.environ)
        env.setdefault("GGML_NO_BACKTRACE", "1")  # no gdb attach on abort: slow and noisy
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "device.worker", str(child_sock.fileno())],
            stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, pass_fds=(child_sock.fileno(),), env=env,
        )
        os.close(fd)
        child_sock.close()
        parent = Connection(parent_sock.detach())
        parent.send(OpenRequest(self.spec, self.options))
        self._conn = parent
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
        self.inventory = answer.info
        self.capabilities = answer.capabilities
        return answer.info

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

    def _running(self) -> Connection:
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
            if conn.poll(limit):
                reply = conn.recv()
                if not isinstance(reply, Reply):
                    raise DeviceError(f"{self.spec}: the device worker answered {type(reply).__name__}")
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
        try:
            with open(self._stderr_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - STDERR_TAIL_BYTES))
                return fh.read().decode(errors="replace")
        except OSError:
            return ""

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
        if self._stderr_path:
            try:
                os.unlink(self._stderr_path)
            except OSError:
                pass
            self._stderr_path = ""

    def close(self) -> None:
        self._stop()


def open_runner(spec: DeviceSpec | str, options: dict[str, Any], timeout: float) -> InProcessRunner | DeviceWorker:
    """The device behind the runner it declares: in process (golden), else a started worker."""
    from device.registry import open_device, runs_in_process

    spec = DeviceSpec.of(spec)
    if runs_in_process(spec):
        return InProcessRunner(spec, open_device(spec, options))
    worker = DeviceWorker(spec, options, timeout=timeout)
    worker.start()
    return worker


def main() -> None:
    conn = Connection(int(sys.argv[1]))
    request = conn.recv()
    if not isinstance(request, OpenRequest):
        raise SystemExit(f"device worker: expected an OpenRequest, got {type(request).__name__}")
    _child_main(conn, request)


if __name__ == "__main__":
    # Run as the imported module, not as __main__: the messages must pickle as device.worker.*,
    # the names the parent knows them by.
    from device.worker import main as _main

    _main()

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
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Protocol

import numpy as np

from device.base import (
    Capability,
    DeviceError,
    capabilities_of,
)
from device.channel import REPLY_SPIN_S, Arena, Channel, unlink_quietly
from device.interrupt import stopped_from_outside
from device.messages import (
    CallRequest,
    InfoReply,
    InfoRequest,
    Opened,
    OpenFailed,
    OpenRequest,
    ReopenRequest,
    Reply,
    Request,
    RunRequest,
    Stop,
    decode_message,
    encode_message,
)
from device.serve import close_quietly, open_checked, serve_call, serve_info, serve_run
from device.spec import DeviceKind, DeviceSpec
from device.zygote import ForkedWorker, ForkServer, ForkServerError
from golden.case import OpCase
from results.outcome import Outcome
from results.record import CrashInfo

STDERR_TAIL_BYTES = 4000
# A crash record carries at most this many of the latest case ids; earlier ones are only counted.
HISTORY_LIMIT = 1000


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
        close_quietly(self.device)
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
                    [sys.executable, "-m", "device.serve", str(child_sock.fileno()), arena_path],
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


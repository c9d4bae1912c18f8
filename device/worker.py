"""Device work in a child process, so a ggml abort is a recorded result and not a dead run.

:class:`DeviceWorker` owns one child process per device. Each :meth:`DeviceWorker.attempt` sends a
case and its inputs and waits (at most ``timeout`` seconds) for the answer. If the child dies the
attempt is a CRASH carrying the exit signal and the tail of the child's stderr (where ggml prints
its failed GGML_ASSERT); if it does not answer in time it is killed and the attempt is a TIMEOUT.
Either way the next attempt starts a fresh child.
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
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from device.base import DeviceError, RunResult, Unsupported
from golden.case import OpCase

STDERR_TAIL_BYTES = 4000


@dataclass
class Attempt:
    """One case on one device: status is ok, unsupported, crash, timeout or error."""

    status: str
    supported: bool | None = None
    result: RunResult | None = None
    message: str = ""
    crash: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0


def process_rss() -> int | None:
    """This process' resident memory in bytes (Linux /proc), or None where it cannot be read."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _child_main(conn: Any, spec: str, options: dict[str, Any]) -> None:
    from device.registry import open_device

    try:
        device = open_device(spec, options)
        conn.send(("ready", device.info()))
    except BaseException as exc:  # report any failure to open as one line
        conn.send(("open_failed", f"{type(exc).__name__}: {exc}" if not isinstance(exc, DeviceError) else str(exc)))
        return
    while True:
        try:
            message = conn.recv()
        except EOFError:
            break
        if message is None:
            break
        if message == "info":  # a fresh inventory (free memory now) and this process' RSS
            try:
                info = dict(device.info())
            except Exception as exc:
                info = {"error": f"{type(exc).__name__}: {exc}"}
            conn.send(("info", info | {"worker_rss_bytes": process_rss()}))
            continue
        if isinstance(message, tuple) and message and message[0] == "call":
            conn.send(_call_method(device, message[1], message[2]))
            continue
        case, inputs = message
        start = time.perf_counter()
        try:
            if hasattr(device, "run_checked"):
                supported, result = device.run_checked(case, inputs)
            else:
                supported = device.supports(case)
                result = device.run(case, inputs) if supported is not False else None
            if supported is False:
                reply = ("unsupported", False, None, "the device's supports_op rejects this case")
            else:
                reply = ("ok", supported, result, "")
        except Unsupported as exc:
            reply = ("unsupported", None, None, str(exc))
        except Exception as exc:  # a Python-level failure of the device: an ERROR record
            tb = traceback.format_exc(limit=3)
            reply = ("error", None, None, f"{type(exc).__name__}: {exc} | {tb.strip().splitlines()[-2:]}")
        conn.send(reply + (time.perf_counter() - start,))
    try:
        device.close()
    except Exception:
        pass


# optional device methods the parent may call by name (beyond the Device contract)
CALLABLE_METHODS = ("transfer",)


def _call_method(device: Any, method: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    start = time.perf_counter()
    if method not in CALLABLE_METHODS or not hasattr(device, method):
        return ("unsupported", None, None, f"the device has no {method}()", 0.0)
    try:
        result = getattr(device, method)(*args)
        return ("ok", True, result, "", time.perf_counter() - start)
    except Unsupported as exc:
        return ("unsupported", None, None, str(exc), time.perf_counter() - start)
    except Exception as exc:
        return ("error", None, None, f"{type(exc).__name__}: {exc}", time.perf_counter() - start)


class DeviceWorker:
    """A device served by a child process (restarted after a crash or timeout)."""

    def __init__(self, spec: str, options: dict[str, Any] | None = None, timeout: float = 120.0) -> None:
        self.spec = spec
        self.options = dict(options or {})
        self.timeout = timeout
        self._proc: Any = None
        self._conn: Any = None
        self._stderr_path = ""
        self.inventory: dict[str, Any] = {}
        self.restarts = 0  # fresh children started after the first (crash, timeout)
        self._starts = 0

    def start(self) -> dict[str, Any]:
        """Start the child and open the device there; raises DeviceError with its one-line reason."""
        self._stop()
        self.restarts += self._starts > 0
        self._starts += 1
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
        parent.send((self.spec, self.options))
        self._conn = parent
        if not parent.poll(max(self.timeout, 60.0)):
            self._stop()
            raise DeviceError(f"{self.spec}: the device worker did not start in time")
        try:
            kind, payload = parent.recv()
        except EOFError:
            tail = self._stderr_tail()
            self._stop()
            raise DeviceError(f"{self.spec}: the device worker died while opening the device: {tail[-300:]}") from None
        if kind != "ready":
            self._stop()
            raise DeviceError(payload)
        self.inventory = payload
        return payload

    def call(self, method: str, args: tuple[Any, ...], timeout: float | None = None) -> Attempt:
        """Call an optional device method (see CALLABLE_METHODS) with crash and timeout handling."""
        return self._exchange(("call", method, args), timeout)

    def attempt(self, case: OpCase, inputs: list[np.ndarray], timeout: float | None = None) -> Attempt:
        return self._exchange((case, inputs), timeout)

    def _exchange(self, message: Any, timeout: float | None) -> Attempt:
        if self._proc is None or self._proc.poll() is not None:
            self.start()
        limit = self.timeout if timeout is None else timeout
        start = time.perf_counter()
        try:
            self._conn.send(message)
            ready = self._conn.poll(limit)
            if ready:
                status, supported, result, message, duration = self._conn.recv()
                return Attempt(status, supported, result, message, duration_s=duration)
        except (EOFError, BrokenPipeError, ConnectionResetError):
            return self._crashed(time.perf_counter() - start)
        # no answer in time: kill it and record a timeout
        tail = self._stderr_tail()
        self._kill()
        return Attempt(
            "timeout",
            message=f"no answer within {limit:g} s; worker killed",
            crash={"signal": "SIGKILL", "exitcode": None, "stderr_tail": tail},
            duration_s=time.perf_counter() - start,
        )

    def refresh_info(self) -> dict[str, Any]:
        """The device's inventory asked afresh (``memory_free`` now), plus ``worker_rss_bytes``.

        ``self.inventory`` keeps what the device said when it opened (the results header's copy).
        A dead worker is restarted first; one that does not answer within the timeout is killed
        and a DeviceError raised.
        """
        if self._proc is None or self._proc.poll() is not None:
            self.start()
        try:
            self._conn.send("info")
            if self._conn.poll(self.timeout):
                kind, payload = self._conn.recv()
                if kind == "info":
                    return payload
        except (EOFError, BrokenPipeError, ConnectionResetError):
            pass
        self._kill()
        raise DeviceError(f"{self.spec}: the device worker did not answer an info request")

    def _crashed(self, elapsed: float) -> Attempt:
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
        self._stop()
        what = f"signal {sig}" if sig else f"exit code {code}"
        return Attempt(
            "crash",
            message=f"device worker died ({what}): {last}"[:500],
            crash={"signal": sig, "exitcode": code, "stderr_tail": tail},
            duration_s=elapsed,
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
                    self._conn.send(None)
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


def main() -> None:
    conn = Connection(int(sys.argv[1]))
    spec, options = conn.recv()
    _child_main(conn, spec, options)


if __name__ == "__main__":
    main()

"""A fork server for device workers: new workers in milliseconds instead of a fresh interpreter each.

A device worker that crashes is replaced, and a new Python with numpy and this package takes
hundreds of milliseconds to start (longer on a busy machine): a crash-heavy selection spent most of
its time there. The fork server is started once, imports what a worker needs and opens no device
(nothing that starts threads or holds device state, so forking it is safe), and forks a worker on
request. The forked worker takes the caller's environment and ``sys.path``, points its stdout and
stderr at the file it was given, and serves its socket exactly as a worker started by
``python -m device.serve`` does.

The fork server is the workers' parent, so it reaps them and reports each one's exit status to the
harness; :class:`ForkedWorker` is the harness' ``subprocess.Popen``-like handle on one worker.
The control socket is a ``SOCK_SEQPACKET`` pair (one pickle per message; the worker's descriptors
ride along as ``SCM_RIGHTS``). If the fork server dies, the harness starts workers as processes of
its own again.
"""

from __future__ import annotations

import os
import pickle
import select
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from typing import Any

from device.interrupt import ignore_stop_signals

_MESSAGE_BYTES = 1 << 20
_START_TIMEOUT_S = 120.0


class ForkServerError(Exception):
    """The fork server cannot start a worker (it is gone or did not answer)."""


class ForkServer:
    """The harness' handle on one fork server process."""

    def __init__(self, env: dict[str, str]) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "device.zygote", str(child.fileno())],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                pass_fds=(child.fileno(),), env=env,
            )
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        self.sock = parent
        self.exits: dict[int, int] = {}  # pid -> returncode (Popen's convention: -N for signal N)
        self._lock = threading.Lock()
        self._pending = select.poll()  # asked before every case: cheaper than a recv that finds nothing
        self._pending.register(parent.fileno(), select.POLLIN)

    @property
    def alive(self) -> bool:
        return self.sock.fileno() >= 0 and self.proc.poll() is None

    def spawn(self, conn_fd: int, stderr_fd: int, arena_path: str, env: dict[str, str]) -> ForkedWorker:
        """Fork a worker serving ``conn_fd`` with the arena at ``arena_path``, its stdout and stderr on
        ``stderr_fd`` (the caller keeps and closes its copies), in ``env``, the current directory and
        the module path a ``python -m device.serve`` started from here would have."""
        path = [os.getcwd()] + [p for p in sys.path if p and os.path.isdir(p)]
        with self._lock:
            try:
                self.sock.sendmsg([pickle.dumps(("spawn", arena_path, env, path, os.getcwd()))],
                                  [(socket.SOL_SOCKET, socket.SCM_RIGHTS, _fd_bytes([conn_fd, stderr_fd]))])
                deadline = time.monotonic() + _START_TIMEOUT_S
                while True:
                    message = self._receive(max(0.0, deadline - time.monotonic()))
                    if message is None:
                        raise ForkServerError("the fork server did not answer")
                    if message[0] == "spawned":
                        return ForkedWorker(self, int(message[1]))
                    if message[0] == "failed":
                        raise ForkServerError(f"the fork server could not fork: {message[1]}")
            except OSError as exc:
                raise ForkServerError(f"the fork server is gone ({exc})") from None

    def collect(self, timeout: float = 0.0) -> None:
        """Take in the exit notices waiting (waiting up to ``timeout`` seconds for the first)."""
        if timeout <= 0 and self.sock.fileno() >= 0 and not self._pending.poll(0):
            return
        with self._lock:
            try:
                self._receive(timeout)
            except OSError:
                pass

    def _receive(self, timeout: float) -> tuple[Any, ...] | None:
        """Read messages, recording exit notices, until one of another kind arrives (returned) or
        none is waiting (after ``timeout`` seconds for the first). Raises OSError when the fork server
        has gone; a dead fork server's workers are then reported as exited."""
        self.sock.settimeout(timeout if timeout > 0 else 0.0)
        try:
            while True:
                try:
                    data = self.sock.recv(_MESSAGE_BYTES)
                except (BlockingIOError, TimeoutError):
                    return None
                if not data:
                    self.sock.close()
                    raise OSError("end of stream")
                message = pickle.loads(data)
                if message[0] != "exited":
                    return message
                self.exits[int(message[1])] = int(message[2])
                self.sock.settimeout(0.0)
        finally:
            if self.sock.fileno() >= 0:
                self.sock.settimeout(None)

    def kill(self, pid: int) -> None:
        """SIGKILL a worker it still counts as running (it reaps them, so the pid cannot have been reused)."""
        with self._lock:
            try:
                self.sock.send(pickle.dumps(("kill", pid)))
            except OSError:
                _kill_orphan(pid)

    def close(self) -> None:
        """End the fork server (its workers stay until their own channels close)."""
        self.sock.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class ForkedWorker:
    """A worker forked by a :class:`ForkServer`, behind the part of ``subprocess.Popen`` the harness uses."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server = server
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.server.collect()
            self._settle()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            remaining = 0.1 if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                raise subprocess.TimeoutExpired(f"forked device worker {self.pid}", timeout or 0.0)
            self.server.collect(min(remaining, 0.1))
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            self.server.kill(self.pid)

    def _settle(self) -> None:
        if self.pid in self.server.exits:
            self.returncode = self.server.exits.pop(self.pid)
        elif not self.server.alive and not _exists(self.pid):
            self.returncode = -signal.SIGKILL  # its fork server died: the status is lost, the worker is gone


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_orphan(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _fd_bytes(fds: list[int]) -> bytes:
    import array

    return array.array("i", fds).tobytes()


# ---- the fork server's side --------------------------------------------------------------------

def serve(control_fd: int) -> None:
    """The fork server's loop: fork workers on request, reap them and report their exits."""
    import device.registry  # noqa: F401  (what a worker imports first: ready before the fork)
    import device.serve

    try:  # the ggml device's Python side (its op builders: tens of ms); no library is loaded here
        from device.ggml.graph import builders

        builders()
    except Exception:
        pass  # the worker imports it itself, as without a fork server

    sock = socket.socket(fileno=control_fd)
    # Ctrl-C and kill -- -PGID reach the whole process group: the harness decides what stops; this
    # process ends when the harness closes its socket, and its workers inherit the ignoring
    ignore_stop_signals()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    live: set[int] = set()
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    try:
        while True:
            for key, _ in selector.select():
                if key.fileobj == wake_r:
                    os.read(wake_r, 4096)
                    continue
                try:
                    data, ancillary, _, _ = sock.recvmsg(_MESSAGE_BYTES, socket.CMSG_SPACE(8))
                except OSError:
                    return
                if not data:
                    return  # the harness is gone
                message = pickle.loads(data)
                if message[0] == "kill":
                    if message[1] in live:
                        _kill_orphan(message[1])
                elif message[0] == "spawn":
                    fds = _received_fds(ancillary)
                    sys.stdout.flush()
                    sys.stderr.flush()
                    try:
                        pid = os.fork()
                    except OSError as exc:
                        for fd in fds:
                            os.close(fd)
                        sock.send(pickle.dumps(("failed", str(exc))))
                        continue
                    if pid == 0:
                        selector.close()
                        _become_worker(device.serve, sock, (wake_r, wake_w), fds, message[1:])
                    for fd in fds:
                        os.close(fd)
                    live.add(pid)
                    sock.send(pickle.dumps(("spawned", pid)))
            _reap(sock, live)
    finally:
        sock.close()


def _reap(sock: socket.socket, live: set[int]) -> None:
    while live:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        live.discard(pid)
        try:
            sock.send(pickle.dumps(("exited", pid, os.waitstatus_to_exitcode(status))))
        except OSError:
            pass


def _received_fds(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    import array

    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return list(fds)


def _become_worker(worker: Any, control: socket.socket, wake: tuple[int, int], fds: list[int],
                   request: tuple[str, dict[str, str], list[str], str]) -> None:
    """In the forked child: drop the fork server's state, take the request's environment, serve, exit."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        control.close()
        for fd in wake:
            os.close(fd)
        conn_fd, stderr_fd = fds
        os.dup2(stderr_fd, 1)
        os.dup2(stderr_fd, 2)
        os.close(stderr_fd)
        arena_path, env, path, cwd = request
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        sys.path[:] = path + [p for p in sys.path if p not in path]  # then the interpreter's own
        worker.serve(conn_fd, arena_path)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def main() -> None:
    serve(int(sys.argv[1]))


if __name__ == "__main__":
    # run as the imported module (not __main__), as device.serve does: its workers pickle by that name
    from device.zygote import main as _main

    _main()

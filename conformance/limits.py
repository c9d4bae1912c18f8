"""Time and memory limits on the harness's own stages of a case (the golden, the verdict), as the
device call has its ``--case-timeout``: a golden that would take hours, or allocate more than the
host holds, becomes a record saying which stage ran out of what under which limit, and the run goes on.

Two ways to run a stage (:func:`run_stage`):

- a large case (its float64 inputs hold at least :attr:`StageLimits.isolate_from` elements) runs
  the stage in a forked child process: the parent waits for its answer at most ``seconds`` of wall
  time and then kills it, so one long NumPy call is cut short too, and the child may allocate at
  most ``memory_bytes`` beyond what it inherited (``RLIMIT_DATA``, which counts NumPy's heap and
  anonymous mappings alike), so running out is the child's MemoryError, not the host's OOM killer,
  and uses one BLAS thread (:data:`STAGE_BLAS_THREADS`);
- a small case runs in the process under a real-time interval timer (SIGALRM) whose handler raises
  :class:`StageLimitExceeded` between bytecodes: forking for it would cost more than its golden
  (benchmarks/bench_stage_isolation.py prints both costs). Outside the main thread (no signals
  there) small stages run without a limit.

Ctrl-C reaches the parent only (the child ignores SIGINT); the parent kills the child and the
KeyboardInterrupt goes on up, never recorded as the case's failure. A child dies with its parent
(Linux's parent-death signal), so a killed run leaves no stage computing on.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import mmap
import os
import pickle
import resource
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from types import FrameType
from typing import Any, TypeVar, cast

from threadpoolctl import threadpool_limits

T = TypeVar("T")

GIB = 2**30
DEFAULT_STAGE_MEMORY_GIB = 2.0
# A stage whose float64 inputs hold fewer elements runs in the process: its golden takes
# milliseconds, less than a fork of a pytest process costs (benchmarks/bench_stage_isolation.py).
ISOLATE_FROM_ELEMENTS = 1 << 20
_READ_CHUNK = 1 << 20
# BLAS threads in a stage's child. A pool of spinning BLAS threads per judging process, beside the
# other xdist workers and the device's worker, oversubscribes the host: on a 2-core host at load 9,
# the 16k-key attention's golden and verdict took 295 s wall and 178 CPU-s with OpenBLAS's default
# 2 threads, 70 s and 36 CPU-s with one (benchmarks/bench_model_scale.py).
STAGE_BLAS_THREADS = 1
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
HOST_MEMORY = "the host's memory (no --stage-memory cap on this stage)"


class Resource(Enum):
    TIME = "time"
    MEMORY = "memory"


@dataclass(frozen=True)
class StageLimits:
    """The limits every harness stage of a case runs under, and which cases run in a child process."""

    seconds: float  # --case-timeout
    memory_bytes: int | None = int(DEFAULT_STAGE_MEMORY_GIB * GIB)  # --stage-memory; None: no cap
    isolate_from: int = ISOLATE_FROM_ELEMENTS

    def describe(self, what: Resource) -> str:
        """The option and value that bounded ``what`` in a stage's child, as the record names it."""
        if what is Resource.TIME:
            return f"--case-timeout {self.seconds:g} s"
        if self.memory_bytes is None:
            return HOST_MEMORY
        return f"--stage-memory {self.memory_bytes / GIB:g} GiB"


class StageLimitExceeded(Exception):  # noqa: N818 - it reads as what happened
    """The harness's ``stage`` of a case ran out of ``resource`` under ``limit`` (the option and value)."""

    def __init__(self, stage: str, resource: Resource, limit: str, detail: str = "") -> None:
        what = "ran past" if resource is Resource.TIME else "needed more memory than"
        super().__init__(f"the {stage} {what} {limit}" + (f" ({detail})" if detail else ""))
        self.stage = stage
        self.resource = resource
        self.limit = limit


class StageProcessDied(Exception):  # noqa: N818
    """The child process running a stage ended without an answer (killed by a signal, or exited)."""


class StageRaised(Exception):  # noqa: N818
    """What a stage raised in its child process, where the exception itself could not be sent back."""


@contextmanager
def stage_limit(limit_s: float, stage: str) -> Iterator[None]:
    """Raise :class:`StageLimitExceeded` in the body once ``limit_s`` seconds have passed (between
    bytecodes: see the module's docstring)."""
    if not (math.isfinite(limit_s) and limit_s > 0) or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: FrameType | None) -> None:
        raise StageLimitExceeded(stage, Resource.TIME, f"--case-timeout {limit_s:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    start = time.monotonic()
    outer_delay, outer_interval = signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_delay > 0:  # someone else's timer was running: give it back what is left of it
            signal.setitimer(signal.ITIMER_REAL, max(1e-3, outer_delay - (time.monotonic() - start)), outer_interval)


def run_stage(work: Callable[[], T], stage: str, limits: StageLimits, elements: int) -> T:
    """``work()`` under ``limits``: in a child process when ``elements`` (the case's size) reaches
    ``limits.isolate_from`` and the host can fork, else in this process under :func:`stage_limit`.
    Raises what ``work`` raised, :class:`StageLimitExceeded`, or :class:`StageProcessDied`."""
    if elements < limits.isolate_from or not hasattr(os, "fork"):
        with stage_limit(limits.seconds, stage):
            try:
                return work()
            except MemoryError as exc:  # no cap in the process: the host's memory ran out
                raise StageLimitExceeded(stage, Resource.MEMORY, HOST_MEMORY, " ".join(str(exc).split())) from None
    return _in_child(work, stage, limits)


def _in_child(work: Callable[[], T], stage: str, limits: StageLimits) -> T:
    read_end, write_end = os.pipe()
    # the answer's arrays go through a memory file, written once by the child and mapped by the parent:
    # through the pipe a 32 MiB golden cost ~120 ms of copies on a loaded host
    arrays = os.memfd_create("conform-stage") if hasattr(os, "memfd_create") else None
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: answer through the pipe and leave without running the parent's exit handlers
        exit_code = 1
        try:
            _die_with(parent)
            os.close(read_end)
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            threadpool_limits(STAGE_BLAS_THREADS)
            _cap_memory(limits.memory_bytes)
            _answer(write_end, arrays, work)
            exit_code = 0
        finally:
            os._exit(exit_code)
    os.close(write_end)
    try:
        payload = _read_answer(read_end, time.monotonic() + limits.seconds)
        answer: tuple[str, Any] = ("died", None)
        try:
            if payload is not None:
                answer = _unpack(payload, arrays)
        except Exception:  # a partial answer: the child died while writing it
            pass
    except TimeoutError:
        raise StageLimitExceeded(stage, Resource.TIME, limits.describe(Resource.TIME)) from None
    finally:  # also on Ctrl-C: no child outlives its stage
        os.close(read_end)
        if arrays is not None:
            os.close(arrays)
        wait_status = _reap(pid)
    kind, value = answer
    if kind == "ok":
        return cast(T, value)
    if kind == "memory":
        raise StageLimitExceeded(stage, Resource.MEMORY, limits.describe(Resource.MEMORY), str(value))
    if kind == "raised" and isinstance(value, BaseException):
        raise value
    raise StageProcessDied(f"the {stage} stage's child process ended without an answer ({_ended(wait_status)})")


def _die_with(parent: int) -> None:
    """Linux: the child is killed when the harness' process dies (a killed run leaves no stage
    computing on, holding the device worker's pipes open)."""
    if sys.platform != "linux":
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the request took effect
        os._exit(1)


def _cap_memory(limit: int | None) -> None:
    """At most ``limit`` more bytes of data than the process holds now (what it inherited)."""
    if limit is None:
        return
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    soft = _data_bytes() + limit
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


def _data_bytes() -> int:
    """The process' data segment as RLIMIT_DATA counts it (VmData), 0 where /proc does not say."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _answer(fd: int, arrays: int | None, work: Callable[[], object]) -> None:
    try:
        payload: tuple[str, object] = ("ok", work())
    except MemoryError as exc:
        payload = ("memory", " ".join(str(exc).split()))
    except BaseException as exc:  # noqa: BLE001 - every outcome goes back to the parent
        payload = ("raised", exc)
    buffers: list[pickle.PickleBuffer] = []
    try:
        data = pickle.dumps(payload, protocol=5, buffer_callback=buffers.append if arrays is not None else None)
    except MemoryError as exc:  # the answer itself did not fit under the cap
        data, buffers = pickle.dumps(("memory", f"sending the answer back: {exc}")), []
    except Exception as exc:  # an exception that does not pickle: its text does
        text = " ".join(str(payload[1]).split())
        data, buffers = pickle.dumps(("raised", StageRaised(f"{type(payload[1]).__name__}: {text} ({exc})"))), []
    sizes = []
    for buffer in buffers:  # each array's bytes once, into the memory file (not counted in RLIMIT_DATA)
        raw = buffer.raw()
        assert arrays is not None
        _write_all(arrays, raw)
        sizes.append(raw.nbytes)
    with os.fdopen(fd, "wb") as pipe:
        pipe.write(pickle.dumps((sizes, data), protocol=5))


def _write_all(fd: int, data: memoryview) -> None:
    data = data.cast("B")
    while data:
        data = data[os.write(fd, data):]


def _unpack(payload: bytes, arrays: int | None) -> tuple[str, Any]:
    """The child's answer: the pickle from the pipe, its arrays' bytes mapped from the memory file
    (private, so they are writable; the mapping lives as long as the arrays)."""
    sizes, data = pickle.loads(payload)
    total = sum(sizes)
    if not sizes or arrays is None:
        return cast(tuple[str, Any], pickle.loads(data))
    view = memoryview(mmap.mmap(arrays, total, flags=mmap.MAP_PRIVATE)) if total else memoryview(b"")
    starts = [0, *itertools.accumulate(sizes)]
    return cast(tuple[str, Any], pickle.loads(data, buffers=[view[a:b] for a, b in itertools.pairwise(starts)]))


def _read_answer(fd: int, deadline: float) -> bytes | None:
    """Everything the child wrote, once it closed the pipe; None when it wrote nothing (it died).
    TimeoutError once ``deadline`` (monotonic seconds) passes."""
    chunks: list[bytes] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        ready, _, _ = select.select([fd], [], [], min(left, 3600.0))
        if not ready:
            continue
        chunk = os.read(fd, _READ_CHUNK)
        if not chunk:
            return b"".join(chunks) or None
        chunks.append(chunk)


def _reap(pid: int) -> int | None:
    """Collect the child (no zombie), killing it if it has not ended within a moment of closing
    its pipe; its wait status, None where it could not be collected."""
    try:
        for _ in range(100):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            time.sleep(0.001)
        os.kill(pid, signal.SIGKILL)
        return os.waitpid(pid, 0)[1]
    except ChildProcessError:
        return None


def _ended(status: int | None) -> str:
    if status is None:
        return "its exit status is unknown"
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def ran_out(exc: BaseException) -> tuple[Resource, str] | None:
    """What ran out and under which limit, where ``exc`` says a stage ran out (a MemoryError raised
    in the harness's own process: the host's memory); else None."""
    if isinstance(exc, StageLimitExceeded):
        return exc.resource, exc.limit
    if isinstance(exc, MemoryError):
        return Resource.MEMORY, HOST_MEMORY
    return None

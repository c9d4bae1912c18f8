"""The pipe between the harness and a device worker: pickled messages, arrays through shared memory.

A :class:`Channel` wraps the socket :class:`~multiprocessing.connection.Connection` of one worker
with the same ``send``/``recv``/``poll``/``close``. Messages are pickled with protocol 5, whose
out-of-band buffers (the bytes of every contiguous numpy array) are copied into an :class:`Arena`,
a file in ``/dev/shm`` both processes map, rather than pushed through the socket: a case's tensors
(up to a few hundred KiB) would otherwise block each side on the socket buffer several times per
case, and on a busy machine every such wait costs a scheduling delay. Only a short frame crosses the
socket. A buffer that does not fit the arena (perf-mode tensors) follows the frame over the socket.

Requests and replies strictly alternate, so each side writes the arena from its start and the
reader copies its buffers out before it answers; nothing received aliases the arena.
"""

from __future__ import annotations

import math
import mmap
import os
import pickle
import select
import struct
import tempfile
import time
from multiprocessing.connection import Connection
from typing import Any

# How long a side waiting for the other's next message checks the socket without sleeping. A blocked
# process that is woken costs tens of µs (in a VM, a halted vCPU's wake-up), as much as a small
# case's whole compute; spinning, with a yield per check so a process with work gets the core, avoids
# it when the answer is that close: a 16-element case's round trip went from 314 to 193 µs.
REPLY_SPIN_S = 1e-3  # the harness, after sending a case: most small cases answer sooner
REQUEST_SPIN_S = 2e-3  # the worker, after answering: the harness' next case usually comes sooner
ARENA_BYTES = 8 << 20  # reserved per worker process: a case's tensors and its output fit many times over
_ALIGN = 64
_FRAME = struct.Struct("<II")  # pickle length, buffer count
_SLOT = struct.Struct("<qQ")  # arena offset (-1: the bytes follow over the socket), length


class Arena:
    """A shared-memory file of fixed size mapped by the parent and one worker process."""

    def __init__(self, path: str, create: bool = False, size: int = ARENA_BYTES) -> None:
        self.path = path
        self.size = size
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                # reserve the pages now: writing into a sparse file on a full tmpfs raises SIGBUS
                os.posix_fallocate(fd, 0, size)
            self.map: mmap.mmap | None = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            if create:
                unlink_quietly(path)
            raise
        os.close(fd)
        self.view = memoryview(self.map)

    @classmethod
    def create(cls) -> Arena | None:
        """A new arena in /dev/shm (else the temp directory), or None where none can be reserved:
        the channel then sends every buffer over the socket."""
        where = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        fd, path = tempfile.mkstemp(prefix="conform-arena-", dir=where)
        os.close(fd)
        os.unlink(path)
        try:
            return cls(path, create=True)
        except OSError:
            return None

    def close(self) -> None:
        if self.map is not None:
            self.view.release()
            self.map.close()
            self.map = None
        unlink_quietly(self.path)  # the worker unlinks it once mapped; this covers one that died first


def unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class Channel:
    """A Connection whose messages carry their array bytes through an :class:`Arena`."""

    def __init__(self, conn: Connection, arena: Arena | None) -> None:
        self.conn = conn
        self.arena = arena
        self._poller = select.poll()  # registered once: Connection.poll builds a selector per call
        self._poller.register(conn.fileno(), select.POLLIN)

    def send(self, obj: Any) -> None:
        buffers: list[pickle.PickleBuffer] = []
        data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
        slots = []
        inband = []
        offset = 0
        for buffer in buffers:
            raw = buffer.raw()
            size = raw.nbytes
            if self.arena is not None and offset + size <= self.arena.size:
                self.arena.view[offset : offset + size] = raw
                slots.append(_SLOT.pack(offset, size))
                offset += (size + _ALIGN - 1) // _ALIGN * _ALIGN
            else:
                slots.append(_SLOT.pack(-1, size))
                inband.append(raw)
        self.conn.send_bytes(b"".join([_FRAME.pack(len(data), len(buffers)), *slots, data]))
        for raw in inband:
            self.conn.send_bytes(raw)

    def recv(self) -> Any:
        frame = self.conn.recv_bytes()
        length, count = _FRAME.unpack_from(frame)
        at = _FRAME.size
        buffers: list[bytearray] = []
        for _ in range(count):
            offset, size = _SLOT.unpack_from(frame, at)
            at += _SLOT.size
            if offset < 0:
                buffers.append(bytearray(self.conn.recv_bytes()))
            else:
                if self.arena is None or offset + size > self.arena.size:
                    raise ValueError("a message names arena bytes this side has not mapped")
                buffers.append(bytearray(self.arena.view[offset : offset + size]))  # a copy: the arena is reused
        return pickle.loads(memoryview(frame)[at : at + length], buffers=buffers)

    def poll(self, timeout: float | None = 0.0) -> bool:
        """Whether a message (or the end of the stream) is waiting, after at most ``timeout`` seconds
        (None: no limit)."""
        if self.conn.closed:
            raise OSError("handle is closed")
        return bool(self._poller.poll(None if timeout is None else max(0, math.ceil(timeout * 1000))))

    def spin(self, seconds: float) -> bool:
        """Check for a message for up to ``seconds`` without blocking, yielding the core between
        checks; whether one (or the end of the stream) is waiting."""
        if self._poller.poll(0):
            return True
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            os.sched_yield()
            if self._poller.poll(0):
                return True
        return False

    def close(self) -> None:
        self.conn.close()
        if self.arena is not None:
            self.arena.close()

"""The pipe between the harness and a device worker: pickled messages through shared memory.

A :class:`Channel` joins the harness and one worker process with ``send``/``recv``/``poll``/``spin``.
Messages are pickled with protocol 5. Where both sides map an :class:`Arena` (a file in
``/dev/shm``), a message — its pickle and the bytes of its numpy arrays, passed out of band — is
written there and announced by a sequence number in the arena's control block, and the receiver,
spinning on that number, picks it up without a system call. Measured on a small case, each socket
operation of the old design (a frame over the socket, a poll per spin step) cost as much as the
pickling: a 16-element case's round trip went from 2.4× to less than 2× the in-process time.

The socket stays for what shared memory cannot do:

* waking a receiver that stopped spinning and sleeps in ``poll``: it sets its ``sleeping`` flag,
  and a sender that sees the flag sends an empty frame. The flag and the sequence number are
  separate stores that the CPU may reorder, so a sleeper also looks at the arena every
  :data:`SLEEP_SLICE_S`: a wake-up lost to that race costs at most one slice, never a hang;
* the end of the stream: a worker that dies closes its end, which wakes the harness (a spinner
  checks the socket every :data:`SOCKET_CHECK_S`);
* messages that do not fit the arena (perf-mode tensors): frame and buffers go over the socket.

Requests and replies strictly alternate, so each side writes the arena's data region from its
start, and the reader copies its buffers out before it answers; nothing received aliases the arena.
"""

from __future__ import annotations

import io
import math
import mmap
import os
import pickle
import select
import struct
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

# How long a side waiting for the other's next message spins before it sleeps. A woken process costs
# tens of µs (in a VM, a halted vCPU's wake-up), as much as a small case's whole compute; spinning,
# with a yield per check so a process with work gets the core, avoids it when the answer is that close.
REPLY_SPIN_S = 1e-3  # the harness, after sending a case: most small cases answer sooner
REQUEST_SPIN_S = 2e-3  # the worker, after answering: the harness' next case usually comes sooner
SOCKET_CHECK_S = 1e-4  # a spinner checks the socket (a dead peer, an oversized message) this often
SLEEP_SLICE_S = 5e-3  # a sleeper looks at the arena this often (see the module docstring)
ARENA_BYTES = 8 << 20  # reserved per worker process: a case's tensors and its output fit many times over
HARNESS, WORKER = 0, 1  # the two sides of a channel

_ALIGN = 64
_CONTROL_BYTES = 64  # int64 words: sequence numbers, sleeping flags and message lengths, per side
_SEQ, _SLEEPING, _LENGTH = 0, 2, 4  # word index of each side's field: base + side
_FRAME = struct.Struct("<II")  # pickle length, buffer count
_SLOT = struct.Struct("<qQ")  # offset of the buffer (-1: the bytes follow over the socket), length
_WAKE = b""  # an empty socket frame: "look at the arena"


def _plain_array(obj: Any) -> bool:
    """A C-contiguous numpy array of a plain dtype: its bytes and (shape, dtype string) say it all."""
    return (type(obj) is np.ndarray and obj.flags.c_contiguous and obj.dtype.fields is None
            and obj.dtype.subdtype is None and not obj.dtype.hasobject)


class _Pickler(pickle.Pickler):
    """Protocol 5 with a shorter form for plain numpy arrays: ``ndarray(shape, dtype string, buffer)``
    instead of numpy's reduce, whose dtype object alone takes several pickled calls to rebuild."""

    def reducer_override(self, obj: Any) -> Any:
        if _plain_array(obj):
            return np.ndarray, (obj.shape, obj.dtype.str, pickle.PickleBuffer(memoryview(obj)))
        return NotImplemented


def dumps(obj: Any, buffers: list[pickle.PickleBuffer]) -> bytes:
    """``obj`` pickled as the channel sends it; the out-of-band buffers are appended to ``buffers``."""
    out = io.BytesIO()
    _Pickler(out, protocol=5, buffer_callback=buffers.append).dump(obj)
    return out.getvalue()


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
        # aligned int64 words: numpy reads and writes each with one load or store, never torn
        self.control = np.frombuffer(self.map, np.int64, _CONTROL_BYTES // 8)

    @classmethod
    def create(cls) -> Arena | None:
        """A new arena in /dev/shm (else the temp directory), or None where none can be reserved:
        the channel then sends every message over the socket."""
        where = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        fd, path = tempfile.mkstemp(prefix="conform-arena-", dir=where)
        os.close(fd)
        os.unlink(path)
        try:
            return cls(path, create=True)
        except OSError:
            return None

    def close(self) -> None:
        mapping, self.map = self.map, None
        if mapping is not None:
            self.control = np.zeros(_CONTROL_BYTES // 8, np.int64)  # reads after close find no message
            try:
                self.view.release()
                mapping.close()
            except BufferError:
                # a traceback still holds a view of it (a peer died while this side was reading):
                # the mapping goes when that view does
                pass
        unlink_quietly(self.path)  # the worker unlinks it once mapped; this covers one that died first


def unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _same(message: Any) -> Any:
    return message


class _EndOfStream:
    """What ``poll`` found when the peer closed its end: ``recv`` raises EOFError."""


class Channel:
    """One side (:data:`HARNESS` or :data:`WORKER`) of a worker's socket and arena."""

    def __init__(self, conn: Connection, arena: Arena | None, side: int = HARNESS,
                 encode: Callable[[Any], Any] = _same, decode: Callable[[Any], Any] = _same) -> None:
        """``encode`` maps a message to what is pickled and ``decode`` maps it back (a wire form)."""
        self.conn = conn
        self._encode, self._decode = encode, decode
        self.arena = arena
        self._side, self._peer = side, 1 - side
        self._sent = 0  # messages this side wrote to the arena
        self._seen = 0  # the peer's arena messages this side has read
        self._pending: Any = None  # a socket message (or _EndOfStream) that poll took off the socket
        self._poller = select.poll()  # registered once: Connection.poll builds a selector per call
        self._poller.register(conn.fileno(), select.POLLIN)

    # ---- sending ----------------------------------------------------------------------------------

    def send(self, obj: Any) -> None:
        buffers: list[pickle.PickleBuffer] = []
        data = dumps(self._encode(obj), buffers)
        raws = [buffer.raw() for buffer in buffers]
        arena = self.arena
        if arena is not None:
            header = _FRAME.size + _SLOT.size * len(raws) + len(data)
            offset = _CONTROL_BYTES + (header + _ALIGN - 1) // _ALIGN * _ALIGN
            offsets = []
            for raw in raws:
                offsets.append(offset)
                offset += (raw.nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
            if offset <= arena.size:
                slots = (_SLOT.pack(at, raw.nbytes) for at, raw in zip(offsets, raws, strict=True))
                frame = b"".join([_FRAME.pack(len(data), len(raws)), *slots, data])
                view = arena.view
                view[_CONTROL_BYTES : _CONTROL_BYTES + len(frame)] = frame
                for at, raw in zip(offsets, raws, strict=True):
                    view[at : at + raw.nbytes] = raw
                control = arena.control
                control[_LENGTH + self._side] = len(frame)
                self._sent += 1
                control[_SEQ + self._side] = self._sent  # published: the peer may read it all now
                if control[_SLEEPING + self._peer]:
                    self.conn.send_bytes(_WAKE)
                return
        # no arena, or too big for it: the frame and each buffer over the socket
        frame = b"".join([_FRAME.pack(len(data), len(raws)), *(_SLOT.pack(-1, r.nbytes) for r in raws), data])
        self.conn.send_bytes(frame)
        for raw in raws:
            self.conn.send_bytes(raw)

    # ---- receiving --------------------------------------------------------------------------------

    def _arena_waiting(self) -> bool:
        return self.arena is not None and int(self.arena.control[_SEQ + self._peer]) != self._seen

    def _take_socket_frame(self) -> bool:
        """Read one frame off the (readable) socket: a wake-up is dropped (False); a message or the
        end of the stream is kept for ``recv`` (True)."""
        try:
            frame = self.conn.recv_bytes()
        except EOFError:
            self._pending = _EndOfStream()
            return True
        if frame == _WAKE:
            return False
        self._pending = self._decode_socket_message(frame)
        return True

    def poll(self, timeout: float | None = 0.0) -> bool:
        """Whether a message (or the end of the stream) is waiting, after at most ``timeout`` seconds
        (None: no limit)."""
        if self.conn.closed:
            raise OSError("handle is closed")
        if self._pending is not None or self._arena_waiting():
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        control = self.arena.control if self.arena is not None else None
        if control is not None:
            control[_SLEEPING + self._side] = 1
        try:
            while True:
                if self._arena_waiting():
                    return True
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                wait = left if control is None else SLEEP_SLICE_S if left is None else min(SLEEP_SLICE_S, left)
                if self._poller.poll(None if wait is None else math.ceil(wait * 1000)):
                    if self._take_socket_frame():
                        return True
                    continue  # a wake-up: the message is in the arena
                if left is not None and left <= 0:
                    return self._arena_waiting()
        finally:
            if control is not None:
                control[_SLEEPING + self._side] = 0

    def spin(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for a message without sleeping, yielding the core between checks;
        whether one (or the end of the stream) is waiting."""
        if self._pending is not None or self._arena_waiting():
            return True
        now = time.perf_counter()
        deadline, next_socket_check = now + seconds, now
        yield_core, arena_waiting = os.sched_yield, self._arena_waiting
        while True:
            if arena_waiting():
                return True
            now = time.perf_counter()
            if now >= next_socket_check:
                if self._poller.poll(0) and self._take_socket_frame():
                    return True
                next_socket_check = now + SOCKET_CHECK_S
            if now >= deadline:
                return False
            yield_core()

    def recv(self) -> Any:
        while True:
            pending, self._pending = self._pending, None
            if isinstance(pending, _EndOfStream):
                raise EOFError
            if pending is not None:
                return pending
            if self._arena_waiting():
                return self._decode_arena_message()
            self.poll(None)

    def _decode_arena_message(self) -> Any:
        arena = self.arena
        assert arena is not None

        def arena_bytes(offset: int, size: int) -> bytearray:
            if offset < _CONTROL_BYTES or offset + size > arena.size:
                raise ValueError("a message names arena bytes outside the arena's data")
            return bytearray(arena.view[offset : offset + size])  # a copy: the arena is reused

        frame = arena.view[_CONTROL_BYTES : _CONTROL_BYTES + int(arena.control[_LENGTH + self._peer])]
        message = self._unpickle(frame, arena_bytes)
        frame.release()
        self._seen += 1
        return message

    def _decode_socket_message(self, frame: bytes) -> Any:
        def socket_bytes(offset: int, _size: int) -> bytearray:
            if offset >= 0:
                raise ValueError("a socket message names arena bytes")
            return bytearray(self.conn.recv_bytes())

        return self._unpickle(memoryview(frame), socket_bytes)

    def _unpickle(self, frame: memoryview, buffer_at: Callable[[int, int], bytearray]) -> Any:
        """The message of a frame (header, buffer slots, pickle); ``buffer_at(offset, size)`` gives
        each out-of-band buffer."""
        data_length, count = _FRAME.unpack_from(frame)
        at = _FRAME.size
        buffers = []
        for _ in range(count):
            buffers.append(buffer_at(*_SLOT.unpack_from(frame, at)))
            at += _SLOT.size
        return self._decode(pickle.loads(frame[at : at + data_length], buffers=buffers))

    def close(self) -> None:
        self.conn.close()
        if self.arena is not None:
            self.arena.close()

"""The harness–worker channel: messages through the shared-memory arena or, when they do not fit,
over the socket; a sleeping receiver is woken; a dead peer ends the stream; the wire form of a
case's request and reply rebuilds them exactly."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection

import numpy as np
import pytest

from device.base import RunResult
from device.channel import HARNESS, WORKER, Arena, Channel
from device.messages import Reply, RunRequest, decode_message, encode_message
from golden.case import CONTIGUOUS, Layout, OpCase, TensorSpec
from results.outcome import Outcome


def _pair(arena_bytes: int | None = 1 << 16) -> tuple[Channel, Channel]:
    a, b = socket.socketpair()
    arena = Arena.create() if arena_bytes is not None else None
    if arena is not None and arena_bytes is not None:
        arena.close()
        arena = Arena(arena.path, create=True, size=arena_bytes)
    peer_arena = Arena(arena.path, size=arena.size) if arena is not None else None
    harness = Channel(Connection(a.detach()), arena, HARNESS, encode_message, decode_message)
    worker = Channel(Connection(b.detach()), peer_arena, WORKER, encode_message, decode_message)
    return harness, worker


@pytest.fixture
def pair() -> Iterator[tuple[Channel, Channel]]:
    harness, worker = _pair()
    yield harness, worker
    harness.close()
    worker.close()


def test_arena_round_trip_keeps_arrays_and_strict_alternation(pair: tuple[Channel, Channel]) -> None:
    harness, worker = pair
    rng = np.random.default_rng(1)
    for i in range(50):
        x = rng.standard_normal((1, 2, 3, 5)).astype(np.float16)
        harness.send({"i": i, "x": x})
        assert worker.spin(1.0)
        got = worker.recv()
        assert got["i"] == i and got["x"].dtype == np.float16 and np.array_equal(got["x"], x)
        got["x"][0, 0, 0, 0] = 7  # received arrays are private copies, writable
        worker.send(("back", i))
        assert harness.poll(5.0)
        assert harness.recv() == ("back", i)
    assert not worker.poll(0.0) and not harness.poll(0.0)


def test_oversized_message_goes_over_the_socket() -> None:
    harness, worker = _pair(arena_bytes=4096)
    try:
        big = np.arange(10_000, dtype=np.float32)  # 40 kB: over the 4 kB arena
        harness.send([big, "after"])
        assert worker.poll(5.0)
        got = worker.recv()
        assert np.array_equal(got[0], big) and got[1] == "after"
        worker.send("small")  # and the arena still carries the next one
        assert harness.recv() == "small"
    finally:
        harness.close()
        worker.close()


def test_without_arena_everything_goes_over_the_socket() -> None:
    harness, worker = _pair(arena_bytes=None)
    try:
        harness.send(np.ones(3))
        assert worker.spin(1.0)
        assert np.array_equal(worker.recv(), np.ones(3))
    finally:
        harness.close()
        worker.close()


def test_sleeping_receiver_is_woken_well_before_its_timeout(pair: tuple[Channel, Channel]) -> None:
    harness, worker = pair

    def later() -> None:
        time.sleep(0.2)
        worker.send("late")

    thread = threading.Thread(target=later)
    start = time.monotonic()
    thread.start()
    assert harness.poll(30.0)
    waited = time.monotonic() - start
    thread.join()
    assert harness.recv() == "late"
    assert waited < 10.0


def test_stale_wake_up_is_not_a_message(pair: tuple[Channel, Channel]) -> None:
    harness, worker = pair
    worker.conn.send_bytes(b"")  # a wake-up whose message was already read
    assert not harness.spin(0.01)
    assert not harness.poll(0.05)
    worker.send("real")
    assert harness.poll(1.0) and harness.recv() == "real"


def test_dead_peer_ends_the_stream_while_spinning_and_while_sleeping() -> None:
    for wait in ("spin", "poll"):
        harness, worker = _pair()
        worker.close()
        if wait == "spin":
            assert harness.spin(1.0)
        else:
            assert harness.poll(30.0)
        with pytest.raises(EOFError):
            harness.recv()
        harness.close()


def test_dead_forked_peer_is_seen_by_a_spinning_harness() -> None:
    harness, worker = _pair()
    pid = os.fork()
    if pid == 0:  # the worker side: die without answering
        os._exit(3)
    worker.close()
    harness.send("anyone?")
    assert harness.spin(2.0) or harness.poll(10.0)
    with pytest.raises(EOFError):
        harness.recv()
    os.waitpid(pid, 0)
    harness.close()


# ---- the wire form ---------------------------------------------------------------------------------

def _case() -> OpCase:
    return OpCase(
        "SOFT_MAX",
        (TensorSpec("f32", (5, 3, 2, 1)),
         TensorSpec("f16", (5, 3, 1, 1), Layout((0, 2, 1, 3), (1, 0, 0, 0), 3), "mask")),
        params=(("scale", 0.25), ("max_bias", 8.0), ("sinks", (1, 2))),
        dst="f32", form="ext", data_seed=17, distribution="normal",
    )


def test_request_wire_form_rebuilds_the_case_and_inputs() -> None:
    case = _case()
    inputs: list[np.ndarray] = [np.arange(30, dtype=np.float32).reshape(1, 2, 3, 5), np.ones((1, 1, 3, 5), np.float16)]
    back = decode_message(encode_message(RunRequest(case, inputs)))
    assert back.case == case and back.case.case_id == case.case_id
    assert back.case.inputs[0].layout is CONTIGUOUS
    for got, want in zip(back.inputs, inputs, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)


def test_reply_wire_form_rebuilds_every_field() -> None:
    output = np.arange(8, dtype=np.int32).reshape(2, 4)
    result = RunResult(output, [np.zeros(3, np.float32)], {"compute_s": 1e-5, "notes": ["a", 1]})
    for reply in (
        Reply(None, True, result, "", 0.5, None, ("c1", "c2"), 4, 1234),
        Reply(Outcome.UNSUPPORTED, False, None, "declined", 0.1),
        Reply(Outcome.ERROR, None, None, "boom", 0.2, rss_bytes=None),
    ):
        back = decode_message(encode_message(reply))
        assert type(back) is Reply
        assert (back.outcome, back.supported, back.message, back.duration_s, back.history, back.history_dropped,
                back.rss_bytes) == (reply.outcome, reply.supported, reply.message, reply.duration_s, reply.history,
                                    reply.history_dropped, reply.rss_bytes)
        if reply.result is None:
            assert back.result is None
        else:
            assert np.array_equal(back.result.output, output) and back.result.output.dtype == np.int32
            assert back.result.extra == reply.result.extra
            assert np.array_equal(back.result.inputs_after[0], np.zeros(3))


def test_arrays_without_a_plain_form_still_cross() -> None:
    strided = np.arange(20, dtype=np.float32)[::3]
    records = np.zeros(2, dtype=[("d", "<u2"), ("qs", "V4")])
    reply = Reply(None, True, RunResult(strided, [records]), "")
    harness, worker = _pair()
    try:
        worker.send(reply)
        back = harness.recv()
        assert np.array_equal(back.result.output, strided)
        assert back.result.inputs_after[0].dtype == records.dtype
    finally:
        harness.close()
        worker.close()


def test_closing_while_a_view_of_the_arena_is_alive() -> None:
    """A peer that dies while this side holds a view of the arena (a traceback's frame keeps one):
    closing must not raise, or the crash would be recorded as a harness error."""
    harness, worker = _pair()
    assert harness.arena is not None
    held = harness.arena.control  # what a traceback's frame of poll() keeps alive
    view = harness.arena.view[0:16]
    worker.close()
    harness.close()
    assert held.shape == (8,) and view.nbytes == 16

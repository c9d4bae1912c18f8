"""Stopping on SIGINT and SIGTERM: who stops, and how an interruption differs from a device failure.

The harness process (``conform``, pytest) stops on SIGINT or SIGTERM by raising KeyboardInterrupt,
so pytest ends the session as interrupted and the results, JUnit XML and report are kept, marked
partial. That holds where a script started the run in the background: such a shell hands its
background jobs SIGINT ignored, and Python then leaves it ignored.

A device worker ignores both: a signal sent to the whole process group (Ctrl-C, ``kill -- -PGID``)
would otherwise kill it mid-case, and its death would read as a CRASH of whatever op it was running.
The harness stops its workers itself as it closes (killing any that do not answer).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


def stop_on_signals() -> None:
    """In a harness process: SIGINT and SIGTERM raise KeyboardInterrupt, even where SIGINT came in
    ignored. A handler some other code installed is left alone; outside the main thread nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) in (signal.SIG_DFL, signal.SIG_IGN, None):
            signal.signal(signum, _raise_interrupt)


def ignore_stop_signals() -> None:
    """In a device worker: the harness decides when the worker stops."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def stopped_from_outside(signal_name: str | None) -> bool:
    """A worker that died of a stop signal was stopped from outside (it ignores them; someone signalled
    it directly, or a library reset its handlers): an interruption, never a device failure."""
    return signal_name in {s.name for s in STOP_SIGNALS}

"""Time limits on the harness's own stages of a case (the golden, the verdict), as the device call
has its ``--case-timeout``: a golden that would take hours becomes a record saying which stage ran
out, and the run goes on.

The limit is a real-time interval timer (SIGALRM) whose handler raises :class:`StageLimitExceeded`
in the main thread, so it interrupts Python code between bytecodes: the model-scale goldens work
in blocks and return to Python often; a single NumPy call is not cut short, it is stopped when it
returns. Outside the main thread (no signals there) stages run without a limit.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class StageLimitExceeded(Exception):  # noqa: N818 - it reads as what happened
    """The harness's ``stage`` of a case ran longer than ``limit_s`` seconds."""

    def __init__(self, stage: str, limit_s: float) -> None:
        super().__init__(f"the {stage} ran past the case timeout of {limit_s:g} s")
        self.stage = stage
        self.limit_s = limit_s


@contextmanager
def stage_limit(limit_s: float, stage: str) -> Iterator[None]:
    """Raise :class:`StageLimitExceeded` in the body once ``limit_s`` seconds have passed."""
    if not (math.isfinite(limit_s) and limit_s > 0) or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: FrameType | None) -> None:
        raise StageLimitExceeded(stage, limit_s)

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


def ran_out(exc: BaseException) -> str | None:
    """``"time"`` or ``"memory"`` when ``exc`` is a stage running out of either, else None."""
    if isinstance(exc, StageLimitExceeded):
        return "time"
    if isinstance(exc, MemoryError):
        return "memory"
    return None

"""Checks of the run options that ``conform`` and the pytest plug-in share, so both refuse the same
input with the same one-line reason (a :class:`ValueError` whose text is that line).
"""

from __future__ import annotations

import math
import os

# A case that has not answered in a day is hung; a bigger number is a typo (and inf overflows the
# worker's poll()).
MAX_CASE_TIMEOUT_S = 86_400.0
# More CPU threads than this only oversubscribes the host (one worker reached 1,088 threads on
# --threads 100000 and no case finished).
THREADS_PER_CORE = 4


def max_threads() -> int:
    return THREADS_PER_CORE * (os.cpu_count() or 1)


def check_case_timeout(seconds: float) -> float:
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_CASE_TIMEOUT_S):
        raise ValueError(f"--case-timeout must be a number of seconds above 0 and at most {MAX_CASE_TIMEOUT_S:g} "
                         f"(got {seconds:g})")
    return seconds


def check_known_bug_timeout(seconds: float | None) -> float | None:
    """``--known-bug-timeout``: none (follow --case-timeout), or a limit like --case-timeout's."""
    if seconds is None:
        return None
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_CASE_TIMEOUT_S):
        raise ValueError(f"--known-bug-timeout must be a number of seconds above 0 and at most "
                         f"{MAX_CASE_TIMEOUT_S:g} (got {seconds:g})")
    return seconds


def check_threads(threads: int) -> int:
    limit = max_threads()
    if not 1 <= threads <= limit:
        raise ValueError(f"--threads must be between 1 and {limit} ({THREADS_PER_CORE} per CPU core here; "
                         f"got {threads})")
    return threads


def parse_ops(values: list[str] | None) -> frozenset[str]:
    """``--op`` values (repeatable, comma-separated, any case) as catalogue op names; ValueError for
    a name the catalogue does not have. Empty: no selection by op."""
    from golden import catalogue

    names = [part.strip().upper() for value in values or [] for part in value.split(",") if part.strip()]
    unknown = [name for name in names if name not in catalogue.OPS]
    if unknown:
        raise ValueError(f"--op: unknown op(s) {', '.join(unknown)} (conform ops lists them)")
    return frozenset(names)

"""What happened to one case on one device: the outcome every layer records and reads.

The values are the strings results files carry (``results/RESULTS.md``); :class:`Outcome` is a
``StrEnum``, so a record's ``"outcome"`` compares equal to its member and serialises as the string.
"""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    PASS = "pass"  # computed, and within the op's error model
    FAIL = "fail"  # computed, but wrong (values, inputs written, device memory)
    CRASH = "crash"  # the device process died (a GGML_ASSERT abort, a segfault)
    TIMEOUT = "timeout"  # the device did not answer within the case timeout
    UNSUPPORTED = "unsupported"  # the device declined the case
    ERROR = "error"  # the device (or the harness) raised instead of answering

    @property
    def failing(self) -> bool:
        """Whether this outcome fails a test (and gets an artefact and a repro line)."""
        return self in FAILING

    @property
    def process_died(self) -> bool:
        """A crash or a timeout: the device process is gone and its history is what led there."""
        return self in (Outcome.CRASH, Outcome.TIMEOUT)


FAILING = frozenset({Outcome.FAIL, Outcome.CRASH, Outcome.TIMEOUT, Outcome.ERROR})

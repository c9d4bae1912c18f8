"""A pytest plug-in whose session takes a minute to finish: a run a second Ctrl-C stops before pytest
writes its JUnit XML (as a device that is slow to close would). It says when it starts waiting."""

from __future__ import annotations

import sys
import time

import pytest

SLOW_FINISH_LINE = "slow-finish: waiting before pytest writes its JUnit XML"


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    print(f"\n{SLOW_FINISH_LINE}", file=sys.stderr, flush=True)
    time.sleep(60)

"""Time limits come from the user: --case-timeout, or a shorter --known-bug-timeout the user set for cases
a known bug says may corrupt the process and hang. The record says which limit applied."""

from __future__ import annotations

from dataclasses import replace

import pytest

from conformance.harness import Harness
from conformance.options import check_known_bug_timeout
from device.known_bug import KnownBug
from golden import catalogue
from golden.case import OpCase, TensorSpec
from results.outcome import Outcome

PLUGINS = "tests.plugins.faulty"
SILU = OpCase("SILU", (TensorSpec("f32", (8, 1, 1, 1)),), data_seed=1)


def _corrupting(may_hang: bool = True) -> KnownBug:
    return KnownBug(id="test-silu-overrun", devices="*", op="SILU", applies=lambda case: True,
                    reason="planted", repro=SILU.case_id, outcomes=("timeout",), corrupts_process=True,
                    may_hang=may_hang)


def test_a_corrupting_known_bug_follows_the_case_timeout_unless_the_user_says_otherwise() -> None:
    h = Harness("golden", {}, timeout=600.0)
    try:
        assert h.time_limit([_corrupting()]).seconds == 600.0  # no hard-coded shorter limit
        assert h.time_limit([_corrupting()]).option == "--case-timeout"
        h.known_bug_timeout = 30.0
        assert (h.time_limit([_corrupting()]).seconds, h.time_limit([_corrupting()]).option) == \
            (30.0, "--known-bug-timeout")
        assert h.time_limit([_corrupting(may_hang=False)]).seconds == 600.0  # its first use legitimately takes long
        assert h.time_limit([]).option == "--case-timeout"
        h.known_bug_timeout = 900.0  # never longer than the case timeout
        assert h.time_limit([_corrupting()]).seconds == 600.0
    finally:
        h.close()


def test_the_record_says_which_limit_applied(monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness(f"{PLUGINS}:hangs_on_silu", {}, timeout=30.0, known_bug_timeout=1.0)
    monkeypatch.setattr(h, "known_bugs_of", lambda case: [_corrupting()])
    try:
        record = h.evaluate(SILU)
    finally:
        h.close()
    assert record.outcome is Outcome.TIMEOUT and record.expected is not None
    assert record.to_json()["time_limit"] == {"seconds": 1.0, "option": "--known-bug-timeout"}
    assert "within 1 s" in record.message


def test_a_plain_case_records_the_case_timeout() -> None:
    h = Harness("golden", {}, timeout=42.0)
    try:
        record = h.evaluate(OpCase("RELU", (TensorSpec("f32", (8, 1, 1, 1)),), data_seed=1))
    finally:
        h.close()
    assert record.to_json()["time_limit"] == {"seconds": 42.0, "option": "--case-timeout"}


@pytest.mark.parametrize("value", [0.0, -1.0, float("inf"), float("nan")])
def test_a_bad_known_bug_timeout_is_refused(value: float) -> None:
    with pytest.raises(ValueError, match="--known-bug-timeout"):
        check_known_bug_timeout(value)


def test_a_crash_under_a_deviation_and_a_crash_entry_is_the_crash_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A case covered by a documented deviation (first in the list) and by a defect that crashes: the
    crash is explained by the defect, not left unexpected because the first entry only bounds a result."""
    deviation = KnownBug("planted-deviation", "*", "SILU", lambda c: True, "planted", "",
                         tolerance=catalogue.tolerance_of(SILU))
    crash = replace(_corrupting(), id="planted-crash", outcomes=("timeout",))
    h = Harness(f"{PLUGINS}:hangs_on_silu", {}, timeout=30.0, known_bug_timeout=1.0)
    monkeypatch.setattr(h, "known_bugs_of", lambda case: [deviation, crash])
    try:
        record = h.evaluate(SILU)
    finally:
        h.close()
    assert record.outcome is Outcome.TIMEOUT
    assert record.expected is not None and record.expected.id == "planted-crash"
    assert record.to_json()["time_limit"] == {"seconds": 1.0, "option": "--known-bug-timeout"}

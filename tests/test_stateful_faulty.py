"""The stateful sequence test must catch a device that replays a graph cached by shape."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from conformance.harness import CaseFailed, Harness
from conformance.test_stateful import same_shape_machine
from golden.case import OpCase, TensorSpec

CACHING = "tests.plugins.faulty:caches_by_shape"
SEQUENCE = settings(max_examples=60, stateful_step_count=12, database=None, derandomize=True, deadline=None,
                    report_multiple_bugs=False, print_blob=False, suppress_health_check=list(HealthCheck))


@pytest.fixture
def caching_harness():
    h = Harness(CACHING, {}, timeout=60)
    yield h
    h.close()


def scale(s: float, seed: int) -> OpCase:
    return OpCase("SCALE", (TensorSpec("f32", (64, 3, 1, 1)),), params=(("s", s), ("bias", 0.0)), data_seed=seed)


def test_each_case_alone_passes_on_the_caching_device(caching_harness: Harness) -> None:
    """One case per shape is right: only a repeated shape with other params shows the bug."""
    assert caching_harness.evaluate(scale(2.0, 1)).outcome == "pass"
    assert caching_harness.evaluate(scale(2.0, 2)).outcome == "pass"  # same params: the cache is right
    stale = caching_harness.evaluate(scale(3.0, 3))
    assert stale.outcome == "fail"  # computed with s=2


def test_state_machine_catches_the_shape_keyed_cache(caching_harness: Harness) -> None:
    with pytest.raises(CaseFailed) as failure:
        run_state_machine_as_test(same_shape_machine(caching_harness), settings=SEQUENCE)
    message = str(failure.value)
    assert message.startswith("FAIL ") and f"on {CACHING}" in message
    assert any(op in message for op in ("SCALE(", "CLAMP(", "LEAKY_RELU(")), message
    assert "reproduce: conform repro" in message


def test_state_machine_passes_on_a_correct_device() -> None:
    h = Harness("golden", {}, timeout=60)
    try:
        run_state_machine_as_test(same_shape_machine(h), settings=settings(SEQUENCE, max_examples=15))
    finally:
        h.close()

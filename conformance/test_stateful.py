"""Stateful sequences: one device, one shape, many ops with changing params, dtypes and layouts.

Backends that cache compiled graphs (or kernels, or aclnn executors) keyed by shape have shipped
bugs where the cached graph was replayed for a case with other op params or dtypes: the first
SCALE(s=2) is right, the next SCALE(s=3) of the same shape silently computes s=2. A suite that runs
every case in a fresh graph and a fresh order never repeats a shape, so it cannot see them.

:class:`SameShapeSequence` is a hypothesis ``RuleBasedStateMachine``: it fixes one shape per run,
then applies SCALE (s, bias), CLAMP (min, max), LEAKY_RELU (slope), ADD/MUL (dtypes, strided
layouts) and GELU/SILU (dtypes) to it in any order, each checked by ``harness.check(case)`` in the
same device worker. :func:`same_shape_machine` binds it to a harness (the session's ``conform``
here; any :class:`~conformance.harness.Harness` in the harness's own tests).

Each sequence starts on a freshly opened device (:meth:`Harness.reopen_device`), so a state bug
fails the same sequence every time: Hypothesis can shrink it, and its replay is not "flaky". A
failure is reported as :class:`SequenceFailed`: the failing case first, then the cases of its
sequence that led to it, and a ``conform repro --sequence`` line that replays them in that order
on a fresh device process. Hypothesis' ``FlakyFailure`` (a device whose state outlives even a
reopen) is never the headline: :func:`run_sequences` re-raises the shortest failing sequence seen.

:func:`test_long_sequence_memory` runs a long sequence and reports how the device's free memory
and the device process' RSS moved (JUnit properties and the test output).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

from conformance.harness import CaseFailed
from conformance.strategies import f32, finish, input_layouts, layouts, shapes, spec
from golden import catalogue
from golden.case import Ne, OpCase

PARAMETRIC = ("SCALE", "CLAMP", "LEAKY_RELU")
BINARY = ("ADD", "MUL")
UNARY = ("GELU", "SILU")

MEMORY_GROWTH_BOUND = 64 * 2**20  # bytes; generous: a leak of one buffer per case exceeds it fast

# a few values, so a sequence often repeats an op with the same shape and *different* params
param_values = st.one_of(
    st.sampled_from([0.0, 1.0, -1.0, 0.5, 2.0, -0.25, 0.01, 3.0]),
    st.floats(-4.0, 4.0, allow_nan=False, width=32),
)
# small shapes: the point is repetition, not size
sequence_shapes = shapes(max_ne0=1024, max_elements=4096, max_outer=4)


def params_for(draw: Any, op: str) -> tuple[tuple[str, float], ...]:
    if op == "SCALE":
        return (("s", f32(draw(param_values))), ("bias", f32(draw(st.one_of(st.just(0.0), param_values)))))
    if op == "CLAMP":
        lo, hi = sorted((draw(param_values), draw(param_values)))
        return (("min", f32(lo)), ("max", f32(hi)))
    if op == "LEAKY_RELU":
        return (("slope", f32(draw(param_values))),)
    return ()


def unary_case(draw: Any, op: str, ne: Ne) -> OpCase:
    op_spec = catalogue.get(op)
    sig = draw(st.sampled_from(op_spec.signatures))
    layout = draw(input_layouts(op_spec.input_layouts))
    return finish(draw, OpCase(op, (spec(sig.srcs[0], ne, layout),), params=params_for(draw, op), dst=sig.dst))


def binary_case(draw: Any, op: str, ne: Ne) -> OpCase:
    sig = draw(st.sampled_from(catalogue.get(op).signatures))
    a = spec(sig.srcs[0], ne, draw(layouts()))
    b = spec(sig.srcs[1], ne, draw(layouts(perms=())))  # same shape; src1 may be strided
    return finish(draw, OpCase(op, (a, b), dst=sig.dst))


class SequenceFailed(CaseFailed):
    """A case of a stateful sequence failed; the message names the case, the sequence and its repro."""

    def __init__(self, message: str, cases: tuple[str, ...]) -> None:
        super().__init__(message)
        self.cases = cases


def sequence_message(failure: str, cases: list[str], harness: Any) -> str:
    """The failing case's own line, then the sequence that led to it and the line that replays it."""
    first, _, rest = failure.partition("\n")
    lines = [first]
    if len(cases) > 1:
        lines.append(f"  the case ran after {len(cases) - 1} other case(s) of one sequence, in this order, on a "
                     "freshly opened device:")
        lines += [f"    {i}. {case_id}" for i, case_id in enumerate(cases[:-1], 1)]
        lines.append(f"    {len(cases)}. {cases[-1]}   <- {first.split(' ', 1)[0]}")
    lines.append(f"  reproduce the sequence: {harness.sequence_repro(cases)}")
    if rest.strip():
        lines.append(rest.replace("reproduce:", "the case alone:", 1))
    return "\n".join(lines)


class SameShapeSequence(RuleBasedStateMachine):
    """One shape per run; ops applied to it in any order with any params, dtypes and layouts."""

    harness: Any = None  # bound by same_shape_machine()
    fresh_device = True  # reopen the device before each sequence (see the module docstring)
    failures: list[SequenceFailed]  # every failing sequence seen, for run_sequences

    def __init__(self) -> None:
        super().__init__()
        self.ne: Ne = (1, 1, 1, 1)
        self.cases: list[str] = []
        if self.fresh_device:
            self.harness.reopen_device()

    @initialize(ne=sequence_shapes)
    def choose_shape(self, ne: Ne) -> None:
        self.ne = ne

    def _check(self, case: OpCase) -> None:
        __tracebackhide__ = True
        self.cases.append(case.case_id)
        try:
            self.harness.check(case)  # raises CaseFailed (with the repro line) on fail/crash/timeout/error
        except CaseFailed as exc:
            failure = SequenceFailed(sequence_message(str(exc), self.cases, self.harness), tuple(self.cases))
            type(self).failures.append(failure)
            raise failure from None

    @rule(op=st.sampled_from(PARAMETRIC), data=st.data())
    def parametric(self, op: str, data: st.DataObject) -> None:
        """The same op and shape again, with new params (and dtype/layout where the op has several)."""
        self._check(unary_case(data.draw, op, self.ne))

    @rule(op=st.sampled_from(BINARY), data=st.data())
    def binary(self, op: str, data: st.DataObject) -> None:
        self._check(binary_case(data.draw, op, self.ne))

    @rule(op=st.sampled_from(UNARY), data=st.data())
    def unary(self, op: str, data: st.DataObject) -> None:
        self._check(unary_case(data.draw, op, self.ne))


def same_shape_machine(harness: Any, fresh_device: bool = True) -> type[SameShapeSequence]:
    """The state machine bound to ``harness`` (a subclass, so machines for two harnesses can coexist)."""
    return type("SameShapeSequence", (SameShapeSequence,),
                {"harness": harness, "fresh_device": fresh_device, "failures": []})


def run_sequences(machine: type[SameShapeSequence], settings: settings) -> None:
    """Run the state machine; a Hypothesis flakiness error is replaced by the shortest failing
    sequence it saw (chained, so Hypothesis' own report stays below it)."""
    __tracebackhide__ = True
    try:
        run_state_machine_as_test(machine, settings=settings)
    except (Flaky, BaseExceptionGroup) as exc:
        if not machine.failures:
            raise
        shortest = min(machine.failures, key=lambda failure: len(failure.cases))
        raise shortest from exc


def sequence_settings(base: settings | None = None) -> settings:
    """The loaded profile's examples, with short sequences for dev/ci and long ones for nightly."""
    base = base or settings()
    steps = 12 if base.max_examples <= 30 else 50
    return settings(base, stateful_step_count=steps)


def test_same_shape_sequence(conform: Any) -> None:
    """Repeating one shape with other params/dtypes/layouts must not replay a stale cached graph."""
    run_sequences(same_shape_machine(conform), sequence_settings())


def _memory(info: dict[str, Any]) -> tuple[int | None, int | None]:
    return info.get("memory_free"), info.get("worker_rss_bytes")


def test_long_sequence_memory(conform: Any, record_property: Any) -> None:
    """A long same-shape sequence must not eat device memory (nor grow the device process)."""
    machine = same_shape_machine(conform, fresh_device=False)  # one device state throughout: its memory
    # warm up (imports, allocator pools, first graphs), then measure around a long sequence
    run_state_machine_as_test(machine, settings=settings(sequence_settings(), max_examples=2, database=None))
    free_before, rss_before = _memory(conform.refresh_info())
    run_state_machine_as_test(machine, settings=settings(
        sequence_settings(), max_examples=max(10, settings().max_examples), stateful_step_count=25,
        database=None))
    free_after, rss_after = _memory(conform.refresh_info())
    report = {
        "memory_free_before": free_before, "memory_free_after": free_after,
        "worker_rss_before": rss_before, "worker_rss_after": rss_after,
    }
    for key, value in report.items():
        record_property(key, value)
    lines = []
    if free_before is not None and free_after is not None:
        lines.append(f"device free memory {free_before / 2**20:.1f} -> {free_after / 2**20:.1f} MiB "
                     f"(growth {(free_before - free_after) / 2**20:+.1f} MiB)")
    if rss_before is not None and rss_after is not None:
        lines.append(f"device process RSS {rss_before / 2**20:.1f} -> {rss_after / 2**20:.1f} MiB "
                     f"(growth {(rss_after - rss_before) / 2**20:+.1f} MiB)")
    print(f"{conform.device_spec}: " + "; ".join(lines or ["no memory figures from this device"]))
    if free_before is not None and free_after is not None:
        assert free_before - free_after < MEMORY_GROWTH_BOUND, lines[0]
    if rss_before is not None and rss_after is not None:
        assert rss_after - rss_before < MEMORY_GROWTH_BOUND, lines[-1]
    if free_before is None and rss_before is None:
        pytest.skip(f"{conform.device_spec} reports no memory figures")

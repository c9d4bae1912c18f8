"""Crashes that need history: replay a sequence of cases on a fresh device process, and shrink it.

Some device crashes do not reproduce alone: an earlier case left the backend in a state (a cached
graph, a pool, a stale pointer) that a later, innocent-looking case trips over. A CRASH or TIMEOUT
record carries the ids of the cases its device process ran since it started (``history``, ending
with the crashing case). :func:`replay` runs such a sequence in order on a fresh worker;
:func:`shrink` reduces it by delta debugging (drop chunks of the earlier cases while the last case
still dies the same way) to a sequence no single case can be removed from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from conformance.graphs import evaluate_graph_case
from conformance.harness import Harness
from conformance.set_get import SetGetCase
from device.spec import DeviceSpec
from golden.case import OpCase
from golden.graphs.case import GraphCase
from results.outcome import Outcome
from results.record import CaseRecord, ExpectedFailure

SequenceCase = OpCase | SetGetCase | GraphCase


@dataclass(frozen=True)
class Step:
    case_id: str
    outcome: Outcome
    message: str
    # the listed entry that gives this outcome for this case (as the suite counts it), or None
    expected: ExpectedFailure | None = None

    @property
    def unexpected(self) -> bool:
        """A failure no listed entry explains."""
        return self.outcome.failing and self.expected is None


@dataclass(frozen=True)
class Replay:
    """What a sequence did on a fresh device process; it stops at the first crash or timeout."""

    steps: tuple[Step, ...]
    length: int  # cases in the sequence (steps may be fewer: the run stops where the process died)

    @property
    def died_at(self) -> int | None:
        """The index of the step whose process died, or None."""
        return next((i for i, s in enumerate(self.steps) if s.outcome.process_died), None)

    def reproduces(self, target: Outcome) -> bool:
        """The last case, and no earlier one, ended the process with ``target`` (CRASH or TIMEOUT)."""
        return self.died_at == self.length - 1 and self.steps[-1].outcome is target


class SequenceRunner:
    """Replays sequences of cases on ``spec``, each on a fresh device process."""

    def __init__(self, spec: DeviceSpec, options: dict[str, Any], timeout: float,
                 on_step: Callable[[int, int, Step], None] | None = None, expectations: Sequence[str] = ()) -> None:
        self.spec = spec
        self.expectations = tuple(expectations)
        self.options = options
        self.timeout = timeout
        self.on_step = on_step
        self.replays = 0

    def replay(self, cases: Sequence[SequenceCase]) -> Replay:
        self.replays += 1
        harness = Harness(self.spec, self.options, timeout=self.timeout, keep_artefacts=False, crashes_alone=False,
                          expectations=self.expectations)
        steps: list[Step] = []
        try:
            for case in cases:
                if isinstance(case, GraphCase):
                    record = evaluate_graph_case(harness, case)
                elif isinstance(case, SetGetCase):
                    record = harness.evaluate_set_get(case)
                else:
                    record = harness.evaluate(case)
                step = Step(record.case_id, record.outcome, record.message,
                            _covering_entry(harness, case, record, after_others=bool(steps)))
                steps.append(step)
                if self.on_step is not None:
                    self.on_step(len(steps), len(cases), step)
                if step.outcome.process_died:
                    break
        finally:
            harness.close()
        return Replay(tuple(steps), len(cases))


def _covering_entry(harness: Harness, case: SequenceCase, record: CaseRecord,
                    after_others: bool) -> ExpectedFailure | None:
    """The entry that gives the record's outcome: the harness's own match (the suite's rule: the entry must
    list this outcome), else, for a crash or timeout after other cases of the process, the device's
    after-history entry (state earlier cases left) where it lists that outcome."""
    if record.expected is not None or not (after_others and record.outcome.process_died):
        return record.expected
    if not isinstance(case, OpCase):
        return None
    bug = harness.after_history_bug_of(case)
    return ExpectedFailure.of(bug) if bug is not None and record.outcome.value in bug.outcomes else None


def shrink(runner: SequenceRunner, cases: Sequence[SequenceCase], target: Outcome) -> list[SequenceCase]:
    """The shortest sequence found whose last case still ends the process with ``target``.

    Delta debugging over the cases before the last (which is always kept): split them into chunks,
    drop every chunk whose removal keeps the crash, then halve the chunks, down to single cases,
    until no single case can go. ``cases`` must reproduce the crash.
    """
    *before, last = cases
    if runner.replay([last]).reproduces(target):
        return [last]

    def dies(prefix: list[SequenceCase]) -> bool:
        return runner.replay([*prefix, last]).reproduces(target)

    granularity = 2
    while len(before) >= 2:
        chunks = _split(before, granularity)
        dropped = False
        i = 0
        while i < len(chunks) and len(chunks) > 1:
            rest = [c for j, chunk in enumerate(chunks) if j != i for c in chunk]
            if dies(rest):
                del chunks[i]  # the next chunk moves up to i
                dropped = True
            else:
                i += 1
        before = [c for chunk in chunks for c in chunk]
        if granularity >= len(before) and not dropped:
            break  # no single case can go: 1-minimal
        if not dropped:
            granularity = min(len(before), 2 * granularity)
        granularity = max(2, min(granularity, len(before)))
    return [*before, last]


def _split(items: list[SequenceCase], parts: int) -> list[list[SequenceCase]]:
    size, extra = divmod(len(items), parts)
    chunks, start = [], 0
    for i in range(parts):
        end = start + size + (i < extra)
        chunks.append(items[start:end])
        start = end
    return [c for c in chunks if c]

"""Running one case on one device end to end: inputs, golden, device attempt, verdict, record.

:class:`Harness` is what the pytest fixture ``conform`` hands to tests and what ``conform repro``
uses. ``check(case)`` returns the :class:`~results.record.CaseRecord` and raises
:class:`CaseFailed` (an AssertionError) for fail/crash/timeout/error outcomes, with the one-line
repro attached. ``check_set_get`` does the same for a set/get round trip
(:class:`~conformance.set_get.SetGetCase`).

No case goes unrecorded: an exception anywhere on the way (the input maker, the golden, the
device, the verdict, the record itself) becomes an ERROR record that names the step and the error.

A circuit breaker (:class:`Breaker`) bounds what a crashing or hanging op costs: after the first
crash or timeout in a Hypothesis test, shrinking may spend a few more device attempts
(:data:`BREAKER_EXTRA_DEATHS`, :data:`BREAKER_EXTRA_ATTEMPTS`); then the test's later examples are
skipped without touching the device, and counted (the results footer's ``breakers``).
"""

from __future__ import annotations

import os
import shlex
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn

import numpy as np

from conformance import cases
from conformance.data import as_stored
from conformance.inputs import make_inputs
from conformance.limits import (
    DEFAULT_STAGE_MEMORY_GIB,
    GIB,
    ISOLATE_FROM_ELEMENTS,
    StageLimits,
    ran_out,
    run_stage,
    stage_limit,
)
from conformance.resolution import Resolution, resolve
from conformance.set_get import SetGetCase
from conformance.stages import Stage, StageClock
from conformance.verdict import same_values
from conformance.verdict.judge import Judgement, judge_output
from conformance.verdict.raw import judge_raw_inputs
from device import known_bugs
from device.base import Capability, DeviceError, RunResult
from device.known_bug import KnownBug
from device.messages import Reply
from device.spec import DeviceSpec
from device.worker import DeviceWorker, InProcessRunner, open_runner
from golden import catalogue, dtypes, quant
from golden.case import Layout, OpCase, TensorSpec
from golden.geometry import check_aliases
from results.outcome import Outcome
from results.record import CaseDescription, CaseRecord, ExpectedFailure, TimeLimit

# RunResult.extra keys that are the verdict's input rather than measurements worth recording
VERDICT_ONLY_EXTRA = ("input_bytes_intact",)

# Circuit breaker budget, per test and device, after the test's first crash or timeout: how many
# more of them shrinking may cost (a timeout costs the whole --case-timeout), and how many device
# attempts in all. Hypothesis tries its simplest example first, so a hang on every input is
# already at its smallest when it first trips.
BREAKER_EXTRA_DEATHS = {Outcome.TIMEOUT: 1, Outcome.CRASH: 4}
BREAKER_EXTRA_ATTEMPTS = 40
MESSAGE_LIMIT = 500


class CaseFailed(AssertionError):
    """A case whose outcome is fail, crash, timeout or error."""


@dataclass
class Breaker:
    """One test's failures on one device, and its circuit breaker once a case crashed or timed out.

    ``failures`` keeps each failing case's CaseFailed text and ``passed`` each passing case id: when
    Hypothesis replays an example once the breaker no longer runs the device (its final report of the
    shrunk example, or a recheck of one that passed), the known answer is given again — rejecting it
    instead would read to Hypothesis as a flaky test.
    """

    test_id: str
    failures: dict[str, str] = field(default_factory=dict)
    passed: set[str] = field(default_factory=set)
    tripped_by: str = ""  # the case id of the first crash or timeout
    outcome: Outcome | None = None
    deaths: int = 0  # crashes and timeouts, the first included
    attempts_after: int = 0  # device attempts after the first crash or timeout
    skipped: int = 0  # examples not run because the breaker was open
    repeats: int = 0  # suite cases drawn again after they passed, not run again (Harness.check(once=True))
    covered: set[str] = field(default_factory=set)  # drawn cases a known bug covered (Harness.check_drawn)

    @property
    def tripped(self) -> bool:
        return self.outcome is not None

    @property
    def open(self) -> bool:
        """No more device attempts for this test: the shrinking budget is spent."""
        if self.outcome is None:
            return False
        return (self.deaths - 1 >= BREAKER_EXTRA_DEATHS.get(self.outcome, 0)
                or self.attempts_after >= BREAKER_EXTRA_ATTEMPTS)

    def saw(self, record: CaseRecord, failure: str | None) -> None:
        if self.tripped:
            self.attempts_after += 1
        if failure is not None and len(self.failures) < 10_000:
            self.failures[record.case_id] = failure
        elif failure is None and len(self.passed) < 10_000:
            self.passed.add(record.case_id)
        # a known bug's crash fails no test (nothing to shrink) and costs one quick restart: only
        # unexpected deaths, and every timeout (each costs its timeout), count toward the budget
        if record.outcome.process_died and (failure is not None or record.outcome is Outcome.TIMEOUT):
            self.deaths += 1
            if self.outcome is None:
                self.outcome, self.tripped_by = record.outcome, record.case_id

    def to_json(self, device: str) -> dict[str, Any]:
        return {"test_id": self.test_id, "device": device, "case_id": self.tripped_by,
                "outcome": self.outcome.value if self.outcome else None, "deaths": self.deaths,
                "attempts_after": self.attempts_after, "skipped": self.skipped, "repeats": self.repeats}


def next_step(device: str, record: CaseRecord) -> str:
    """Where an unexpected failure goes next (README "Adding an op"), as a line for its message."""
    if device.startswith("ggml:"):
        backend = device.removeprefix("ggml:").rstrip("0123456789").lower()
        known = (f"a known bug for this backend and release in device/ggml/known_bugs_{backend}.toml "
                 f"(known_bugs_{backend}.py where the TOML cannot say it)")
    else:
        known = "a known bug in the device's plug-in"
    text = (f"\n  next step: if the device is wrong, {known}, or an --expectations TOML of your own "
            f"(conform triage --write drafts one)")
    if record.outcome is not Outcome.FAIL:
        return text
    try:
        family = f"golden/{catalogue.get(record.op).family}.py"
    except KeyError:
        family = "the op's golden/<family>.py"
    row = record.decided_by.removeprefix("catalogue:") if record.decided_by else "the op's tolerance row"
    return f"{text}; if no correct implementation meets the bound, {row} in {family} (README \"Adding an op\")"


def _fail(text: str) -> NoReturn:
    """Raise CaseFailed. One raise site for every failure: Hypothesis tells failures apart by where
    they were raised, and a replayed known answer must read as the same failure."""
    __tracebackhide__ = True
    raise CaseFailed(text)


def _from_any(source: str, paths: set[str]) -> bool:
    """Whether an entry's source file is one of ``paths`` or inside one of those folders."""
    here = os.path.abspath(source)
    return any(here == os.path.abspath(p) or here.startswith(os.path.abspath(p) + os.sep) for p in paths)


def _in_hypothesis_test() -> bool:
    from hypothesis.control import currently_in_test_context

    return bool(currently_in_test_context())


def _mark_ran_out(record: CaseRecord, exc: BaseException, stage: str, step: str) -> CaseRecord:
    """An ERROR record whose harness stage ran out of time or memory says which stage and what ran
    out (``extra.ran_out``), so it reads as the harness's limit, never as the device's failure."""
    out = ran_out(exc)
    if out is not None:
        what, limit = out
        record.message = f"harness ran out of {what.value} in the {stage} stage while {step}: {_one_line(exc)}"[
            :MESSAGE_LIMIT]
        record.extra = {**(record.extra or {}), "ran_out": {"stage": stage, "resource": what.value, "limit": limit}}
    return record


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def repro_line(case_id: str, device: DeviceSpec, options: dict[str, Any]) -> str:
    parts = ["conform", "repro", case_id, "--device", device.text]
    if options.get("ggml_lib"):
        parts += ["--ggml-lib", str(options["ggml_lib"])]
    return " ".join(shlex.quote(p) for p in parts)


def sequence_repro_line(case_ids: list[str] | tuple[str, ...], device: DeviceSpec, options: dict[str, Any]) -> str:
    """The line that replays ``case_ids`` in order in one fresh device process."""
    parts = ["conform", "repro", "--device", device.text]
    if options.get("ggml_lib"):
        parts += ["--ggml-lib", str(options["ggml_lib"])]
    parts += ["--sequence", *case_ids]
    return " ".join(shlex.quote(p) for p in parts)


class Harness:
    def __init__(
        self,
        device_spec: DeviceSpec | str,
        options: dict[str, Any] | None = None,
        writer: Any = None,
        out_dir: str = ".",
        timeout: float = 120.0,
        run_id: str | None = None,
        worker: str | None = None,
        keep_artefacts: bool = True,
        known_bug_timeout: float | None = None,
        expectations: tuple[str, ...] = (),
        stage_memory_gib: float | None = DEFAULT_STAGE_MEMORY_GIB,
        crashes_alone: bool = True,
    ) -> None:
        self.device_spec = DeviceSpec.of(device_spec)
        self.options = dict(options or {})
        self.writer = writer
        self.out_dir = out_dir
        self.timeout = timeout
        self.known_bug_timeout = known_bug_timeout
        self.stage_memory_bytes = None if stage_memory_gib is None else int(stage_memory_gib * GIB)
        self.isolate_from = ISOLATE_FROM_ELEMENTS  # input elements from which a case's stages run in a child
        self.run_id = run_id
        self.worker = worker
        self.keep_artefacts = keep_artefacts
        # an unexplained crash after other cases is replayed alone in a fresh worker (:meth:`_crash_alone`);
        # a sequence replay, whose point is the history, turns it off
        self.crashes_alone = crashes_alone
        cases.load_all()
        self.runner: InProcessRunner | DeviceWorker = open_runner(self.device_spec, self.options, timeout)
        self.current_test_id = ""
        self.counts: dict[str, int] = {}
        self._artefacts = 0
        self.breakers: dict[str, Breaker] = {}  # by test id: failures, and the circuit breaker
        self.clock: StageClock | None = None  # a benchmark's stage clock (conformance/stages.py)
        # read once: the lists import modules by name; ``expectations`` are files or folders of TOML entries
        self.expectations = tuple(expectations)
        self._bugs = known_bugs.all_known_bugs(self.expectations)

    def use_known_bugs(self, bugs: list[KnownBug]) -> None:
        """Match only these known bugs from now on (conform triage: none, or one probe at a time)."""
        self._bugs = list(bugs)

    @property
    def stage_limits(self) -> StageLimits:
        """The golden's and the verdict's limits (conformance/limits.py): a large case runs them in a child."""
        return StageLimits(self.timeout, self.stage_memory_bytes, self.isolate_from)

    @property
    def inventory(self) -> dict[str, Any]:
        return self.runner.inventory

    @property
    def capabilities(self) -> frozenset[Capability]:
        return self.runner.capabilities

    def refresh_info(self) -> dict[str, Any]:
        """The device's inventory now (free memory) plus the device process' RSS (``worker_rss_bytes``)."""
        return self.runner.refresh_info()

    def close(self) -> None:
        self.runner.close()

    def sequence_repro(self, case_ids: list[str] | tuple[str, ...]) -> str:
        return sequence_repro_line(case_ids, self.device_spec, self.options)

    def reopen_device(self) -> None:
        """Close the device and open it again (its process stays): a fresh device state."""
        self.runner.reopen()

    def breaker_summary(self) -> list[dict[str, Any]]:
        """The tests whose breaker tripped: first crash/timeout, what shrinking cost, examples skipped."""
        return [b.to_json(self.device_spec.text) for b in self.breakers.values() if b.tripped]

    def repeats_not_rerun(self) -> int:
        """Suite cases drawn again after they had passed in their test, and not run again."""
        return sum(b.repeats for b in self.breakers.values())

    def new_record(self, case_id: str, op: str, description: CaseDescription, distribution: str, data_seed: int,
                   reply: Reply, tolerance: dict[str, Any]) -> CaseRecord:
        """The record's common part (every tier's); the outcome is the reply's until a verdict replaces it."""
        return CaseRecord(
            case_id=case_id, device=self.device_spec.text, op=op,
            outcome=reply.outcome if reply.outcome is not None else Outcome.PASS,
            description=description, distribution=distribution, data_seed=data_seed,
            supported=reply.supported, duration_s=reply.duration_s,
            repro=repro_line(case_id, self.device_spec, self.options), tolerance=tolerance,
            message=reply.message, test_id=self.current_test_id, run_id=self.run_id, worker=self.worker,
            crash=reply.crash, history=reply.history, history_dropped=reply.history_dropped,
        )

    def write_record(self, record: CaseRecord, companion_of: str | None = None) -> CaseRecord:
        """The record sink of every tier: count a finished record's outcome and append it to the results
        file (flushed at once).

        A record the writer cannot store (a comparator's metric JSON cannot hold) is written as an
        ERROR record saying why, without its metrics and extra: the case is never lost."""
        if companion_of is not None:
            record.companion_of = companion_of
        if self.writer is not None:
            try:
                self.writer.write(record.to_json())
            except (TypeError, ValueError, OverflowError, RecursionError) as exc:
                record.outcome = Outcome.ERROR
                record.message = f"harness error: the record could not be stored: {_one_line(exc)}"[:MESSAGE_LIMIT]
                record.metrics, record.extra = None, None
                self.writer.write(record.to_json())
        self.counts[record.outcome.value] = self.counts.get(record.outcome.value, 0) + 1
        return record

    # ---- one case ------------------------------------------------------------------------------
    def _error_record(self, case: OpCase, message: str, reply: Reply | None = None) -> CaseRecord:
        """An ERROR record for a case the harness could not take to a verdict."""
        try:
            tolerance = catalogue.tolerance_of(case).describe()
        except Exception:
            tolerance = {}
        got = reply if reply is not None else Reply(Outcome.ERROR)
        record = self.new_record(case.case_id, case.op, CaseDescription.of(case), case.distribution,
                                  case.data_seed, got, tolerance)
        record.outcome = Outcome.ERROR
        record.message = message[:MESSAGE_LIMIT]
        return record

    def evaluate(self, case: OpCase,
                 perf: Callable[[OpCase, list[np.ndarray]], dict[str, Any] | None] | None = None,
                 companion_of: str | None = None, given_inputs: list[np.ndarray] | None = None) -> CaseRecord:
        """Run and judge one case; always returns (and writes) a record, ERROR when a step raised.
        ``perf`` (perf mode, ``conformance/perf.py``) times the case once the device has answered;
        what it returns is the record's ``perf`` block. ``companion_of`` marks a known-bug companion
        (:meth:`check_drawn`). ``given_inputs``: these tensors (logical values, quantized ones as raw
        blocks) instead of the case's drawn data, e.g. a model node's own inputs from its .npz."""
        if self.clock is not None:
            self.clock.cases += 1
        self._lap(Stage.GENERATION)
        step = "resolving the case (catalogue row, suite entry, known bug)"
        try:
            with stage_limit(self.timeout, "golden"):  # the inputs; the golden itself runs under run_stage
                resolution = resolve(case, self.known_bugs_of)
                step = "making the inputs"
                made = make_inputs(case, resolution.entry) if given_inputs is None else given_inputs
                if len(made) != len(case.inputs):
                    raise ValueError(f"{len(made)} input tensors given, the case has {len(case.inputs)}")
                inputs = [as_stored(x, t.dtype) for x, t in zip(made, case.inputs, strict=True)]
                self._lap(Stage.INPUTS)
                step = "preparing the golden's inputs"
                exact_inputs = catalogue.golden_inputs(case, inputs)  # float64 values (quantized ones dequantized)
                tolerance = resolution.tolerance.describe()
            step = "computing the golden"
            size = sum(x.size for x in exact_inputs)
            golden = run_stage(lambda: catalogue.evaluate(case, exact_inputs), "golden", self.stage_limits, size)
            self._lap(Stage.GOLDEN)
        except Exception as exc:
            record = self._error_record(case, f"harness error while {step}: {_one_line(exc)}")
            return self.write_record(_mark_ran_out(record, exc, "golden", step), companion_of)
        limit = self.time_limit(resolution.known_bugs)
        timeout = limit.seconds
        try:
            reply = self.runner.attempt(case, inputs, timeout)
        except Exception as exc:  # the worker could not be (re)started, or answered nonsense
            return self.write_record(self._error_record(case, f"device error: {_one_line(exc)}"), companion_of)
        self._lap(Stage.DEVICE)
        record = self.new_record(case.case_id, case.op, CaseDescription.of(case), case.distribution,
                                  case.data_seed, reply, tolerance)
        record.time_limit = limit
        self._lap(Stage.RECORD)
        deviation_held = True
        if reply.answered:
            deviation_held = self._judge_into(record, case, resolution, inputs, exact_inputs, golden, reply.result)
        # a failure this device and release are known to give, or a pass where one was expected (the
        # report lists the latter as a stale expectation)
        bug = resolution.explaining(record.outcome.value, deviation_held)
        if bug is None and record.outcome is Outcome.CRASH and len(reply.history) > 1 and self.crashes_alone:
            bug = self._crash_alone(record, case, resolution, inputs, exact_inputs, golden, timeout)
        if bug is not None:
            record.expected = ExpectedFailure.of(bug)
        corrupting = bug is not None and resolution.corrupts_process
        if perf is not None and reply.answered:
            try:
                record.perf = perf(case, inputs)
            except Exception as exc:  # the verdict stands; only the timing is lost
                record.perf = {"error": f"harness error while timing: {_one_line(exc)}"[:MESSAGE_LIMIT]}
        # A kernel that computed a wrong result nobody has explained may also have written past its
        # buffer (on lavapipe device memory is host heap: a later, correct case then died in malloc),
        # so it gets the next case a clean process too; a known bug says itself whether it corrupts.
        unexplained_failure = record.outcome is Outcome.FAIL and record.expected is None
        if corrupting or unexplained_failure:
            self.restart_worker(record)
        self._lap(Stage.VERDICT)
        if record.failing and record.expected is None and self.keep_artefacts:
            # a known bug's failures are described by the bug and reproduced by the case id: an
            # artefact each (most of a crash-heavy run's record time) would add nothing
            try:
                record.artefact = self._save_artefact(case, inputs, golden, reply)
            except Exception as exc:  # the record matters more than its artefact
                record.message = f"{record.message} (artefact not saved: {_one_line(exc)})"[:MESSAGE_LIMIT * 2]
        self.write_record(record, companion_of)
        self._lap(Stage.RECORD)
        return record

    def loaded_expectations(self) -> list[dict[str, str]]:
        """The entries read from the run's expectations files (for the results header: the report lists one
        that matched no case as stale)."""
        extra = set(self.expectations)
        return [{"id": b.id, "op": b.op, "devices": b.devices, "source": b.source, "reason": b.reason,
                 "repro": b.repro} for b in self._bugs if b.source and _from_any(b.source, extra)]

    def time_limit(self, bugs: Sequence[KnownBug]) -> TimeLimit:
        """The limit for a case: --case-timeout, or the user's shorter --known-bug-timeout for a case
        a known bug says may corrupt the process and hang (never a limit the user did not set)."""
        hangs = any(b.corrupts_process and b.may_hang for b in bugs)
        if hangs and self.known_bug_timeout is not None and self.known_bug_timeout < self.timeout:
            return TimeLimit(self.known_bug_timeout, "--known-bug-timeout")
        return TimeLimit(self.timeout, "--case-timeout")

    def _lap(self, stage: Stage) -> None:
        if self.clock is not None:
            self.clock.lap(stage)

    def _judge_into(self, record: CaseRecord, case: OpCase, resolution: Resolution, inputs: list[np.ndarray],
                    exact_inputs: list[np.ndarray], golden: np.ndarray, result: RunResult) -> bool:
        """The verdict on what the device answered, into ``record``; returns whether a documented
        deviation covering the case still holds (False once its own bound is exceeded as well)."""

        def judged() -> tuple[Judgement, dict[str, Any]]:
            judgement, extra = self._judge(case, resolution, inputs, exact_inputs, golden, result)
            if judgement.deviation is not None:
                extra["known_deviation_error_ratio"] = judgement.deviation.error_ratio
            return judgement, extra

        held = True
        try:
            size = sum(x.size for x in exact_inputs) + golden.size
            judgement, extra = run_stage(judged, "verdict", self.stage_limits, size)
            held = judgement.deviation_held
            record.decided_by = judgement.decided_by
            metrics = judgement.metrics
        except Exception as exc:
            record.outcome = Outcome.ERROR
            record.message = f"harness error while judging the result: {_one_line(exc)}"[:MESSAGE_LIMIT]
            _mark_ran_out(record, exc, "verdict", "judging the result")
        else:
            record.metrics = metrics.as_dict()
            record.outcome = Outcome.PASS if metrics.passed else Outcome.FAIL
            if not metrics.passed:
                record.message = metrics.detail
            record.extra = extra
        return held

    def _crash_alone(self, record: CaseRecord, case: OpCase, resolution: Resolution, inputs: list[np.ndarray],
                     exact_inputs: list[np.ndarray], golden: np.ndarray, timeout: float) -> KnownBug | None:
        """An unexplained crash after other cases of the worker: the case again, alone in a fresh worker.
        Its outcome goes into ``extra.alone``; where it does not crash there (and is right, or wrong only as
        a listed bug says), an after-history entry of the device (state earlier cases left, such as a heap
        lavapipe corrupted) explains the crash. Returns that entry, or None."""
        if not isinstance(self.runner, DeviceWorker):
            return None
        try:
            self.runner.start()
            reply = self.runner.attempt(case, inputs, timeout)
        except Exception as exc:  # the crash stands as recorded
            note = f"alone in a fresh worker: not run: {_one_line(exc)}"
            record.message = f"{record.message} ({note})"[:MESSAGE_LIMIT * 2]
            return None
        alone = self.new_record(case.case_id, case.op, CaseDescription.of(case), case.distribution,
                                 case.data_seed, reply, record.tolerance)
        held = True
        if reply.answered:
            held = self._judge_into(alone, case, resolution, inputs, exact_inputs, golden, reply.result)
        explained_alone = alone.outcome is Outcome.PASS \
            or (alone.outcome is Outcome.FAIL and resolution.explaining("fail", held) is not None)
        summary: dict[str, Any] = {"outcome": alone.outcome.value, "duration_s": alone.duration_s}
        if alone.metrics and "error_ratio" in alone.metrics:
            summary["error_ratio"] = alone.metrics["error_ratio"]
        if alone.message:
            summary["message"] = alone.message[:MESSAGE_LIMIT]
        record.extra = {**(record.extra or {}), "alone": summary}
        record.message = f"{record.message} (alone in a fresh worker: {alone.outcome.value})"[:MESSAGE_LIMIT * 2]
        if not explained_alone:
            return None
        return self.after_history_bug_of(case)

    def after_history_bug_of(self, case: OpCase) -> KnownBug | None:
        """The device's after-history entry for ``case`` (:class:`KnownBug.after_history`), if any."""
        return known_bugs.find_after_history(case, *self.bug_identity(), self._bugs, build=self.llama_build())

    def restart_worker(self, record: CaseRecord | None = None, *, only_if_used: bool = False) -> None:
        """A fresh device process for the next case (a worker's; an in-process device has none); with
        ``only_if_used``, only where the worker has run a case. A failed restart is noted on ``record`` (the
        next case tries again); without a record it raises."""
        if not isinstance(self.runner, DeviceWorker) or (only_if_used and not self.runner.history):
            return
        try:
            self.runner.start()
        except Exception as exc:
            if record is None:
                raise
            record.message = f"{record.message} (device restart failed: {_one_line(exc)})"[:MESSAGE_LIMIT * 2]

    def judged_elsewhere(self, record: CaseRecord | None) -> bool:
        """True where a known bug of the device (not a documented deviation, which is still judged
        against its own bound) explains the record's failure: the case judged nothing."""
        return record is not None and record.failing and record.expected is not None \
            and not self._is_deviation(record.expected.id)

    def _is_deviation(self, bug_id: str) -> bool:
        return any(b.id == bug_id and b.tolerance is not None for b in self._bugs)

    def companion(self, case: OpCase) -> OpCase | None:
        """The nearest case that no known bug of this device covers (a documented deviation may): the
        same shapes, params and data with one input made contiguous (the first such that works), else
        every input contiguous; None where the bug does not depend on the layout."""
        contiguous = [replace(t, layout=Layout()) for t in case.inputs]
        candidates = [replace(case, inputs=tuple(contiguous[j] if j == i else t for j, t in enumerate(case.inputs)))
                      for i, t in enumerate(case.inputs) if not t.layout.is_contiguous]
        candidates.append(replace(case, inputs=tuple(contiguous)))
        spec = catalogue.get(case.op)
        for candidate in candidates:
            if candidate == case:
                continue
            if any(bug.tolerance is None for bug in self.known_bugs_of(candidate)):
                continue
            try:  # the op's own rules (a layout some ops require); a candidate they reject is not a case
                check_aliases(candidate.inputs)  # a source made contiguous may no longer hold its alias
                if spec.validate is not None:
                    spec.validate(candidate, make_inputs(candidate))
            except Exception:
                continue
            return candidate
        return None

    def check_drawn(self, case: OpCase) -> bool:
        """:meth:`check` for a case the suite drew (``once``); where a known bug covers it, also its
        :meth:`companion`, checked the same way. Returns whether the drawn case itself was judged: False
        tells the suite to draw again, so known bugs do not spend the test's examples."""
        __tracebackhide__ = True
        breaker = self._breaker()
        if breaker is not None and case.case_id in breaker.covered:
            breaker.repeats += 1  # drawn again: its record and its companion's exist; draw again as before
            return False
        record = self.check(case, once=True)
        if not self.judged_elsewhere(record):
            return True
        if breaker is not None:
            breaker.covered.add(case.case_id)
        other = self.companion(case)
        if other is not None:
            self._checked(other.case_id, lambda: self.evaluate(other, companion_of=case.case_id), once=True)
        return False

    def known_bugs_of(self, case: OpCase) -> list[KnownBug]:
        """The device's known kernel bugs covering ``case`` (ggml devices: by device name and release)."""
        return known_bugs.find_all(case, *self.bug_identity(), self._bugs, build=self.llama_build())

    def bug_identity(self) -> tuple[str, str]:
        """The device name and release known bugs are matched on: a ggml device's, or for a plug-in its
        spec and no release (an expectations entry matches the spec)."""
        release = self.inventory.get("ggml_version")
        name = self.inventory.get("name")
        if not isinstance(release, str) or not isinstance(name, str):
            return self.device_spec.text, ""
        return name, release

    def llama_build(self) -> str | None:
        """The llama.cpp build the device's library comes from (the inventory's ``llama_build``: b8121), None
        where it is not known (an entry that names builds then matches nothing: device/expectation_file.py)."""
        build = self.inventory.get("llama_build")
        return build if isinstance(build, str) and build else None

    def _judge(
        self, case: OpCase, resolution: Resolution, inputs: list[np.ndarray], exact_inputs: list[np.ndarray],
        golden: np.ndarray, result: RunResult,
    ) -> tuple[Judgement, dict[str, Any]]:
        """The verdict on an answered case (the output's, then what the device did to its inputs), and the
        measurements to record with it."""
        spec = resolution.spec
        judgement = judge_output(case, resolution, inputs, exact_inputs, golden, result.output)
        metrics = judgement.metrics
        extra = {k: v for k, v in result.extra.items() if k not in VERDICT_ONLY_EXTRA}
        if result.raw_inputs is not None:
            cann_layout = Capability.CANN_QUANT_LAYOUT in self.capabilities
            raw = judge_raw_inputs(case, inputs, result.raw_inputs, cann_layout)
            if raw.checks:
                extra["cann_raw" if cann_layout else "raw_memory"] = raw.checks
            if raw.failures:
                metrics.passed = False
                note = "device memory check failed: " + ", ".join(raw.failures)
                metrics.detail = f"{note}; {metrics.detail}" if metrics.detail else note
        # the device must not change its inputs (ops in place by definition excepted); a device that
        # says every input's bytes came back as sent need not send the values back
        changed: list[int] = []
        if result.inputs_after is not None:
            changed = [
                i for i, (before, after) in enumerate(zip(inputs, result.inputs_after, strict=True))
                if i not in spec.inplace_inputs and not same_values(before, after)
            ]
        intact = result.extra.get("input_bytes_intact")
        if intact is not None:
            changed += [i for i, ok in enumerate(intact) if not ok and i not in spec.inplace_inputs
                        and i not in changed]
        if changed:
            metrics.passed = False
            note = f"the device modified input(s) {', '.join(f'src{i}' for i in sorted(changed))} " \
                   "(or the padding around them), which this op must not write"
            metrics.detail = f"{note}; {metrics.detail}" if metrics.detail else note
        return judgement, extra

    def _save_artefact(self, case: OpCase, inputs: list[np.ndarray], golden: np.ndarray, reply: Reply) -> str:
        os.makedirs(os.path.join(self.out_dir, "artefacts"), exist_ok=True)
        self._artefacts += 1
        tag = self.worker or "main"
        name = f"{case.op.lower()}-{tag}-{os.getpid()}-{self._artefacts:05d}.npz"
        arrays: dict[str, np.ndarray] = {f"input_{i}": np.asarray(x) for i, x in enumerate(inputs)}
        arrays["golden"] = np.asarray(golden)
        if isinstance(reply.result, RunResult):
            arrays["device"] = np.asarray(reply.result.output)
        arrays["case_id"] = np.array(case.case_id)
        # np.savez_compressed's format at the fastest deflate level: its default level costs several
        # times as long on float data for a few percent of size (np.load reads either)
        with zipfile.ZipFile(os.path.join(self.out_dir, "artefacts", name), "w", zipfile.ZIP_DEFLATED,
                             compresslevel=1) as archive:
            for key, value in arrays.items():
                with archive.open(f"{key}.npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)
        return os.path.join("artefacts", name)

    def check(self, case: OpCase, *, once: bool = False) -> CaseRecord | None:
        """Judge ``case`` on the device and raise CaseFailed if it fails; None where an open breaker
        gave a passing case's known answer without running it, or, with ``once``, where the case
        already passed in this test.

        ``once`` is for independent cases (the catalogue suite): Hypothesis maps several choice
        sequences to one case (every value but the last of a "one in 16" draw gives the common
        branch), so a test draws some cases again; a pass is not run twice. A failing case is, so
        that Hypothesis still sees a failure that does not repeat. Sequences (the stateful tests)
        leave ``once`` off: there a repeat after other cases is the point.
        """
        __tracebackhide__ = True
        return self._checked(case.case_id, lambda: self.evaluate(case), once=once)

    def check_evaluated(self, case_id: str, evaluate: Callable[[], CaseRecord], *,
                        once: bool = False) -> CaseRecord | None:
        """:meth:`check` for a case another module runs and judges (``conformance/graphs.py``'s graph
        cases): ``evaluate`` returns its record; the breaker and the once-only rule apply as for ops."""
        __tracebackhide__ = True
        return self._checked(case_id, evaluate, once=once)

    def _checked(self, case_id: str, evaluate: Any, once: bool = False) -> CaseRecord | None:
        __tracebackhide__ = True
        breaker = self._breaker()
        if breaker is not None and breaker.open:
            known = breaker.failures.get(case_id)
            if known is not None:  # hypothesis replays an example whose answer is known: give it again
                _fail(known)
            if case_id in breaker.passed:
                return None
            from hypothesis import reject

            breaker.skipped += 1
            reject()  # the breaker is open: this example does not count, and costs no device time
        if once and breaker is not None and case_id in breaker.passed:
            breaker.repeats += 1
            return None
        return self._raise_if_failing(evaluate(), breaker)

    def _breaker(self) -> Breaker | None:
        """The current test's breaker, inside a Hypothesis test that pytest named (else None)."""
        if not self.current_test_id or not _in_hypothesis_test():
            return None
        breaker = self.breakers.get(self.current_test_id)
        if breaker is None:
            breaker = self.breakers[self.current_test_id] = Breaker(self.current_test_id)
        return breaker

    def failure_text(self, record: CaseRecord) -> str:
        return (f"{record.outcome.value.upper()} {record.case_id} on {self.device_spec}: {record.message}\n"
                f"  reproduce: {record.repro}{next_step(str(self.device_spec), record)}")

    def _raise_if_failing(self, record: CaseRecord, breaker: Breaker | None = None) -> CaseRecord:
        __tracebackhide__ = True
        failure = self.failure_text(record) if record.failing and record.expected is None else None
        if breaker is not None:
            breaker.saw(record, failure)
        if failure is not None:
            _fail(failure)
        return record

    # ---- set/get round trips through the backend -------------------------------------------------
    def evaluate_set_get(self, case: SetGetCase, raw: np.ndarray | None = None) -> CaseRecord:
        """Upload the case's bytes (``raw``, else :meth:`SetGetCase.raw_bytes`) in its ``writes`` chunks,
        read them back whole and in its ``reads`` chunks: every byte must come back. On CANN the
        quantized layout transform sits on this path (real bugs: chunked uploads B18, offset reads
        L1), and the allocation must be the seed's padded size."""
        spec = case.tensor
        description = CaseDescription(
            dtypes={"src0": spec.dtype, "dst": spec.dtype}, shapes={"src0": list(spec.ne)},
            layout={"src0": "contiguous"},
            params={"writes": [list(w) for w in case.writes], "reads": [list(r) for r in case.reads]},
        )
        tolerance = {"reason": "byte-exact: set_tensor then get_tensor must return every byte"}
        data = np.empty(0, np.uint8)
        try:
            data = np.ascontiguousarray(case.raw_bytes() if raw is None else raw, dtype=np.uint8).reshape(-1)
            reply = self.runner.call("transfer", (spec, data, list(case.writes), list(case.reads)), self.timeout,
                                     label=case.case_id)
        except Exception as exc:
            reply = Reply(Outcome.ERROR, message=f"harness or device error: {_one_line(exc)}"[:MESSAGE_LIMIT])
        record = self.new_record(case.case_id, case.op, description, "bytes", case.data_seed, reply, tolerance)
        if reply.answered:
            try:
                self._judge_transfer(case, data, reply.result, record)
            except Exception as exc:  # e.g. transfer() returned something else than its dict
                record.outcome = Outcome.ERROR
                record.metrics = None
                record.message = f"harness error while judging the transfer: {_one_line(exc)}"[:MESSAGE_LIMIT]
        return self.write_record(record)

    def _judge_transfer(self, case: SetGetCase, data: np.ndarray, got: Any, record: CaseRecord) -> None:
        """Every byte must come back, whole and in the case's read chunks (FAIL naming what differs)."""
        spec = case.tensor
        problems = []
        if not np.array_equal(got["whole"], data):
            bad = np.flatnonzero(got["whole"] != data)
            problems.append(f"whole read differs in {bad.size} bytes, first at {int(bad[0])}")
        for (offset, size), piece in zip(case.reads, got["pieces"], strict=True):
            if not np.array_equal(piece, data[offset : offset + size]):
                problems.append(f"read of {size} bytes at offset {offset} differs")
        if Capability.CANN_QUANT_LAYOUT in self.capabilities and dtypes.is_quantized(spec.dtype):
            expected = quant.cann_alloc_size(spec.dtype, spec.ne)
            if got["alloc_size"] != expected:
                problems.append(f"alloc size {got['alloc_size']} != seed's get_alloc_size {expected}")
        record.metrics = {"n": int(data.size), "n_bad": len(problems), "error_ratio": float(bool(problems)),
                          "alloc_size": int(got["alloc_size"]), "nbytes": int(got["nbytes"])}
        record.outcome = Outcome.FAIL if problems else Outcome.PASS
        if problems:
            record.message = "; ".join(problems[:5])

    def check_set_get(self, case: SetGetCase, raw: np.ndarray | None = None) -> CaseRecord | None:
        __tracebackhide__ = True
        return self._checked(case.case_id, lambda: self.evaluate_set_get(case, raw))

    def check_transfer(
        self, spec: TensorSpec, raw: np.ndarray, writes: list[tuple[int, int]], reads: list[tuple[int, int]],
        data_seed: int = 0,
    ) -> CaseRecord | None:
        """:meth:`check_set_get` for a tensor, its bytes and the chunks (the suite's call)."""
        __tracebackhide__ = True
        case = SetGetCase(spec, tuple((int(o), int(s)) for o, s in writes),
                          tuple((int(o), int(s)) for o, s in reads), data_seed)
        return self.check_set_get(case, raw)


__all__ = ["Harness", "CaseFailed", "DeviceError", "open_runner"]

"""The results record of one case on one device: one typed value for every writer and reader.

:class:`CaseRecord` holds exactly what a ``case`` line of a results file holds
(``results/RESULTS.md``, schema version 1); :meth:`CaseRecord.to_json` writes it and
:meth:`CaseRecord.from_json` reads it back. The harness builds one for every op case and every
set/get round trip; ``conform repro`` reads them back for their crash history.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from golden.case import OpCase
from results.outcome import Outcome
from results.schema import SCHEMA, SCHEMA_VERSION


@dataclass(frozen=True)
class CrashInfo:
    """How the device process ended: the signal (``SIGABRT``), or the exit code, and its stderr tail."""

    signal: str | None
    exitcode: int | None
    stderr_tail: str

    def to_json(self) -> dict[str, Any]:
        return {"signal": self.signal, "exitcode": self.exitcode, "stderr_tail": self.stderr_tail}


class BugDescription(Protocol):
    """What a record keeps of a known bug (``device.known_bug.KnownBug`` is one)."""

    @property
    def id(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def repro(self) -> str: ...
    @property
    def outcomes(self) -> Sequence[str]: ...
    @property
    def source(self) -> str: ...


@dataclass(frozen=True)
class ExpectedFailure:
    """A known backend bug that covers this case (``device.known_bugs``): it fails, as expected."""

    id: str
    reason: str
    repro: str
    outcomes: tuple[str, ...] = ("fail",)  # what the bug gives: fail, crash, timeout, error
    source: str = ""  # where the entry is written (a Python list's module, or an expectations file)

    @classmethod
    def of(cls, bug: BugDescription) -> ExpectedFailure:
        return cls(bug.id, bug.reason, bug.repro, tuple(bug.outcomes), bug.source)

    def to_json(self) -> dict[str, Any]:
        out = {"id": self.id, "reason": self.reason, "repro": self.repro, "outcomes": list(self.outcomes)}
        if self.source:
            out["source"] = self.source
        return out


@dataclass(frozen=True)
class TimeLimit:
    """The time limit a case's device call ran under, and the option that set it."""

    seconds: float
    option: str  # "--case-timeout" or "--known-bug-timeout"

    def to_json(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "option": self.option}


@dataclass(frozen=True)
class CaseDescription:
    """The case's fields of a record: dtypes, shapes, layouts and params per tensor slot."""

    dtypes: dict[str, str]
    shapes: dict[str, list[int]]
    layout: dict[str, str]
    params: dict[str, Any]

    @classmethod
    def of(cls, case: OpCase) -> CaseDescription:
        names = [f"src{i}" for i in range(len(case.inputs))]
        tensors = list(zip(names, case.inputs, strict=True))
        return cls(
            dtypes={n: t.dtype for n, t in tensors} | {"dst": case.dst},
            shapes={n: list(t.ne) for n, t in tensors},
            layout={n: t.layout.label() for n, t in tensors},
            params=dict(case.params) | ({"form": case.form} if case.form else {}),
        )


@dataclass
class CaseRecord:
    """One ``case`` line. Optional parts (``None`` or empty) are left out of the JSON, as before:
    ``crash`` for crashes and timeouts, ``metrics`` and ``extra`` when the device answered,
    ``history`` when the device process died, ``expected`` when a known bug covers the case."""

    case_id: str
    device: str  # the DeviceSpec's text
    op: str
    outcome: Outcome
    description: CaseDescription
    distribution: str
    data_seed: int
    supported: bool | None
    duration_s: float
    repro: str
    tolerance: dict[str, Any]
    message: str = ""
    test_id: str = ""
    run_id: str | None = None
    worker: str | None = None
    artefact: str | None = None
    metrics: dict[str, Any] | None = None
    crash: CrashInfo | None = None
    extra: dict[str, Any] | None = None
    history: tuple[str, ...] = ()  # case ids the device process ran since it started, ending with this one
    history_dropped: int = 0  # earlier ids that did not fit the worker's history limit
    expected: ExpectedFailure | None = None
    perf: dict[str, Any] | None = None  # perf mode: the device's timings of this case (conformance/perf.py)
    time_limit: TimeLimit | None = None  # the limit the device call ran under (op cases)
    # what decided a computed case's verdict, by id: "catalogue:OP[key]" (the tolerance row) or
    # "deviation:<known bug id>" (a device's documented deviation); None where nothing was judged
    decided_by: str | None = None
    # the suite ran this case because a known bug covered the drawn case with this id: the same shapes,
    # params and data in a layout no known bug of the device covers
    companion_of: str | None = None

    @property
    def failing(self) -> bool:
        return self.outcome.failing

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "case"}
        if self.run_id is not None:
            out["run_id"] = self.run_id
        if self.worker is not None:
            out["worker"] = self.worker
        out |= {
            "test_id": self.test_id,
            "case_id": self.case_id,
            "device": self.device,
            "op": self.op,
            "dtypes": self.description.dtypes,
            "shapes": self.description.shapes,
            "layout": self.description.layout,
            "params": self.description.params,
            "distribution": self.distribution,
            "data_seed": self.data_seed,
            "supported": self.supported,
            "duration_s": round(self.duration_s, 6),
            "repro": self.repro,
            "artefact": self.artefact,
            "message": self.message,
            "tolerance": self.tolerance,
            "outcome": self.outcome.value,
        }
        if self.crash is not None:
            out["crash"] = self.crash.to_json()
        if self.metrics is not None:
            out["metrics"] = self.metrics
        if self.extra is not None:
            out["extra"] = self.extra
        if self.history:
            out["history"] = list(self.history)
            if self.history_dropped:
                out["history_dropped"] = self.history_dropped
        if self.expected is not None:
            out["expected"] = self.expected.to_json()
        if self.perf is not None:
            out["perf"] = self.perf
        if self.time_limit is not None:
            out["time_limit"] = self.time_limit.to_json()
        if self.decided_by is not None:
            out["decided_by"] = self.decided_by
        if self.companion_of is not None:
            out["companion_of"] = self.companion_of
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CaseRecord:
        """A record read back from a results line; ``ValueError``/``KeyError`` on one that is not."""
        crash = data.get("crash")
        expected = data.get("expected")
        return cls(
            case_id=data["case_id"], device=data["device"], op=data["op"], outcome=Outcome(data["outcome"]),
            description=CaseDescription(data.get("dtypes", {}), data.get("shapes", {}), data.get("layout", {}),
                                        data.get("params", {})),
            distribution=data.get("distribution", ""), data_seed=int(data.get("data_seed", 0)),
            supported=data.get("supported"), duration_s=float(data.get("duration_s", 0.0)),
            repro=data.get("repro", ""), tolerance=data.get("tolerance", {}), message=data.get("message", ""),
            test_id=data.get("test_id", ""), run_id=data.get("run_id"), worker=data.get("worker"),
            artefact=data.get("artefact"), metrics=data.get("metrics"),
            crash=CrashInfo(crash.get("signal"), crash.get("exitcode"), crash.get("stderr_tail", ""))
            if isinstance(crash, dict) else None,
            extra=data.get("extra"), history=tuple(data.get("history", ())),
            history_dropped=int(data.get("history_dropped", 0)),
            expected=ExpectedFailure(expected["id"], expected["reason"], expected["repro"],
                                     tuple(expected.get("outcomes", ("fail",))), str(expected.get("source", "")))
            if isinstance(expected, dict) else None,
            perf=data.get("perf") if isinstance(data.get("perf"), dict) else None,
            time_limit=TimeLimit(float(limit["seconds"]), str(limit["option"]))
            if isinstance(limit := data.get("time_limit"), dict) else None,
            decided_by=data.get("decided_by") if isinstance(data.get("decided_by"), str) else None,
            companion_of=data.get("companion_of") if isinstance(data.get("companion_of"), str) else None,
        )


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _run_env() -> dict[str, str]:
    """The environment variables that change what a run measures (ggml's, CANN's, hypothesis')."""
    return {k: v for k, v in os.environ.items() if k.startswith(("GGML_", "ASCEND_", "HYPOTHESIS_"))}


@dataclass
class HeaderRecord:
    """The first line each writing process puts in a results file (``results/RESULTS.md``)."""

    run_id: str
    worker: str | None
    harness_version: str
    profile: str | None
    hypothesis_seed: Any
    hypothesis_db: Any
    devices: list[dict[str, Any]]
    acl_devices: Any
    argv: list[str]
    command: str | None = None  # what the user typed (conform's command line, else pytest's)
    started: str = field(default_factory=_now)
    host: str = field(default_factory=socket.gethostname)
    cwd: str = field(default_factory=os.getcwd)
    env: dict[str, str] = field(default_factory=_run_env)

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "header", "schema": SCHEMA, "schema_version": SCHEMA_VERSION, "run_id": self.run_id,
            "worker": self.worker, "harness_version": self.harness_version, "started": self.started,
            "host": self.host, "profile": self.profile, "hypothesis_seed": self.hypothesis_seed,
            "hypothesis_db": self.hypothesis_db, "devices": self.devices, "cwd": self.cwd,
            "acl_devices": self.acl_devices, "env": self.env, "argv": self.argv,
        } | ({} if self.command is None else {"command": self.command})


@dataclass
class SkipRecord:
    """A test pytest skipped, written when it skips (an interrupted run keeps the skips it had): a
    skipped test leaves no case record, so without this line a run in which a whole tier skipped
    would read like one that never selected it."""

    run_id: str
    worker: str | None
    test_id: str
    when: str  # "setup" (a skip mark, or a fixture that skipped) or "call" (the test body skipped)
    reason: str  # pytest's reason, one line

    def to_json(self) -> dict[str, Any]:
        return {"type": "skip", "run_id": self.run_id, "worker": self.worker, "test_id": self.test_id,
                "when": self.when, "reason": self.reason}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SkipRecord:
        worker = data.get("worker")
        return cls(run_id=str(data.get("run_id") or ""), worker=None if worker is None else str(worker),
                   test_id=str(data.get("test_id") or "?"), when=str(data.get("when") or ""),
                   reason=str(data.get("reason") or ""))


@dataclass
class FooterRecord:
    """The last line of a process that ended normally; ``breakers`` and ``repeats_not_rerun`` are the
    pytest plug-in's (None: left out, as the perf process writes it)."""

    run_id: str
    worker: str | None
    counts: dict[str, int]
    exitstatus: int
    pytest_failed: int
    pytest_errors: int
    pytest_failed_tests: list[dict[str, Any]]
    devices_end: list[dict[str, Any]]
    breakers: list[dict[str, Any]] | None = None
    repeats_not_rerun: int | None = None  # suite cases drawn again after they had passed: not run twice
    ended: str = field(default_factory=_now)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": "footer", "run_id": self.run_id, "worker": self.worker, "ended": self.ended,
            "counts": self.counts, "exitstatus": int(self.exitstatus), "pytest_failed": self.pytest_failed,
            "pytest_errors": self.pytest_errors, "pytest_failed_tests": self.pytest_failed_tests,
        }
        if self.breakers is not None:
            out["breakers"] = self.breakers
        out["devices_end"] = self.devices_end
        if self.repeats_not_rerun is not None:
            out["repeats_not_rerun"] = self.repeats_not_rerun
        return out

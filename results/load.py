"""Reading results files (see ``results/RESULTS.md``).

Parsing is strict JSON per line and never executes anything (no ``eval``, no pickle). The one
leniency is the last line of a file: a run killed mid-write (SIGKILL, full disk) can leave a final
line without its newline that does not parse; it is dropped and reported, and the file counts as
partial. Any other bad line raises :class:`ResultsError` naming the file and line.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from results.outcome import Outcome
from results.schema import OUTCOMES, SCHEMA, SCHEMA_VERSION

RECORD_TYPES = ("header", "case", "footer", "skip")
FAILING_OUTCOMES: tuple[str, ...] = tuple(outcome.value for outcome in Outcome if outcome.failing)
REQUIRED_CASE_FIELDS = ("case_id", "device", "op", "outcome")


class ReportInputError(Exception):
    """An input of the report (results, baseline, expectations) cannot be used; message is for the user."""


class ResultsError(ReportInputError):
    """A results file is malformed; the message names the file and, where it applies, the line."""


# The header is the first line a writer puts in a results file: a few KiB (devices, environment).
# A file whose first line break is further away than this is not a results file, and is rejected
# after reading this much rather than all of it (100 MB of junk without a newline).
FIRST_LINE_LIMIT = 1 << 20


@dataclass
class ResultsFile:
    """One results file, parsed. ``cases`` keep the file's order."""

    path: Path
    headers: list[dict[str, Any]] = field(default_factory=list)
    cases: list[dict[str, Any]] = field(default_factory=list)
    footers: list[dict[str, Any]] = field(default_factory=list)
    skips: list[dict[str, Any]] = field(default_factory=list)  # tests pytest skipped ("skip" records)
    truncated_line: int | None = None  # 1-based number of a dropped, cut-off final line
    ignored_records: int = 0  # records of a type this reader does not know (newer writer)
    _headers_by_writer: dict[tuple[Any, Any], dict[str, Any]] = field(default_factory=dict, repr=False)

    @property
    def is_partial(self) -> bool:
        return self.truncated_line is not None or len(self.footers) < len(self.headers)

    def partial_reasons(self) -> list[str]:
        """Plain-language reasons this file is partial (empty when complete)."""
        reasons = []
        if len(self.footers) < len(self.headers):
            reasons.append(
                f"{len(self.headers)} writing process(es) started but only {len(self.footers)} "
                "finished normally (killed, crashed or still running)"
            )
        if self.truncated_line is not None:
            reasons.append(f"line {self.truncated_line} is cut off (the writer was killed mid-line); ignored")
        return reasons

    def header_for(self, case: dict[str, Any]) -> dict[str, Any] | None:
        """The header written by the process that wrote ``case`` (same run_id and worker)."""
        if len(self._headers_by_writer) != len(self.headers):  # (re)build after headers were added
            self._headers_by_writer = {(h.get("run_id"), h.get("worker")): h for h in self.headers}
        header = self._headers_by_writer.get((case.get("run_id"), case.get("worker")))
        if header is None and self.headers:
            return self.headers[0]  # a writer that forgot its header: attribute to the run's first
        return header


def _reject_constant(name: str) -> Any:
    # The writer spells NaN/inf as strings; bare NaN/Infinity means a non-conforming writer.
    raise ValueError(f"non-standard JSON constant {name}")


# One decoder for every line: json.loads(..., parse_constant=...) would build a new one per call.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _parse_line(raw: bytes) -> Any:
    return _DECODER.decode(raw.decode("utf-8"))


def _check_record(record: Any, where: str) -> str:
    if not isinstance(record, dict):
        raise ResultsError(f"{where}: expected a JSON object, found {type(record).__name__}")
    kind = record.get("type")
    if not isinstance(kind, str):
        raise ResultsError(f"{where}: record has no \"type\" field")
    if kind == "header":
        _check_header(record, where)
    elif kind == "case":
        _check_case(record, where)
    return kind


def _check_header(record: dict[str, Any], where: str) -> None:
    if record.get("schema") != SCHEMA:
        found = record.get("schema")
        raise ResultsError(f"{where}: not a results file (schema {found!r}, want {SCHEMA!r})")
    version = record.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise ResultsError(
            f"{where}: schema_version {version!r} is newer than this reader ({SCHEMA_VERSION}); "
            "update the harness"
        )


def _check_case(record: dict[str, Any], where: str) -> None:
    get = record.get  # the hot path of a 100k-record file: plain checks, no per-field loop
    ids_ok = isinstance(get("case_id"), str) and isinstance(get("device"), str)
    if not (ids_ok and isinstance(get("op"), str) and isinstance(get("outcome"), str)):
        missing = [name for name in REQUIRED_CASE_FIELDS if not isinstance(get(name), str)]
        raise ResultsError(f"{where}: case record lacks {', '.join(missing)}")
    if record["outcome"] not in OUTCOMES:
        known = ", ".join(OUTCOMES)
        raise ResultsError(f"{where}: unknown outcome {record['outcome']!r} (known: {known})")


@contextlib.contextmanager
def paused_gc() -> Generator[None, None, None]:
    """Pause the cyclic garbage collector while building many small acyclic objects.

    Parsed JSON has no reference cycles, but each new dict counts towards the collector's
    thresholds, so 100k records trigger full collections over everything already loaded:
    measured here, that more than doubles the load time of a 100k-record file.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def load_results(path: str | os.PathLike[str]) -> ResultsFile:
    """Parse one results file. Raises :class:`ResultsError` (or ``OSError`` when unreadable)."""
    with paused_gc():
        return _load_results(Path(path))


def _check_is_results_file(path: Path) -> None:
    """Look at the first line only: a results file opens with its header record.

    Junk, a binary file, a JSON document of another schema or a huge file without line breaks is
    refused here with one line, before the whole file is read.
    """
    with path.open("rb") as stream:
        head = stream.read(FIRST_LINE_LIMIT + 1)
    stripped = head.lstrip()
    if not stripped:
        if len(head) > FIRST_LINE_LIMIT:
            raise ResultsError(f"{path}: not a results file (the first {FIRST_LINE_LIMIT >> 20} MiB are blank)")
        return  # an empty file: reported by the full read
    if not stripped.startswith(b"{"):
        raise ResultsError(f"{path}: not a results file (it does not start with a JSON record)")
    end = stripped.find(b"\n")
    if end < 0 and len(head) > FIRST_LINE_LIMIT:
        raise ResultsError(f"{path}: not a results file (no line break in the first {FIRST_LINE_LIMIT >> 20} MiB)")
    first = stripped if end < 0 else stripped[:end]
    try:
        record = _parse_line(first)
    except (UnicodeDecodeError, ValueError):
        raise ResultsError(f"{path}: not a results file (its first line is not a JSON record)") from None
    if not isinstance(record, dict) or record.get("type") != "header" or record.get("schema") != SCHEMA:
        found = record.get("schema") if isinstance(record, dict) else None
        what = f"schema {found!r}" if found is not None else "no results header"
        raise ResultsError(f"{path}: not a results file ({what}; want a {SCHEMA!r} header on line 1)")


def _load_results(path: Path) -> ResultsFile:
    _check_is_results_file(path)
    data = path.read_bytes()
    lines = data.split(b"\n")
    ends_with_newline = data.endswith(b"\n")
    if ends_with_newline:
        lines.pop()  # the empty string after the final newline
    result = ResultsFile(path=path)
    last_index = len(lines) - 1
    for index, raw in enumerate(lines):
        line_no = index + 1
        where = f"{path}:{line_no}"
        if not raw.strip():
            continue
        try:
            record = _parse_line(raw)
        except (UnicodeDecodeError, ValueError) as exc:
            if index == last_index and not ends_with_newline:
                result.truncated_line = line_no
                break
            raise ResultsError(f"{where}: malformed line ({exc})") from None
        kind = _check_record(record, where)
        if kind == "case":
            result.cases.append(record)
        elif kind == "header":
            result.headers.append(record)
        elif kind == "footer":
            result.footers.append(record)
        elif kind == "skip":
            result.skips.append(record)
        else:
            result.ignored_records += 1
    if not result.headers:
        raise ResultsError(f"{path}: empty results file (no records)")
    return result


def load_many(paths: Iterable[str | os.PathLike[str]]) -> list[ResultsFile]:
    """Parse several results files; a missing file raises ``ResultsError`` naming it."""
    files = []
    for path in paths:
        try:
            files.append(load_results(path))
        except FileNotFoundError:
            raise ResultsError(f"{path}: results file not found") from None
        except IsADirectoryError:
            raise ResultsError(f"{path}: is a directory, not a results file") from None
        except PermissionError:
            raise ResultsError(f"{path}: permission denied") from None
    return files


def _file_identity(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None  # a missing file is reported when it is read
    return (info.st_dev, info.st_ino)


def distinct_paths(paths: Iterable[str | os.PathLike[str]]) -> tuple[list[str], list[str]]:
    """The paths with repeats of the same file (by device and inode: links and ``./x`` included)
    removed; returns (kept, warnings)."""
    kept: list[str] = []
    warnings: list[str] = []
    seen: dict[tuple[int, int], str] = {}
    for path in map(str, paths):
        identity = _file_identity(path)
        if identity is not None and identity in seen:
            warnings.append(f"{path}: the same file as {seen[identity]}; read once")
            continue
        if identity is not None:
            seen[identity] = path
        kept.append(path)
    return kept, warnings


def writer_identity(header: dict[str, Any]) -> tuple[Any, ...]:
    """What tells one writing process from another: two headers alike in all of these are one process
    (a copied file), not two. Run ids alone are not enough: ``conform run`` stamps them by the second,
    so two hosts started by the same cron line share one."""
    return (header.get("run_id"), header.get("host"), header.get("worker"), header.get("started"))


def drop_duplicate_runs(files: list[ResultsFile]) -> tuple[list[ResultsFile], list[str]]:
    """Drop files whose writing processes were already read from an earlier file (a copy of the same
    run, or one run passed twice under two names); returns (kept, warnings)."""
    kept: list[ResultsFile] = []
    warnings: list[str] = []
    seen: dict[tuple[Any, ...], ResultsFile] = {}
    for results in files:
        repeats = [seen[key] for key in map(writer_identity, results.headers) if key in seen]
        if repeats:
            run_ids = ", ".join(sorted({str(h.get("run_id")) for h in results.headers}))
            warnings.append(f"{results.path}: run {run_ids} was already read from {repeats[0].path}; "
                            "this copy is dropped")
            continue
        for header in results.headers:
            seen[writer_identity(header)] = results
        kept.append(results)
    return kept, warnings


def check_outputs_are_not_inputs(outputs: Iterable[str | os.PathLike[str] | None],
                                 inputs: Iterable[str | os.PathLike[str] | None]) -> None:
    """Refuse an output path that is one of the inputs (or another output): writing it would destroy
    the results it was made from. Raises :class:`ReportInputError`."""
    by_identity: dict[tuple[int, int], str] = {}
    for path in inputs:
        identity = _file_identity(path) if path is not None else None
        if identity is not None:
            by_identity.setdefault(identity, str(path))
    claimed: dict[str, str] = {}
    for path in outputs:
        if path is None:
            continue
        identity = _file_identity(path)
        if identity is not None and identity in by_identity:
            raise ReportInputError(f"{path}: refusing to write over an input file ({by_identity[identity]})")
        target = os.path.realpath(path)
        if target in claimed:
            raise ReportInputError(f"{path}: given as two outputs (also {claimed[target]})")
        claimed[target] = str(path)


def iter_cases(files: Iterable[ResultsFile]) -> Iterator[tuple[ResultsFile, dict[str, Any]]]:
    for results in files:
        for case in results.cases:
            yield results, case


def as_float(value: Any) -> float | None:
    """A metric as a float: the writer stores NaN/inf as strings; anything else non-numeric is None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if value == "nan":
        return math.nan
    if value == "inf":
        return math.inf
    if value == "-inf":
        return -math.inf
    return None


def load_artefact(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Load a case's ``.npz`` artefact. Never unpickles: object arrays raise ``ValueError``."""
    with np.load(path, allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}

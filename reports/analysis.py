"""Turning case records into what the report shows: device columns, the support matrix, per-op
coverage and error, failure clusters, known failures, the run's own status and the diff against
baseline runs.

Everything here is plain data so it can be tested without rendering HTML. One pass over the
cases aggregates passing records (a nightly run has ~100k of them); failures are gathered into
clusters (:mod:`reports.clusters`) that keep a few cases each.
"""

from __future__ import annotations

import json
import math
import os
import zipfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from golden import catalogue
from golden.case import parse_case_id
from reports.baseline import BaselineDiff, diff_against_baseline
from reports.clusters import (
    ClusterKey,
    FailureCluster,
    FailureItem,
    FailureKind,
    dtype_signature,
    failure_kind,
    input_elements,
)
from reports.expectations import Expectation
from reports.matrix import (  # noqa: F401  (re-exported: the matrix's names are the report's vocabulary)
    ALL_PASS,
    CELL_EXPLANATIONS,
    CELL_KINDS,
    CELL_LABELS,
    CELL_MARKS,
    CLAIMED_FAIL,
    KNOWN_ONLY,
    NONE_PASS,
    NOT_CLAIMED,
    NOT_RUN,
    SOME_PASS,
    CellStats,
    classify_cell,
    device_name,
    dtype_key,
    dtype_sort_key,
    op_family,
)
from reports.plots import HIST_BINS, error_points, error_scatter_svg, ratio_bin, thin
from reports.repro import header_inventory
from reports.runstatus import RunStatus, run_status
from results.load import FAILING_OUTCOMES, ResultsFile, as_float, load_artefact
from results.outcome import Outcome
from results.shards import missing_shard_reasons
from results.view import CaseView


def op_params_text(case_id: str) -> str:
    """The text inside the case id's outer parentheses (llama.cpp's ``op_params``)."""
    start = case_id.find("(")
    if start < 0 or not case_id.endswith(")"):
        return ""
    return case_id[start + 1 : -1]


@dataclass
class DeviceColumn:
    key: str  # unique column key: the spec, or "spec@host" when one spec ran on several hosts
    spec: str
    host: str
    inventory: dict[str, Any]

    @property
    def name(self) -> str:
        if "info_spec" in self.inventory:  # info() names another device (an inherited info()): the spec decides
            return device_name(self.spec)
        name = self.inventory.get("name")
        return name if isinstance(name, str) and name else device_name(self.spec)

    @property
    def backend_reg_name(self) -> str:
        backend = self.inventory.get("backend")
        if isinstance(backend, str) and backend:
            return backend
        return self.name.rstrip("0123456789") or self.name


@dataclass
class Coverage:
    """Distinct values one parameter reached, with the numeric range."""

    values: set[str] = field(default_factory=set)
    low: float | None = None
    high: float | None = None
    numeric_only: bool = True

    # Above this many distinct values only the count and range are worth showing.
    MAX_TRACKED = 200

    def add(self, value: Any) -> None:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
            if not math.isnan(number):
                self.low = number if self.low is None else min(self.low, number)
                self.high = number if self.high is None else max(self.high, number)
        else:
            self.numeric_only = False
        if len(self.values) <= self.MAX_TRACKED:
            self.values.add(_value_text(value))

    @property
    def count_text(self) -> str:
        return f"{self.MAX_TRACKED}+" if len(self.values) > self.MAX_TRACKED else str(len(self.values))

    def shown_values(self, limit: int = 12) -> tuple[list[str], int]:
        ordered = sorted(self.values, key=_natural_key)
        return ordered[:limit], max(0, len(ordered) - limit)

    def readable(self, name: str, limit: int = 6) -> str:
        """The values reached, as a person reads them: a range for many numbers, per-dim ranges for
        shape-like lists, the kinds of layout reached, short numbers; else the first values."""
        values = self.values
        more = f" ({self.count_text} values)"
        if name == "layout":
            kinds = {kind for value in values for kind, token in _LAYOUT_KINDS if token in value}
            return ", ".join(k for k, _ in _LAYOUT_KINDS if k in kinds) + f" ({self.count_text} layouts)"
        if self.numeric_only and len(values) > 4:
            return self.range_text + more
        if self.numeric_only:
            return ", ".join(_fmt_number(float(v)) for v in sorted(values, key=float))
        lists = [_int_list(v) for v in values]
        is_order = name.endswith(("perm", "axes"))  # a permutation reads whole, not as ranges per dim
        if len(values) > 2 and not is_order and all(lists) and len({len(x) for x in lists if x}) == 1:
            dims = zip(*[x for x in lists if x], strict=True)
            ranges = [f"{lo}" if lo == hi else f"{lo}…{hi}" for lo, hi in ((min(d), max(d)) for d in dims)]
            return "[" + ", ".join(ranges) + "]" + more
        shown, rest = self.shown_values(limit)
        return ", ".join(shown) + (f" (+{rest} more)" if rest else "")

    @property
    def range_text(self) -> str:
        if self.low is None or self.high is None:
            return ""
        return f"{_fmt_number(self.low)} … {_fmt_number(self.high)}"


# what a layout text holds, in the order a reader meets them
_LAYOUT_KINDS = (("contiguous", "contiguous"), ("permuted", "perm["), ("padded", "pad["), ("offset", "offs["))


def _int_list(text: str) -> list[int] | None:
    """``[1,2,3]`` as integers; None for anything else."""
    if not (text.startswith("[") and text.endswith("]")):
        return None
    try:
        return [int(part) for part in text[1:-1].split(",")]
    except ValueError:
        return None


def _value_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return repr(value)  # same text as JSON for finite numbers, without the encoder's overhead
    return json.dumps(value, separators=(",", ":"))


def _natural_key(text: str) -> tuple[int, float, str]:
    try:
        return (0, float(text), text)
    except ValueError:
        return (1, 0.0, text)


def _fmt_number(value: float) -> str:
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"


@dataclass
class OpDeviceStats:
    cases: int = 0
    ran: int = 0
    passed: int = 0
    failed: int = 0
    known: int = 0
    # the suite's budget: cases it drew, the drawn ones a known bug covered (they judged nothing; a
    # documented deviation is still judged against its own bound), and the cases judged — drawn cases
    # not covered plus companions (the covered case's shapes, params and data in a layout the bug
    # does not cover)
    drawn: int = 0
    covered: int = 0
    companions: int = 0
    judged: int = 0
    worst_ratio: float | None = None  # worst error_ratio over cases that ran
    worst_passing_ratio: float | None = None
    worst_case_id: str = ""
    ratio_bins: list[int] = field(default_factory=lambda: [0] * HIST_BINS)  # error-ratio histogram
    known_bins: list[int] = field(default_factory=lambda: [0] * HIST_BINS)  # of those, known-bug failures

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.ran if self.ran else None


@dataclass
class OpSummary:
    op: str
    per_device: dict[str, OpDeviceStats] = field(default_factory=dict)
    coverage: dict[str, Coverage] = field(default_factory=dict)
    # the op's declared regimes (golden OpSpec.regimes) -> how many of the run's cases were in each
    regimes: dict[str, int] = field(default_factory=dict)

    @property
    def cases(self) -> int:
        return sum(stats.cases for stats in self.per_device.values())

    @property
    def worst_ratio(self) -> float | None:
        ratios = [s.worst_ratio for s in self.per_device.values() if s.worst_ratio is not None]
        return max(ratios) if ratios else None


@dataclass(frozen=True)
class KnownCause:
    """Why a failure is expected: a known backend bug the harness matched (the record's ``expected``),
    or an entry of the report's expectations file."""

    id: str
    reason: str
    from_harness: bool  # True: the record carried it; False: the expectations file matched it
    repro: str = ""
    category: str = "backend-bug"
    issue: str | None = None
    source: str = ""  # where the known bug is written (a Python list, or an expectations file)

    @property
    def issue_is_link(self) -> bool:
        return bool(self.issue) and str(self.issue).startswith(("https://", "http://"))


def record_known_bug(case: dict[str, Any]) -> KnownCause | None:
    """The known bug a record carries (``"expected": {"id", "reason", "repro"}``), if any."""
    expected = case.get("expected")
    if not isinstance(expected, dict) or not isinstance(expected.get("id"), str) or not expected["id"]:
        return None
    reason = expected.get("reason")
    repro = expected.get("repro")
    source = expected.get("source")
    return KnownCause(id=expected["id"], reason=reason if isinstance(reason, str) else "",
                      from_harness=True, repro=repro if isinstance(repro, str) else "",
                      source=source if isinstance(source, str) else "")


def expectation_cause(expectation: Expectation) -> KnownCause:
    return KnownCause(id=f"#{expectation.index} {expectation.pattern}", reason=expectation.reason,
                      from_harness=False, category=expectation.category, issue=expectation.issue)


@dataclass
class KnownBugStats:
    """How a known bug (from the records) fared in this run."""

    cause: KnownCause
    failures: int = 0
    passing: int = 0  # records that carry the bug yet passed: the bug may be fixed
    declined: int = 0
    devices: set[str] = field(default_factory=set)
    matched_nothing: bool = False  # an entry of the run's expectations files that no record carries

    @property
    def is_stale(self) -> bool:
        return self.failures == 0 and (self.passing > 0 or self.matched_nothing)


@dataclass
class DeviceSummary:
    column: DeviceColumn
    counts: Counter[str] = field(default_factory=Counter)
    known_counts: Counter[str] = field(default_factory=Counter)  # per outcome, the failures known bugs explain
    known: int = 0
    claimed_failing: int = 0
    device_seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def ran(self) -> int:
        return self.total - self.counts[Outcome.UNSUPPORTED]

    @property
    def failing(self) -> int:
        return sum(self.counts[outcome] for outcome in FAILING_OUTCOMES)

    @property
    def unexpected_failures(self) -> int:
        return self.failing - self.known

    @property
    def pass_rate(self) -> float | None:
        return self.counts[Outcome.PASS] / self.ran if self.ran else None

    @property
    def judged(self) -> int:
        """Cases that ran and that no known bug covers: the ones whose verdict is news."""
        return self.ran - self.known

    @property
    def judged_pass_rate(self) -> float | None:
        """Passing cases ÷ judged cases: 100 % when every case no known bug covers passed."""
        return self.counts[Outcome.PASS] / self.judged if self.judged else None


@dataclass(frozen=True)
class SkippedTest:
    """A test pytest skipped (a ``skip`` record), with its reason."""

    test_id: str
    reason: str
    when: str
    path: str  # the results file


@dataclass(frozen=True)
class Headline:
    """The figures a release note quotes, over every device of the report.

    ``judged`` are the cases that ran and that no known bug covers (``passed`` + ``unexpected``);
    ``known`` the failures a known bug or an expectations entry explains, also by entry; ``not_run``
    the cases the backend declined; ``skipped`` the tests pytest skipped (they leave no case)."""

    cases: int
    judged: int
    passed: int
    known: int
    known_by_entry: list[tuple[str, int]]
    unexpected: int
    not_run: int
    skipped: int

    @property
    def every_uncovered_case_passed(self) -> bool:
        """Some case was judged and every judged case passed (the run's completeness is the caller's)."""
        return self.judged > 0 and self.unexpected == 0


@dataclass
class RunInfo:
    """One results file: where it came from, whether it is complete and how pytest ended."""

    results: ResultsFile
    started: str | None
    ended: str | None
    wall_seconds: float | None
    device_seconds: float
    status: RunStatus

    @property
    def path(self) -> str:
        return str(self.results.path)


@dataclass
class ReportData:
    files: list[ResultsFile]
    runs: list[RunInfo]
    columns: list[DeviceColumn]
    device_summaries: dict[str, DeviceSummary]
    matrix: dict[tuple[str, str], dict[str, CellStats]]  # (op, dtype key) -> column -> stats
    ops: dict[str, OpSummary]
    clusters: list[FailureCluster]  # unexpected failures, one cluster per op/device/signature/kind
    known_clusters: list[FailureCluster]
    known_bugs: list[KnownBugStats]  # bugs the records carry (matched by the harness)
    expectations: list[Expectation]  # the report's expectations file
    baseline: BaselineDiff | None
    total_cases: int
    listed_without_cases: list[str] = field(default_factory=list)  # header devices no record names
    input_warnings: list[str] = field(default_factory=list)  # inputs dropped as duplicates
    missing_shards: list[str] = field(default_factory=list)  # one line per sharded selection lacking a shard

    @property
    def is_partial(self) -> bool:
        return bool(self.missing_shards) or any(run.results.is_partial for run in self.runs)

    @property
    def unexpected_failures(self) -> int:
        return sum(cluster.count for cluster in self.clusters)

    @property
    def known_failures(self) -> int:
        return sum(cluster.count for cluster in self.known_clusters)

    @property
    def unrecorded_failures(self) -> int:
        """pytest failures no case record accounts for (at least this many)."""
        return sum(run.status.unrecorded for run in self.runs)

    @property
    def failed_runs(self) -> list[RunInfo]:
        """Runs whose pytest session did not end cleanly (failures without a record, an internal error)."""
        return [run for run in self.runs if run.status.alarming]

    @property
    def is_green(self) -> bool:
        """Only a complete run, that ran cases, with no unexpected failure of any kind and a clean exit."""
        return (self.total_cases > 0 and not self.is_partial and self.unexpected_failures == 0
                and self.unrecorded_failures == 0 and all(run.status.clean for run in self.runs))

    @property
    def skipped_tests(self) -> list[SkippedTest]:
        return [SkippedTest(test_id=str(skip.get("test_id") or "?"), reason=str(skip.get("reason") or ""),
                            when=str(skip.get("when") or ""), path=str(results.path))
                for results in self.files for skip in results.skips]

    def headline(self) -> Headline:
        passed = sum(summary.counts[Outcome.PASS] for summary in self.device_summaries.values())
        declined = sum(summary.counts[Outcome.UNSUPPORTED] for summary in self.device_summaries.values())
        by_entry: Counter[str] = Counter()
        for cluster in self.known_clusters:
            by_entry[cluster.known_cause.id if cluster.known_cause else "?"] += cluster.count
        return Headline(cases=self.total_cases, judged=passed + self.unexpected_failures, passed=passed,
                        known=self.known_failures, known_by_entry=sorted(by_entry.items(), key=lambda e: (-e[1], e[0])),
                        unexpected=self.unexpected_failures, not_run=declined, skipped=len(self.skipped_tests))

    @property
    def all_uncovered_passed(self) -> bool:
        """What a release note may say: a complete, clean run in which every case no known bug covers passed."""
        return self.is_green and self.headline().every_uncovered_case_passed

    @property
    def device_names(self) -> list[str]:
        return [column.name for column in self.columns]

    def title(self) -> str:
        """Names the devices actually in the report (from the records, never from a header)."""
        names = list(dict.fromkeys(self.device_names))
        if not names:
            return "ggml conformance report (no cases)"
        shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
        return f"ggml conformance report: {shown}"

    def matrix_rows(self) -> list[tuple[str, str, dict[str, CellStats]]]:
        ordered = sorted(self.matrix.items(), key=lambda item: (item[0][0], dtype_sort_key(item[0][1])))
        return [(op, key, cells) for (op, key), cells in ordered]

    def matrix_groups(self) -> list[tuple[str, list[tuple[str, dict[str, CellStats]]]]]:
        """Matrix rows grouped by op (the op name spans its type rows)."""
        groups: dict[str, list[tuple[str, dict[str, CellStats]]]] = {}
        for op, key, cells in self.matrix_rows():
            groups.setdefault(op, []).append((key, cells))
        return list(groups.items())

    def cell_kind_counts(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for cells in self.matrix.values():
            for column in self.columns:
                counts[classify_cell(cells.get(column.key))] += 1
        return counts

    def unexpected_claimed_cells(self) -> int:
        """Cells marked "claimed supported, but fails" where some failure is not a known bug."""
        return sum(1 for cells in self.matrix.values() for cell in cells.values() if cell.claimed_failing_unexpected)

    @property
    def stale_expectations(self) -> list[Expectation]:
        return [e for e in self.expectations if e.is_stale]

    @property
    def stale_known_bugs(self) -> list[KnownBugStats]:
        return [bug for bug in self.known_bugs if bug.is_stale]

    def closest_to_bound(self, limit: int = 15) -> list[tuple[str, str, OpDeviceStats]]:
        """Ops whose passing cases come nearest their tolerance (worst passing error ratio), half-ulp
        ties left out (:meth:`half_ulp_ties`)."""
        rows = [
            (op.op, column, stats)
            for op in self.ops.values()
            for column, stats in op.per_device.items()
            if stats.worst_passing_ratio is not None and stats.worst_passing_ratio != HALF_ULP_TIE
        ]
        rows.sort(key=lambda row: -(row[2].worst_passing_ratio or 0.0))
        return rows[:limit]


    def half_ulp_ties(self) -> list[tuple[str, str]]:
        """(op, device) whose worst passing ratio is exactly 1: a correctly rounded result half an ulp
        from the exact value, which a bound of half an ulp allows exactly (expected, not a warning)."""
        return [(op.op, column) for op in self.ops.values() for column, stats in op.per_device.items()
                if stats.worst_passing_ratio == HALF_ULP_TIE]

    def matrix_families(self) -> list[tuple[str, list[tuple[str, list[tuple[str, dict[str, CellStats]]]]], bool]]:
        """Matrix rows by op family (catalogue order), each with whether a cell needs attention."""
        families: dict[str, list[tuple[str, list[tuple[str, dict[str, CellStats]]]]]] = {}
        for op, rows in self.matrix_groups():
            families.setdefault(op_family(op), []).append((op, rows))
        return [(family, ops, any(cell.needs_attention for _, rows in ops for _, cells in rows
                                  for cell in cells.values()))
                for family, ops in families.items()]

    def op_families(self) -> list[tuple[str, list[OpSummary], bool]]:
        """Per-op rows by family, each with whether an op of it failed unexpectedly somewhere."""
        families: dict[str, list[OpSummary]] = {}
        for op in self.ops.values():
            families.setdefault(op_family(op.op), []).append(op)
        attention = {op for op, rows in self.matrix_groups()
                     if any(cell.needs_attention for _, cells in rows for cell in cells.values())}
        return [(family, ops, any(op.op in attention for op in ops)) for family, ops in families.items()]


# A worst passing error ratio of exactly 1: an exact tie at the bound (half an ulp off for a correctly
# rounded result under a half-ulp bound), expected rather than near failing.
HALF_ULP_TIE = 1.0


def _parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    # The schema says UTC; a writer that left the zone off still means UTC (and naive vs aware
    # datetimes cannot be compared).
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _run_info(results: ResultsFile, status: RunStatus) -> RunInfo:
    starts = [t for t in (_parse_time(h.get("started")) for h in results.headers) if t]
    ends = [t for t in (_parse_time(f.get("ended")) for f in results.footers) if t]
    device_seconds = sum(as_float(c.get("duration_s")) or 0.0 for c in results.cases)
    wall = None
    if starts and ends and not results.is_partial:
        wall = (max(ends) - min(starts)).total_seconds()
    return RunInfo(
        results=results,
        started=min(starts).isoformat() if starts else None,
        ended=max(ends).isoformat() if ends and not results.is_partial else None,
        wall_seconds=wall,
        device_seconds=device_seconds,
        status=status,
    )


def _host_of(results: ResultsFile, case: dict[str, Any]) -> str:
    header = results.header_for(case)
    return str((header or {}).get("host") or "?")


def device_columns(files: list[ResultsFile]) -> list[DeviceColumn]:
    """One column per device spec the case records name, in first-seen order; per host too when one
    spec ran on several hosts.

    Columns come from the records' ``device`` only. A header's device list holds what each
    device's ``info()`` said, and a plug-in that inherits another device's ``info()`` would
    otherwise add a phantom column; the header is only consulted for a column's inventory.
    """
    hosts_by_spec: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for results in files:
        writer_seen: set[tuple[Any, Any, str]] = set()
        for case in results.cases:
            writer = (case.get("run_id"), case.get("worker"), case["device"])
            if writer in writer_seen:
                continue
            writer_seen.add(writer)
            header = results.header_for(case)
            host = str((header or {}).get("host") or "?")
            if host not in hosts_by_spec[case["device"]]:
                hosts_by_spec[case["device"]][host] = header_inventory(header, case["device"])

    columns: list[DeviceColumn] = []
    for spec, hosts in hosts_by_spec.items():
        for host, inventory in hosts.items():
            key = spec if len(hosts) == 1 else f"{spec}@{host}"
            columns.append(DeviceColumn(key=key, spec=spec, host=host, inventory=inventory))
    return columns


def _listed_without_cases(files: list[ResultsFile], columns: list[DeviceColumn]) -> list[str]:
    ran = {column.spec for column in columns}
    listed: dict[str, None] = {}
    for results in files:
        for header in results.headers:
            for inventory in header.get("devices") or []:
                spec = inventory.get("spec") if isinstance(inventory, dict) else None
                if isinstance(spec, str) and spec not in ran:
                    listed[spec] = None
    return list(listed)


def _artefact_path(results: ResultsFile, case: dict[str, Any]) -> str | None:
    """The artefact's file, only for a plain relative path that stays under the results' folder."""
    artefact = case.get("artefact")
    if not isinstance(artefact, str) or not artefact or ":" in artefact.split("/", 1)[0]:
        return None  # only plain relative paths: never a "javascript:" or other scheme
    if os.path.isabs(artefact):
        return None
    base = os.path.dirname(os.path.abspath(results.path))
    target = os.path.normpath(os.path.join(base, artefact))
    return target if target.startswith(base + os.sep) else None


def _artefact_href(results: ResultsFile, case: dict[str, Any], out_dir: str | None) -> str | None:
    target = _artefact_path(results, case)
    if target is None or out_dir is None:
        return target
    return os.path.relpath(target, out_dir).replace(os.sep, "/")


def analyse(
    files: list[ResultsFile],
    expectations: list[Expectation] | None = None,
    baseline_files: list[ResultsFile] | None = None,
    out_dir: str | None = None,
    max_examples_per_cluster: int = 5,
) -> ReportData:
    """Aggregate results files (and optionally expectations and baseline runs) into report data."""
    expectations = expectations or []
    for expectation in expectations:  # the counts are per analysis, not per loaded file
        expectation.matched_failures = expectation.matched_unsupported = expectation.matched_passing = 0
    expectation_causes = {id(e): expectation_cause(e) for e in expectations}
    columns = device_columns(files)
    multi_host_specs = {c.spec for c in columns if c.key != c.spec}
    summaries = {c.key: DeviceSummary(column=c) for c in columns}
    matrix: dict[tuple[str, str], dict[str, CellStats]] = defaultdict(dict)
    ops: dict[str, OpSummary] = {}
    clusters: dict[ClusterKey, FailureCluster] = {}
    known_clusters: dict[ClusterKey, FailureCluster] = {}
    known_bugs: dict[str, KnownBugStats] = {}
    passing_for_stale_check: list[dict[str, Any]] = []
    statuses: list[RunStatus] = []
    total = 0

    for results in files:
        failing_tests: set[str] = set()  # tests with a failing record that pytest must have failed
        for raw in results.cases:
            total += 1
            case = CaseView.of(raw)
            spec = case.device
            column = f"{spec}@{_host_of(results, raw)}" if spec in multi_host_specs else spec
            outcome = case.outcome
            is_failure = outcome.failing

            cause = _count_known_bug(case, known_bugs)
            if cause is None and outcome != Outcome.PASS:
                cause = _match_expectation(case, expectations, expectation_causes)
            elif cause is None and expectations:
                passing_for_stale_check.append(raw)
            known = is_failure and cause is not None
            if is_failure and not (cause is not None and cause.from_harness) and case.test_id is not None:
                failing_tests.add(case.test_id)

            _add_to_summary(summaries[column], case, known, is_failure)
            cells = matrix[(case.op, dtype_key(case.dtypes))]
            cell = cells.get(column) or cells.setdefault(column, CellStats())
            cell.add(raw, known)
            op = ops.get(case.op) or ops.setdefault(case.op, OpSummary(op=case.op))
            _add_to_op(op, column, case, known)
            if is_failure:
                key = _cluster_key(case, column, cause if known else None)
                target = known_clusters if known else clusters
                cluster = target.get(key)
                if cluster is None:
                    cluster = target[key] = FailureCluster(key=key, known_cause=cause if known else None)
                item = FailureItem(raw, column, source=results, elements=input_elements(raw))
                cluster.add(item, total, max_examples_per_cluster)
        statuses.append(run_status(results, failing_tests))

    _add_unmatched_entries(files, known_bugs)

    # Only entries that explained no failure need the passing cases: "stale, or fixed?"
    for expectation in expectations:
        if expectation.is_stale:
            expectation.matched_passing = sum(map(expectation.matches, passing_for_stale_check))

    for group in (clusters, known_clusters):
        for cluster in group.values():
            cluster.finish()
            for item in cluster.shown:  # links only for the failures actually listed
                if item.source is not None:
                    item.artefact_href = _artefact_href(item.source, item.case, out_dir)

    baseline = diff_against_baseline(files, baseline_files) if baseline_files is not None else None
    return ReportData(
        files=files,
        runs=[_run_info(results, status) for results, status in zip(files, statuses, strict=True)],
        columns=columns,
        device_summaries=summaries,
        matrix=dict(matrix),
        ops=dict(sorted(ops.items())),
        clusters=sorted(clusters.values(), key=lambda c: c.key.sort_key),
        known_clusters=sorted(known_clusters.values(), key=lambda c: (c.key.known, c.key.sort_key)),
        known_bugs=sorted(known_bugs.values(), key=lambda bug: bug.cause.id),
        expectations=expectations,
        baseline=baseline,
        total_cases=total,
        listed_without_cases=_listed_without_cases(files, columns),
        missing_shards=missing_shard_reasons(files),
    )


def _count_known_bug(case: CaseView, known_bugs: dict[str, KnownBugStats]) -> KnownCause | None:
    """The known bug the record carries (counted by what the case did), or None."""
    if case.expected_id is None:
        return None
    bug = known_bugs.get(case.expected_id)
    if bug is None:
        cause = record_known_bug(case.raw)
        assert cause is not None  # expected_id is the same field record_known_bug reads
        bug = known_bugs[case.expected_id] = KnownBugStats(cause=cause)
    bug.devices.add(case.device)
    if case.outcome == Outcome.PASS:
        bug.passing += 1
    elif case.outcome == Outcome.UNSUPPORTED:
        bug.declined += 1
    else:
        bug.failures += 1
    return bug.cause


def _match_expectation(case: CaseView, expectations: list[Expectation],
                       causes: dict[int, KnownCause]) -> KnownCause | None:
    """The expectations file's entry that explains a case that did not pass (counted), or None."""
    matched = next((e for e in expectations if e.matches(case.raw)), None)
    if matched is None:
        return None
    if case.outcome == Outcome.UNSUPPORTED:
        matched.matched_unsupported += 1
        return None
    matched.matched_failures += 1
    return causes[id(matched)]


def _add_to_summary(summary: DeviceSummary, case: CaseView, known: bool, is_failure: bool) -> None:
    summary.counts[case.outcome] += 1
    summary.device_seconds += case.duration_s
    if known:
        summary.known += 1
        summary.known_counts[case.outcome] += 1
    if is_failure and case.supported is True:
        summary.claimed_failing += 1


def _cluster_key(case: CaseView, column: str, known_cause: KnownCause | None) -> ClusterKey:
    kind, detail = failure_kind(case.raw)
    return ClusterKey(op=case.op, column=column, signature=dtype_signature(case.dtypes),
                      kind=kind, detail=detail, known=known_cause.id if known_cause else "")


def covered_by_known_bug(case: CaseView) -> bool:
    """A failing record a known bug of its device explains, not judged against a deviation's bound."""
    return case.expected_id is not None and case.failing and not case.deviation_judged


def _count_drawn_and_judged(stats: OpDeviceStats, case: CaseView) -> None:
    """Drawn cases, known-bug companions, drawn cases a known bug covers, and cases judged."""
    companion = case.companion_of is not None
    stats.companions += companion
    stats.drawn += not companion
    covered = covered_by_known_bug(case)
    stats.covered += covered and not companion
    stats.judged += case.outcome not in (Outcome.UNSUPPORTED, Outcome.ERROR) and not covered


def _add_unmatched_entries(files: list[ResultsFile], known_bugs: dict[str, KnownBugStats]) -> None:
    """The run's own expectations-file entries (header ``expectations``) that no record carries: stale."""
    for results in files:
        for header in results.headers:
            for entry in header.get("expectations") or ():
                if isinstance(entry, dict) and isinstance(entry.get("id"), str) and entry["id"] not in known_bugs:
                    known_bugs[entry["id"]] = KnownBugStats(
                        cause=KnownCause(id=entry["id"], reason=str(entry.get("reason", "")), from_harness=True,
                                         repro=str(entry.get("repro", "")), source=str(entry.get("source", ""))),
                        matched_nothing=True)


def _add_to_op(op: OpSummary, column: str, case: CaseView, known: bool) -> None:
    stats = op.per_device.get(column)
    if stats is None:
        stats = op.per_device[column] = OpDeviceStats()
    stats.cases += 1
    outcome = case.outcome
    _count_drawn_and_judged(stats, case)
    if outcome != Outcome.UNSUPPORTED:
        stats.ran += 1
        if outcome == Outcome.PASS:
            stats.passed += 1
        else:
            stats.failed += 1
            stats.known += known
        ratio = case.error_ratio
        known_failure = known and outcome.failing
        if ratio is None:
            if outcome.failing:  # a crash or timeout has no error to measure: off the scale
                stats.ratio_bins[-1] += 1
                stats.known_bins[-1] += known_failure
        else:
            if math.isnan(ratio):
                ratio = math.inf  # a NaN error is as bad as it gets
            stats.ratio_bins[ratio_bin(ratio)] += 1
            stats.known_bins[ratio_bin(ratio)] += known_failure
            if stats.worst_ratio is None or ratio > stats.worst_ratio:
                stats.worst_ratio = ratio
                stats.worst_case_id = case.case_id
            if outcome == Outcome.PASS and (stats.worst_passing_ratio is None or ratio > stats.worst_passing_ratio):
                stats.worst_passing_ratio = ratio

    _count_regimes(op, case.case_id)
    params = case.raw.get("params")
    if isinstance(params, dict):
        for name, value in params.items():
            coverage = op.coverage.get(name)
            if coverage is None:
                coverage = op.coverage[name] = Coverage()
            coverage.add(value)
    derived = (("type", dtype_key(case.dtypes)), ("layout", _layout_text(case.raw.get("layout"))))
    for name, value in derived:
        if value:
            coverage = op.coverage.get(name)
            if coverage is None:
                coverage = op.coverage[name] = Coverage()
            coverage.add(value)


def _count_regimes(op: OpSummary, case_id: Any) -> None:
    """Count the case in each declared regime of its op it is in (an id that no longer parses, or an
    op the catalogue does not know, counts in none)."""
    try:
        spec = catalogue.get(op.op)
    except (KeyError, ValueError):
        return
    if not spec.regimes:
        return
    for regime in spec.regimes:
        op.regimes.setdefault(regime.name, 0)
    try:
        parsed = parse_case_id(str(case_id))
        hits = [regime.name for regime in spec.regimes if regime(parsed)]
    except (ValueError, KeyError, IndexError, TypeError):
        return
    for name in hits:
        op.regimes[name] += 1


def _layout_text(layout: Any) -> str:
    if not isinstance(layout, dict) or not layout:
        return ""
    if all(value == "contiguous" for value in layout.values()):
        return "contiguous"
    return ";".join(f"{name}:{value}" for name, value in sorted(layout.items()) if value != "contiguous")


def describes_cpu(case: dict[str, Any]) -> bool:
    """Whether the tolerance row that judged a record quotes ggml CPU measurements (display only: the
    report says so, so nobody reads a CPU calibration as a statement about the device under test).

    Decided by the row, never by its reason's words: the record's own ``tolerance.calibration`` where
    its writer set it, else the ``calibration`` of the catalogue's row named in ``decided_by``, else
    (files written before either) for the row this checkout's catalogue gives the record's op and dtypes.
    """
    from golden import catalogue
    from golden.tolerance import Calibration

    tolerance = case.get("tolerance")
    if isinstance(tolerance, dict) and isinstance(tolerance.get("calibration"), str):
        return bool(tolerance["calibration"] == Calibration.GGML_CPU)
    decided_by = case.get("decided_by")
    if isinstance(decided_by, str):
        if not decided_by.startswith("catalogue:"):
            return False  # a device's documented deviation: its own bound, not the catalogue's CPU figures
        row_id: str | None = decided_by.removeprefix("catalogue:")
    else:
        dtypes = case.get("dtypes")
        op = case.get("op")
        row_id = catalogue.row_id(op, dtypes) if isinstance(dtypes, dict) and isinstance(op, str) else None
    found = catalogue.row(row_id) if row_id is not None else None
    return found is not None and found.calibration == Calibration.GGML_CPU


# Error-against-input plots read artefacts: a bounded number, so a run with thousands of failure
# clusters still builds in seconds. Clusters are plotted in report order; the rest say so.
ERROR_PLOT_CLUSTERS = 60
ERROR_PLOT_ARTEFACTS = 6
_PLOTTED_KINDS = (FailureKind.MAGNITUDE, FailureKind.NONFINITE, FailureKind.NMSE)


def is_elementwise(op: str) -> bool | None:
    """True for the catalogue's one-input elementwise (unary) ops, False for its other ops, None when
    the op is not in this checkout's catalogue (a newer writer): then the arrays decide."""
    from golden import catalogue

    try:
        return catalogue.get(op).family == "unary"
    except KeyError:
        return None


def attach_error_plots(clusters: list[FailureCluster], limit: int = ERROR_PLOT_CLUSTERS) -> int:
    """Give failing elementwise clusters an error-against-input plot from their listed cases' ``.npz``
    artefacts (``input_0``, ``golden``, ``device``); returns how many clusters got one."""
    plotted = 0
    for cluster in clusters:
        if plotted >= limit:
            break
        if cluster.key.kind not in _PLOTTED_KINDS or is_elementwise(cluster.key.op) is False:
            continue
        xs, errors, nonfinite, used = [], [], [], 0
        for item in cluster.shown:
            if used >= ERROR_PLOT_ARTEFACTS:
                break
            path = _artefact_path(item.source, item.case) if item.source is not None else None
            if path is None or not os.path.isfile(path):
                continue
            try:
                arrays = load_artefact(path)
            except (OSError, ValueError, zipfile.BadZipFile):
                continue  # an unreadable artefact loses its plot, not the report
            inputs = [name for name in arrays if name.startswith("input_")]
            if inputs != ["input_0"] or "golden" not in arrays or "device" not in arrays:
                continue  # one input, element for element: what "error against input" means
            points = error_points(arrays["input_0"], arrays["golden"], arrays["device"])
            if points is None:
                continue
            xs.append(points[0])
            errors.append(points[1])
            nonfinite.append(points[2])
            used += 1
        if not used:
            continue
        x, error = thin(np.concatenate(xs), np.concatenate(errors))
        label = f"{cluster.key.label}: error against input, {used} case(s)"
        cluster.error_plot = error_scatter_svg(x, error, np.concatenate(nonfinite), label)
        plotted += 1
    return plotted

"""Turning case records into what the report shows: device columns, the support matrix, per-op
coverage and error, the failure list, expected failures and the diff against a baseline.

Everything here is plain data so it can be tested without rendering HTML. One pass over the
cases aggregates passing records (a nightly run has ~100k of them); only failures are kept one by
one, and those are capped per op and device.
"""

from __future__ import annotations

import heapq
import json
import math
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from reports.expectations import Expectation
from reports.load import FAILING_OUTCOMES, ResultsFile, as_float

# Cell kinds of the support matrix, most alarming first (the legend and sort order follow this).
CLAIMED_FAIL = "claimed-fail"
NONE_PASS = "none-pass"
SOME_PASS = "some-pass"
ALL_PASS = "all-pass"
NOT_CLAIMED = "not-claimed"
NOT_RUN = "not-run"
CELL_KINDS = (CLAIMED_FAIL, NONE_PASS, SOME_PASS, ALL_PASS, NOT_CLAIMED, NOT_RUN)
CELL_MARKS = {
    CLAIMED_FAIL: "‼",
    NONE_PASS: "✗",
    SOME_PASS: "◐",
    ALL_PASS: "✓",
    NOT_CLAIMED: "–",
    NOT_RUN: "·",
}
CELL_LABELS = {
    CLAIMED_FAIL: "claimed supported, but fails",
    NONE_PASS: "no case passes",
    SOME_PASS: "some cases pass",
    ALL_PASS: "every case passes",
    NOT_CLAIMED: "not claimed (backend declines)",
    NOT_RUN: "not run",
}
CELL_EXPLANATIONS = {
    CLAIMED_FAIL: "The backend's supports_op said yes, yet at least one case failed, crashed, timed out "
    "or errored. A program using ggml would run this op on the device and get wrong results.",
    NONE_PASS: "Cases ran and none passed (the device could not say beforehand whether it supports them).",
    SOME_PASS: "Some cases passed; others failed or were declined by the backend.",
    ALL_PASS: "Every case ran and passed.",
    NOT_CLAIMED: "The backend declined every case (supports_op said no); ggml falls back to another device.",
    NOT_RUN: "No case of this op and type ran on this device.",
}

# A baseline error ratio below this counts as this much when looking for 2x growth: otherwise an
# op measured at exactly 0 last time would be flagged for any rounding at all.
ERROR_GROWTH_FACTOR = 2.0
ERROR_GROWTH_FLOOR = 0.01

DTYPE_ORDER = ("f32", "f16", "bf16", "i32", "i16", "i8")


def device_name(spec: str) -> str:
    """``ggml:CANN0`` -> ``CANN0``; a spec without a colon is its own name."""
    return spec.split(":", 1)[1] if ":" in spec else spec


def dtype_key(dtypes: Any) -> str:
    """A compact type label for the matrix: the first input's type, plus the output's when it differs."""
    if not isinstance(dtypes, dict) or not dtypes:
        return "?"
    dst = dtypes.get("dst")
    src0 = dtypes.get("src0")
    if src0 is None:
        src0 = next((value for key, value in dtypes.items() if key != "dst"), None)
    if src0 is None:
        return str(dst)
    if dst is None or dst == src0:
        return str(src0)
    return f"{src0}→{dst}"


def _dtype_sort_key(key: str) -> tuple[int, str]:
    first = key.split("→", 1)[0]
    return (DTYPE_ORDER.index(first) if first in DTYPE_ORDER else len(DTYPE_ORDER), key)


def case_key(case: dict[str, Any]) -> tuple[str, str]:
    """How a case is matched across runs: its identity string and the device spec."""
    return (case["case_id"], case["device"])


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
        name = self.inventory.get("name")
        return name if isinstance(name, str) and name else device_name(self.spec)

    @property
    def backend_reg_name(self) -> str:
        backend = self.inventory.get("backend")
        if isinstance(backend, str) and backend:
            return backend
        return self.name.rstrip("0123456789") or self.name


@dataclass
class CellStats:
    """Counts for one support-matrix cell (op x type x device)."""

    total: int = 0
    passed: int = 0
    failed: int = 0  # fail, crash, timeout or error
    unsupported: int = 0
    claimed_failing: int = 0  # failed although supports_op said yes
    known: int = 0  # failures an expectation explains

    def add(self, case: dict[str, Any], known: bool) -> None:
        self.total += 1
        outcome = case["outcome"]
        if outcome == "pass":
            self.passed += 1
        elif outcome == "unsupported":
            self.unsupported += 1
        else:
            self.failed += 1
            if case.get("supported") is True:
                self.claimed_failing += 1
            if known:
                self.known += 1

    @property
    def ran(self) -> int:
        return self.total - self.unsupported

    @property
    def kind(self) -> str:
        return classify_cell(self)

    def describe(self) -> str:
        parts = [f"{self.passed} pass", f"{self.failed} fail"]
        if self.unsupported:
            parts.append(f"{self.unsupported} not claimed")
        if self.claimed_failing:
            parts.append(f"{self.claimed_failing} claimed-supported failures")
        if self.known:
            parts.append(f"{self.known} known")
        return ", ".join(parts)


def classify_cell(stats: CellStats | None) -> str:
    """The support-matrix mark for a cell; ``None`` (no records) is "not run"."""
    if stats is None or stats.total == 0:
        return NOT_RUN
    if stats.claimed_failing:
        return CLAIMED_FAIL
    if stats.ran == 0:
        return NOT_CLAIMED
    if stats.passed == stats.total:
        return ALL_PASS
    if stats.passed == 0 and stats.failed:
        return NONE_PASS
    return SOME_PASS


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

    @property
    def range_text(self) -> str:
        if self.low is None or self.high is None:
            return ""
        return f"{_fmt_number(self.low)} … {_fmt_number(self.high)}"


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
    worst_ratio: float | None = None  # worst error_ratio over cases that ran
    worst_passing_ratio: float | None = None
    worst_case_id: str = ""


@dataclass
class OpSummary:
    op: str
    per_device: dict[str, OpDeviceStats] = field(default_factory=dict)
    coverage: dict[str, Coverage] = field(default_factory=dict)

    @property
    def cases(self) -> int:
        return sum(stats.cases for stats in self.per_device.values())

    @property
    def worst_ratio(self) -> float | None:
        ratios = [s.worst_ratio for s in self.per_device.values() if s.worst_ratio is not None]
        return max(ratios) if ratios else None


@dataclass
class FailureItem:
    case: dict[str, Any]
    column: str
    artefact_href: str | None
    expectation: Expectation | None = None
    source: ResultsFile | None = field(default=None, repr=False)  # the file its artefact path is relative to

    @property
    def error_ratio(self) -> float | None:
        metrics = self.case.get("metrics")
        return as_float(metrics.get("error_ratio")) if isinstance(metrics, dict) else None


@dataclass
class FailureGroup:
    op: str
    column: str
    shown: list[FailureItem] = field(default_factory=list)
    not_shown: int = 0
    heap: list[tuple[float, int, FailureItem]] = field(default_factory=list, repr=False)

    @property
    def total(self) -> int:
        return len(self.shown) + self.not_shown


@dataclass
class DeviceSummary:
    column: DeviceColumn
    counts: Counter[str] = field(default_factory=Counter)
    known: int = 0
    claimed_failing: int = 0
    device_seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def ran(self) -> int:
        return self.total - self.counts["unsupported"]

    @property
    def failing(self) -> int:
        return sum(self.counts[outcome] for outcome in FAILING_OUTCOMES)

    @property
    def unexpected_failures(self) -> int:
        return self.failing - self.known

    @property
    def pass_rate(self) -> float | None:
        return self.counts["pass"] / self.ran if self.ran else None


@dataclass
class RunInfo:
    """One results file: where it came from and whether it is complete."""

    results: ResultsFile
    started: str | None
    ended: str | None
    wall_seconds: float | None
    device_seconds: float

    @property
    def path(self) -> str:
        return str(self.results.path)


@dataclass
class DiffEntry:
    case_id: str
    device: str
    op: str
    before: str
    after: str
    detail: str = ""


@dataclass
class ErrorGrowth:
    op: str
    device: str
    before: float
    after: float

    @property
    def factor(self) -> float:
        return self.after / max(self.before, ERROR_GROWTH_FLOOR)


@dataclass
class BaselineDiff:
    baseline_paths: list[str]
    compared: int = 0
    only_current: int = 0
    only_baseline: int = 0
    new_failures: list[DiffEntry] = field(default_factory=list)
    fixed: list[DiffEntry] = field(default_factory=list)
    newly_supported: list[DiffEntry] = field(default_factory=list)
    newly_unsupported: list[DiffEntry] = field(default_factory=list)
    error_growth: list[ErrorGrowth] = field(default_factory=list)

    def categories(self) -> list[tuple[str, str, list[DiffEntry]]]:
        return [
            ("new-failures", "New failures (passed or was declined in the baseline)", self.new_failures),
            ("fixed", "Fixed (failed in the baseline, passes now)", self.fixed),
            ("newly-supported", "Newly supported (declined in the baseline, claimed now)",
             self.newly_supported),
            ("newly-unsupported", "Newly unsupported (claimed in the baseline, declined now)",
             self.newly_unsupported),
        ]


@dataclass
class ReportData:
    files: list[ResultsFile]
    runs: list[RunInfo]
    columns: list[DeviceColumn]
    device_summaries: dict[str, DeviceSummary]
    matrix: dict[tuple[str, str], dict[str, CellStats]]  # (op, dtype key) -> column -> stats
    ops: dict[str, OpSummary]
    failures: list[FailureGroup]  # unexpected failures, grouped by op and device
    known_failures: list[FailureGroup]
    expectations: list[Expectation]
    baseline: BaselineDiff | None
    total_cases: int

    @property
    def is_partial(self) -> bool:
        return any(run.results.is_partial for run in self.runs)

    def matrix_rows(self) -> list[tuple[str, str, dict[str, CellStats]]]:
        ordered = sorted(self.matrix.items(), key=lambda item: (item[0][0], _dtype_sort_key(item[0][1])))
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

    @property
    def stale_expectations(self) -> list[Expectation]:
        return [e for e in self.expectations if e.is_stale]

    def closest_to_bound(self, limit: int = 15) -> list[tuple[str, str, OpDeviceStats]]:
        """Ops whose passing cases come nearest their tolerance (worst passing error ratio)."""
        rows = [
            (op.op, column, stats)
            for op in self.ops.values()
            for column, stats in op.per_device.items()
            if stats.worst_passing_ratio is not None
        ]
        rows.sort(key=lambda row: -(row[2].worst_passing_ratio or 0.0))
        return rows[:limit]


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


def _run_info(results: ResultsFile) -> RunInfo:
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
    )


def device_columns(files: list[ResultsFile]) -> list[DeviceColumn]:
    """One column per device spec in first-seen order; per host too when one spec ran on several."""
    hosts_by_spec: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for results in files:
        inventories: dict[tuple[str, str], dict[str, Any]] = {}
        for header in results.headers:
            host = str(header.get("host") or "?")
            for inventory in header.get("devices") or []:
                if isinstance(inventory, dict) and isinstance(inventory.get("spec"), str):
                    inventories.setdefault((inventory["spec"], host), inventory)
        ran = {(case["device"], _host_of(results, case)) for case in results.cases}
        # Cases first (their order), then devices a header lists that ran nothing ("not run" columns).
        for spec, host in sorted(ran) + sorted(set(inventories) - ran):
            hosts_by_spec[spec].setdefault(host, inventories.get((spec, host)) or {})

    columns: dict[str, DeviceColumn] = {}
    for spec, hosts in hosts_by_spec.items():
        for host, inventory in hosts.items():
            key = spec if len(hosts) == 1 else f"{spec}@{host}"
            columns[key] = DeviceColumn(key=key, spec=spec, host=host, inventory=inventory)
    return list(columns.values())


def _host_of(results: ResultsFile, case: dict[str, Any]) -> str:
    header = results.header_for(case)
    return str((header or {}).get("host") or "?")


def _column_key(results: ResultsFile, case: dict[str, Any], multi_host_specs: set[str]) -> str:
    spec = case["device"]
    return f"{spec}@{_host_of(results, case)}" if spec in multi_host_specs else spec


def _artefact_href(results: ResultsFile, case: dict[str, Any], out_dir: str | None) -> str | None:
    artefact = case.get("artefact")
    if not isinstance(artefact, str) or not artefact or ":" in artefact.split("/", 1)[0]:
        return None  # only plain relative paths: never a "javascript:" or other scheme
    target = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(results.path)), artefact))
    if out_dir is None:
        return target
    return os.path.relpath(target, out_dir).replace(os.sep, "/")


def analyse(
    files: list[ResultsFile],
    expectations: list[Expectation] | None = None,
    baseline_files: list[ResultsFile] | None = None,
    out_dir: str | None = None,
    max_failures_per_group: int = 25,
) -> ReportData:
    """Aggregate results files (and optionally expectations and a baseline) into report data."""
    expectations = expectations or []
    for expectation in expectations:  # the counts are per analysis, not per loaded file
        expectation.matched_failures = expectation.matched_unsupported = expectation.matched_passing = 0
    columns = device_columns(files)
    multi_host_specs = {c.spec for c in columns if c.key != c.spec}
    summaries = {c.key: DeviceSummary(column=c) for c in columns}
    matrix: dict[tuple[str, str], dict[str, CellStats]] = defaultdict(dict)
    ops: dict[str, OpSummary] = {}
    failure_groups: dict[tuple[str, str], FailureGroup] = {}
    known_groups: dict[tuple[str, str], FailureGroup] = {}
    passing_for_stale_check: list[dict[str, Any]] = []
    total = 0

    for results in files:
        for case in results.cases:
            total += 1
            column = _column_key(results, case, multi_host_specs)
            outcome = case["outcome"]
            op_name = case["op"]

            expectation = None
            if outcome != "pass":
                expectation = next((e for e in expectations if e.matches(case)), None)
                if expectation is not None:
                    if outcome == "unsupported":
                        expectation.matched_unsupported += 1
                    else:
                        expectation.matched_failures += 1
            elif expectations:
                passing_for_stale_check.append(case)
            is_failure = outcome in FAILING_OUTCOMES
            known = is_failure and expectation is not None

            summary = summaries.get(column)
            if summary is None:  # a device the headers did not list
                device_column = DeviceColumn(key=column, spec=case["device"], host="?", inventory={})
                columns.append(device_column)
                summary = summaries[column] = DeviceSummary(column=device_column)
            summary.counts[outcome] += 1
            summary.device_seconds += as_float(case.get("duration_s")) or 0.0
            if known:
                summary.known += 1
            if is_failure and case.get("supported") is True:
                summary.claimed_failing += 1

            cells = matrix[(op_name, dtype_key(case.get("dtypes")))]
            cell = cells.get(column)
            if cell is None:
                cell = cells[column] = CellStats()
            cell.add(case, known)

            op = ops.get(op_name)
            if op is None:
                op = ops[op_name] = OpSummary(op=op_name)
            _add_to_op(op, column, case, known)

            if is_failure:
                groups = known_groups if known else failure_groups
                group = groups.get((op_name, column))
                if group is None:
                    group = groups[(op_name, column)] = FailureGroup(op=op_name, column=column)
                # Keep the worst N (a min-heap on severity), not the first N the file happens to hold.
                item = FailureItem(case, column, None, expectation, source=results)
                entry = (_severity(item), total, item)
                if len(group.heap) < max_failures_per_group:
                    heapq.heappush(group.heap, entry)
                else:
                    heapq.heappushpop(group.heap, entry)
                    group.not_shown += 1

    # Only entries that explained no failure need the passing cases: "stale, or fixed?"
    for expectation in expectations:
        if expectation.is_stale:
            expectation.matched_passing = sum(map(expectation.matches, passing_for_stale_check))

    for groups in (failure_groups, known_groups):
        for group in groups.values():
            group.shown = [item for _, _, item in sorted(group.heap, key=lambda entry: (-entry[0], entry[1]))]
            group.heap = []
            for item in group.shown:
                if item.source is not None:  # links only for the failures actually listed
                    item.artefact_href = _artefact_href(item.source, item.case, out_dir)

    baseline = diff_against_baseline(files, baseline_files) if baseline_files is not None else None
    return ReportData(
        files=files,
        runs=[_run_info(results) for results in files],
        columns=columns,
        device_summaries=summaries,
        matrix=dict(matrix),
        ops=dict(sorted(ops.items())),
        failures=[failure_groups[k] for k in sorted(failure_groups)],
        known_failures=[known_groups[k] for k in sorted(known_groups)],
        expectations=expectations,
        baseline=baseline,
        total_cases=total,
    )


def _add_to_op(op: OpSummary, column: str, case: dict[str, Any], known: bool) -> None:
    stats = op.per_device.get(column)
    if stats is None:
        stats = op.per_device[column] = OpDeviceStats()
    stats.cases += 1
    outcome = case["outcome"]
    if outcome != "unsupported":
        stats.ran += 1
        if outcome == "pass":
            stats.passed += 1
        else:
            stats.failed += 1
            stats.known += known
        metrics = case.get("metrics")
        ratio = as_float(metrics.get("error_ratio")) if isinstance(metrics, dict) else None
        if ratio is not None:
            if math.isnan(ratio):
                ratio = math.inf  # a NaN error is as bad as it gets
            if stats.worst_ratio is None or ratio > stats.worst_ratio:
                stats.worst_ratio = ratio
                stats.worst_case_id = case["case_id"]
            if outcome == "pass" and (stats.worst_passing_ratio is None or ratio > stats.worst_passing_ratio):
                stats.worst_passing_ratio = ratio

    params = case.get("params")
    if isinstance(params, dict):
        for name, value in params.items():
            coverage = op.coverage.get(name)
            if coverage is None:
                coverage = op.coverage[name] = Coverage()
            coverage.add(value)
    derived = (("type", dtype_key(case.get("dtypes"))), ("layout", _layout_text(case.get("layout"))))
    for name, value in derived:
        if value:
            coverage = op.coverage.get(name)
            if coverage is None:
                coverage = op.coverage[name] = Coverage()
            coverage.add(value)


def _severity(item: FailureItem) -> float:
    ratio = item.error_ratio
    return math.inf if ratio is None or math.isnan(ratio) else ratio  # crashes (no ratio) rank first


def _layout_text(layout: Any) -> str:
    if not isinstance(layout, dict) or not layout:
        return ""
    if all(value == "contiguous" for value in layout.values()):
        return "contiguous"
    return ";".join(f"{name}:{value}" for name, value in sorted(layout.items()) if value != "contiguous")


def _index(files: list[ResultsFile]) -> dict[tuple[str, str], dict[str, Any]]:
    index: dict[tuple[str, str], dict[str, Any]] = {}
    for results in files:
        for case in results.cases:
            index[case_key(case)] = case  # a rerun of the same case: the later record wins
    return index


def _is_declined(case: dict[str, Any]) -> bool:
    return case["outcome"] == "unsupported" or case.get("supported") is False


def _worst_passing_by_op(files: list[ResultsFile]) -> dict[tuple[str, str], float]:
    worst: dict[tuple[str, str], float] = {}
    for results in files:
        for case in results.cases:
            if case["outcome"] != "pass" or not isinstance(case.get("metrics"), dict):
                continue
            ratio = as_float(case["metrics"].get("error_ratio"))
            if ratio is None or math.isnan(ratio):
                continue
            key = (case["op"], case["device"])
            if ratio > worst.get(key, -1.0):
                worst[key] = ratio
    return worst


def diff_against_baseline(files: list[ResultsFile], baseline_files: list[ResultsFile]) -> BaselineDiff:
    """Compare case by case (case_id + device spec) and, for error growth, op by op."""
    diff = BaselineDiff(baseline_paths=[str(f.path) for f in baseline_files])
    before = _index(baseline_files)
    after = _index(files)
    for key, now in after.items():
        old = before.get(key)
        if old is None:
            diff.only_current += 1
            continue
        diff.compared += 1
        entry = DiffEntry(
            case_id=now["case_id"],
            device=now["device"],
            op=now["op"],
            before=old["outcome"],
            after=now["outcome"],
            detail=str(now.get("message") or ""),
        )
        failing_now = now["outcome"] in FAILING_OUTCOMES
        failing_before = old["outcome"] in FAILING_OUTCOMES
        if failing_now and not failing_before:
            diff.new_failures.append(entry)
        elif failing_before and now["outcome"] == "pass":
            diff.fixed.append(entry)
        if _is_declined(old) and not _is_declined(now):
            diff.newly_supported.append(entry)
        elif not _is_declined(old) and _is_declined(now):
            diff.newly_unsupported.append(entry)
    diff.only_baseline = sum(1 for key in before if key not in after)
    for entries in (diff.new_failures, diff.fixed, diff.newly_supported, diff.newly_unsupported):
        entries.sort(key=lambda entry: (entry.op, entry.device, entry.case_id))

    worst_before = _worst_passing_by_op(baseline_files)
    worst_after = _worst_passing_by_op(files)
    for (op, device), now_ratio in sorted(worst_after.items()):
        old_ratio = worst_before.get((op, device))
        if old_ratio is None:
            continue
        if now_ratio > ERROR_GROWTH_FACTOR * max(old_ratio, ERROR_GROWTH_FLOOR):
            diff.error_growth.append(ErrorGrowth(op=op, device=device, before=old_ratio, after=now_ratio))
    diff.error_growth.sort(key=lambda growth: -growth.factor)
    return diff


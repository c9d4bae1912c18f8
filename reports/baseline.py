"""Comparing a run with baseline runs by what they found, not by case ids.

Hypothesis draws other cases every night, so two nightly runs share few case ids (about 20 % were
measured). What does carry over is the *failure clusters* (op, device, dtype signature, kind of
failure; :mod:`reports.clusters`) and the per-op figures: pass rate and worst error ratio. This
module compares those, and the support matrix's cells:

* clusters new in this run, gone since the baseline, and grown (more cases, or a worse ratio);
* per op and device: pass rate and worst error ratio now against the pooled baseline runs, with the
  pass rate of each baseline run for the plot; a fall in pass rate is flagged when it exceeds the
  noise of two binomial samples, a worst passing ratio when it grew more than 2×;
* support-matrix cells whose mark changed (newly supported, newly declined, newly failing...); a cell
  whose every failure a known bug explains is "known only" on either side, not "claimed supported,
  but fails";
* whether the baseline is partial (a baseline run that was cut off reads as if it had not run what
  it missed).

Several baseline files of one run (several hosts) pool into that run; several runs give the plot
its history, oldest first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from reports.clusters import FailureKind, dtype_signature, failure_kind
from reports.matrix import CLAIMED_FAIL, NOT_CLAIMED, CellStats, classify_cell, dtype_key
from results.load import FAILING_OUTCOMES, ResultsFile, as_float
from results.outcome import Outcome

# A baseline error ratio below this counts as this much when looking for 2x growth: otherwise an
# op measured at exactly 0 last time would be flagged for any rounding at all.
ERROR_GROWTH_FACTOR = 2.0
ERROR_GROWTH_FLOOR = 0.01
# A fall in pass rate is flagged beyond this many standard errors of the difference (and at least
# half a percentage point): random drawing moves pass rates a little every night.
PASS_RATE_SIGMAS = 2.0
PASS_RATE_MIN_DROP = 0.005


@dataclass
class _Figures:
    """What one op on one device (or one of its matrix cells) did in a run."""

    total: int = 0
    passed: int = 0
    ran: int = 0
    claimed_failing: int = 0
    known: int = 0  # failures a known bug the harness matched explains (the record's ``expected``)
    claimed_failing_known: int = 0
    worst: float | None = None  # worst error ratio of any case that ran (a crash counts as inf)
    worst_passing: float | None = None

    def add(self, outcome: str, ratio: float | None, claimed: bool, known: bool = False) -> None:
        self.total += 1
        if outcome == Outcome.UNSUPPORTED:
            return
        self.ran += 1
        if outcome == Outcome.PASS:
            self.passed += 1
        else:
            self.claimed_failing += claimed
            self.known += known
            self.claimed_failing_known += claimed and known
        if ratio is None:
            if outcome == Outcome.PASS:
                return
            ratio = math.inf
        elif ratio != ratio:  # NaN
            ratio = math.inf
        if self.worst is None or ratio > self.worst:
            self.worst = ratio
        if outcome == Outcome.PASS and (self.worst_passing is None or ratio > self.worst_passing):
            self.worst_passing = ratio

    def merge(self, other: _Figures) -> None:
        self.total += other.total
        self.passed += other.passed
        self.ran += other.ran
        self.claimed_failing += other.claimed_failing
        self.known += other.known
        self.claimed_failing_known += other.claimed_failing_known
        for name in ("worst", "worst_passing"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if theirs is not None and (mine is None or theirs > mine):
                setattr(self, name, theirs)

    @property
    def rate(self) -> float | None:
        return self.passed / self.ran if self.ran else None

    @property
    def cell_kind(self) -> str:
        return classify_cell(CellStats(total=self.total, passed=self.passed, failed=self.ran - self.passed,
                                       unsupported=self.total - self.ran, claimed_failing=self.claimed_failing,
                                       known=self.known, claimed_failing_known=self.claimed_failing_known))


@dataclass
class _ClusterFigures:
    op: str
    device: str
    signature: str
    kind: FailureKind
    detail: str
    count: int = 0
    worst: float | None = None


@dataclass
class _Summary:
    cells: dict[tuple[str, str, str], _Figures] = field(default_factory=dict)  # (op, spec, dtype key)
    ops: dict[tuple[str, str], _Figures] = field(default_factory=dict)  # (op, spec): the cells merged
    per_run: dict[tuple[str, str, str], list[int]] = field(default_factory=dict)  # (run, op, spec): passed, ran
    clusters: dict[tuple[str, str, str, str, str], _ClusterFigures] = field(default_factory=dict)


def _summarise(files: list[ResultsFile], run_of: dict[int, str] | None = None) -> _Summary:
    """One pass over the cases: cells, per-run pass counts (when there are several runs), clusters."""
    summary = _Summary()
    cells = summary.cells
    several_runs = run_of is not None and len(set(run_of.values())) > 1
    for index, results in enumerate(files):
        run = run_of.get(index, "") if run_of else ""
        for case in results.cases:
            outcome = case["outcome"]
            op, spec = case["op"], case["device"]
            metrics = case.get("metrics")
            ratio = as_float(metrics.get("error_ratio")) if isinstance(metrics, dict) else None
            key = (op, spec, dtype_key(case.get("dtypes")))
            figures = cells.get(key)
            if figures is None:
                figures = cells[key] = _Figures()
            known = isinstance(case.get("expected"), dict)
            figures.add(outcome, ratio, case.get("supported") is True, known)
            if several_runs and outcome != Outcome.UNSUPPORTED:
                counts = summary.per_run.setdefault((run, op, spec), [0, 0])
                counts[0] += outcome == Outcome.PASS
                counts[1] += 1
            if outcome in FAILING_OUTCOMES and not known:
                kind, detail = failure_kind(case)
                signature = dtype_signature(case.get("dtypes"))
                match = (op, spec, signature, kind.name, detail)
                cluster = summary.clusters.get(match)
                if cluster is None:
                    cluster = summary.clusters[match] = _ClusterFigures(op, spec, signature, kind, detail)
                cluster.count += 1
                if ratio is not None:
                    ratio = math.inf if math.isnan(ratio) else ratio
                    cluster.worst = ratio if cluster.worst is None else max(cluster.worst, ratio)
    for (op, spec, _), figures in cells.items():
        merged = summary.ops.get((op, spec))
        if merged is None:
            merged = summary.ops[(op, spec)] = _Figures()
        merged.merge(figures)
    if run_of is not None and not several_runs:  # one run: its figures are the pooled ones
        run = next(iter(run_of.values()), "")
        summary.per_run = {(run, op, spec): [f.passed, f.ran] for (op, spec), f in summary.ops.items()}
    return summary


@dataclass
class ClusterChange:
    op: str
    device: str
    signature: str
    kind: str
    count_before: int
    count_now: int
    worst_before: float | None
    worst_now: float | None
    status: str  # "new", "gone", "grew"
    still_ran: bool = True  # for "gone": the op/device/type still ran in this run (fixed?) or not


@dataclass
class OpTrend:
    op: str
    device: str
    series: list[tuple[str, float | None]]  # (run label, pass rate) per baseline run, then this run
    passed_before: int
    ran_before: int
    passed_now: int
    ran_now: int
    worst_before: float | None
    worst_now: float | None
    worst_passing_before: float | None
    worst_passing_now: float | None
    pass_rate_fell: bool = False
    error_grew: bool = False

    @property
    def rate_before(self) -> float | None:
        return self.passed_before / self.ran_before if self.ran_before else None

    @property
    def rate_now(self) -> float | None:
        return self.passed_now / self.ran_now if self.ran_now else None

    @property
    def growth(self) -> float | None:
        """How much the worst passing error ratio grew (the baseline floored at ERROR_GROWTH_FLOOR)."""
        if self.worst_passing_before is None or self.worst_passing_now is None:
            return None
        return self.worst_passing_now / max(self.worst_passing_before, ERROR_GROWTH_FLOOR)

    @property
    def flagged(self) -> bool:
        return self.pass_rate_fell or self.error_grew


@dataclass
class CellChange:
    op: str
    dtype: str
    device: str
    before: str  # cell kinds (reports.analysis.CELL_KINDS)
    now: str


@dataclass
class BaselineDiff:
    baseline_paths: list[str]
    baseline_runs: list[str]  # run labels, oldest first
    new_clusters: list[ClusterChange] = field(default_factory=list)
    gone_clusters: list[ClusterChange] = field(default_factory=list)
    grown_clusters: list[ClusterChange] = field(default_factory=list)
    op_trends: list[OpTrend] = field(default_factory=list)
    cell_changes: list[CellChange] = field(default_factory=list)
    # why the baseline is partial, one line per file that is ("path: reason"); empty when complete
    partial_reasons: list[str] = field(default_factory=list)
    cells_not_in_baseline: int = 0  # op × type × device cells of this run the baseline has no case of

    @property
    def is_partial(self) -> bool:
        return bool(self.partial_reasons)

    @property
    def flagged_trends(self) -> list[OpTrend]:
        return [trend for trend in self.op_trends if trend.flagged]

    @property
    def error_growth(self) -> list[OpTrend]:
        return sorted((t for t in self.op_trends if t.error_grew), key=lambda t: -(t.growth or 0.0))

    @property
    def pass_rate_falls(self) -> list[OpTrend]:
        return [t for t in self.op_trends if t.pass_rate_fell]


def _parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _runs(files: list[ResultsFile]) -> tuple[dict[int, str], list[str]]:
    """Label each baseline file with its run (run id and start date), runs ordered oldest first."""
    started: dict[str, datetime] = {}
    run_of: dict[int, str] = {}
    for index, results in enumerate(files):
        header = results.headers[0] if results.headers else {}
        run_id = str(header.get("run_id") or results.path.name)
        moments = [t for t in (_parse_time(h.get("started")) for h in results.headers) if t]
        first = min(moments) if moments else datetime.max.replace(tzinfo=UTC)
        label = f"{run_id} ({first:%Y-%m-%d})" if moments else run_id
        run_of[index] = label
        started[label] = min(started.get(label, first), first)
    return run_of, sorted(started, key=lambda label: (started[label], label))


def _rate_fell(before: _Figures, now: _Figures) -> bool:
    if not before.ran or not now.ran:
        return False
    rate_before, rate_now = before.passed / before.ran, now.passed / now.ran
    drop = rate_before - rate_now
    pooled = (before.passed + now.passed) / (before.ran + now.ran)
    noise = PASS_RATE_SIGMAS * math.sqrt(max(pooled * (1 - pooled), 0.0) * (1 / before.ran + 1 / now.ran))
    return drop > max(noise, PASS_RATE_MIN_DROP)


def diff_against_baseline(files: list[ResultsFile], baseline_files: list[ResultsFile]) -> BaselineDiff:
    """Compare this run's clusters, per-op figures and matrix cells with the baseline runs'."""
    run_of, run_labels = _runs(baseline_files)
    before = _summarise(baseline_files, run_of)
    now = _summarise(files)
    partial = [f"{f.path}: {reason}" for f in baseline_files for reason in f.partial_reasons()]
    diff = BaselineDiff(baseline_paths=[str(f.path) for f in baseline_files], baseline_runs=run_labels,
                        partial_reasons=partial)

    ran_now = {(op, spec) for (op, spec), figures in now.ops.items() if figures.ran}
    for match, figures in now.clusters.items():
        old = before.clusters.get(match)
        change = ClusterChange(figures.op, figures.device, figures.signature,
                               figures.kind.value + (f" {figures.detail}" if figures.detail else ""),
                               old.count if old else 0, figures.count, old.worst if old else None, figures.worst,
                               "new" if old is None else "grew")
        if old is None:
            diff.new_clusters.append(change)
        elif figures.count > old.count or (figures.worst or 0.0) > ERROR_GROWTH_FACTOR * (old.worst or 0.0) > 0:
            diff.grown_clusters.append(change)
    for match, old in before.clusters.items():
        if match not in now.clusters:
            diff.gone_clusters.append(ClusterChange(
                old.op, old.device, old.signature, old.kind.value + (f" {old.detail}" if old.detail else ""),
                old.count, 0, old.worst, None, "gone", still_ran=(old.op, old.device) in ran_now))
    for changes in (diff.new_clusters, diff.gone_clusters, diff.grown_clusters):
        changes.sort(key=lambda c: (c.op, c.device, c.signature, c.kind))

    for (op, spec), op_now in sorted(now.ops.items()):
        op_before = before.ops.get((op, spec))
        if op_before is None or not op_before.ran:
            continue
        series: list[tuple[str, float | None]] = []
        for label in run_labels:
            passed, ran = before.per_run.get((label, op, spec), (0, 0))
            series.append((label, passed / ran if ran else None))
        series.append(("this run", op_now.rate))
        trend = OpTrend(op, spec, series, op_before.passed, op_before.ran, op_now.passed, op_now.ran,
                        op_before.worst, op_now.worst, op_before.worst_passing, op_now.worst_passing)
        trend.pass_rate_fell = _rate_fell(op_before, op_now)
        trend.error_grew = (trend.growth or 0.0) > ERROR_GROWTH_FACTOR
        diff.op_trends.append(trend)
    diff.op_trends.sort(key=lambda t: (not t.flagged, t.op, t.device))

    for key in sorted(now.cells):
        old_cell = before.cells.get(key)
        diff.cells_not_in_baseline += old_cell is None
        kind_before = old_cell.cell_kind if old_cell is not None else classify_cell(None)
        kind_now = now.cells[key].cell_kind
        # support changes only: pass/fail mixes move with what was drawn; the clusters cover those
        if kind_before != kind_now and {kind_before, kind_now} & {CLAIMED_FAIL, NOT_CLAIMED}:
            op, spec, dtype = key
            diff.cell_changes.append(CellChange(op, dtype, spec, kind_before, kind_now))
    return diff

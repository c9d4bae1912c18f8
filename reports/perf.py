"""Perf mode in the report: per op, each timed case's device time next to ggml:CPU's, the bytes it
moves and the FLOPs it does, its share of the device's roofline, and regressions against a baseline.

A case record with a ``perf`` block (``conform perf`` or ``conform run --perf``; see
``results/RESULTS.md``) is a row. The baseline runs (``conform report --baseline``) are matched by
device and case id, which fixes the shape, the data and the parameters: a row whose median time is
more than :data:`REGRESSION_FACTOR` times the baseline's is flagged. Each op gets a bar chart of
its rows' times on a log scale, with the ggml:CPU time and the baseline's marked on each bar.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup, escape

from results.load import ResultsFile, as_float, iter_cases

REGRESSION_FACTOR = 1.2  # slower than this times the baseline's median at the same case: a regression
PERF_TEST_PREFIX = "perf::"


@dataclass
class PerfRow:
    op: str
    label: str  # "llama-7b decode attn_q f16"
    case_id: str
    device: str
    outcome: str
    median_s: float | None
    error: str | None = None
    cpu_s: float | None = None
    gb_per_s: float | None = None
    gflop_per_s: float | None = None
    bytes: float | None = None
    flops: float | None = None
    efficiency: float | None = None  # roofline bound ÷ measured time (1 = at the device's peak)
    baseline_s: float | None = None

    @property
    def vs_cpu(self) -> float | None:
        """How many times faster than ggml:CPU (None on the CPU itself, or without both times)."""
        if self.device == "ggml:CPU" or self.cpu_s is None or not self.median_s:
            return None
        return self.cpu_s / self.median_s

    @property
    def vs_baseline(self) -> float | None:
        """This run's time over the baseline's (> 1: slower now)."""
        if self.baseline_s is None or self.median_s is None or self.baseline_s <= 0:
            return None
        return self.median_s / self.baseline_s

    @property
    def regression(self) -> bool:
        ratio = self.vs_baseline
        return ratio is not None and ratio > REGRESSION_FACTOR


@dataclass
class PerfSection:
    ops: dict[str, list[PerfRow]] = field(default_factory=dict)
    charts: dict[str, Markup] = field(default_factory=dict)
    baseline_runs: int = 0

    @property
    def rows(self) -> list[PerfRow]:
        return [row for rows in self.ops.values() for row in rows]

    @property
    def regressions(self) -> list[PerfRow]:
        return [row for row in self.rows if row.regression]

    @property
    def compared(self) -> int:
        return sum(1 for row in self.rows if row.vs_baseline is not None)


def _number(block: dict[str, Any], name: str) -> float | None:
    value = as_float(block.get(name))
    return value if value is not None and math.isfinite(value) else None


def _row(case: dict[str, Any], block: dict[str, Any]) -> PerfRow:
    test_id = case.get("test_id") or ""
    label = test_id[len(PERF_TEST_PREFIX):] if test_id.startswith(PERF_TEST_PREFIX) else str(block.get("role") or "")
    median = _number(block, "median_s")
    roofline = block.get("roofline")
    row = PerfRow(op=case["op"], label=label or case["op"], case_id=case["case_id"], device=case["device"],
                  outcome=case["outcome"], median_s=median,
                  error=str(block["error"]) if "error" in block else (None if median is not None else "no timing"),
                  cpu_s=_number(block, "cpu_median_s"), gb_per_s=_number(block, "gb_per_s"),
                  gflop_per_s=_number(block, "gflop_per_s"), bytes=_number(block, "bytes"),
                  flops=_number(block, "flops"),
                  efficiency=_number(roofline, "efficiency") if isinstance(roofline, dict) else None)
    if row.device == "ggml:CPU":
        row.cpu_s = median
    return row


def _medians(files: Iterable[ResultsFile]) -> dict[tuple[str, str], list[float]]:
    found: dict[tuple[str, str], list[float]] = {}
    for _, case in iter_cases(files):
        block = case.get("perf")
        if isinstance(block, dict):
            median = _number(block, "median_s")
            if median is not None:
                found.setdefault((case["device"], case["case_id"]), []).append(median)
    return found


def build_perf_section(files: list[ResultsFile], baseline_files: list[ResultsFile] | None = None) -> PerfSection | None:
    """The report's perf part, or None when no record was timed."""
    rows: list[PerfRow] = []
    cpu: dict[str, float] = {}
    for _, case in iter_cases(files):
        block = case.get("perf")
        if isinstance(block, dict):
            row = _row(case, block)
            rows.append(row)
            if row.device == "ggml:CPU" and row.median_s is not None:
                cpu[row.case_id] = row.median_s
    if not rows:
        return None
    baseline = _medians(baseline_files or [])
    for row in rows:
        if row.cpu_s is None:  # a record from before the reference was measured: take this run's
            row.cpu_s = cpu.get(row.case_id)
        before = baseline.get((row.device, row.case_id))
        if before:
            row.baseline_s = statistics.median(before)
    section = PerfSection(baseline_runs=len(baseline_files or []))
    for row in sorted(rows, key=lambda r: (r.op, r.label, r.device != "ggml:CPU", r.device)):
        section.ops.setdefault(row.op, []).append(row)
    for op, op_rows in section.ops.items():
        section.charts[op] = perf_chart_svg(op, op_rows)
    return section


# ---- formatting and the chart --------------------------------------------------------------------

def format_seconds(value: float | None) -> str:
    if value is None:
        return "—"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


def format_quantity(value: float | None, unit: str) -> str:
    """1.23 G{unit}, 456 M{unit}...: bytes and FLOPs at a glance."""
    if value is None:
        return "—"
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def perf_chart_svg(op: str, rows: list[PerfRow], width: int = 560) -> Markup:
    """One bar per row: its median time on a log scale; a dark tick at the ggml:CPU time of the same
    case, a dashed one at the baseline's; red bars are regressions, grey rows were not timed."""
    left, right, row_h, top = 236, 12, 16, 4
    plot_w = width - left - right
    times = [t for row in rows for t in (row.median_s, row.cpu_s, row.baseline_s) if t]
    lo = math.floor(math.log10(min(times)) * 2) / 2 - 0.5 if times else -6.0
    hi = math.ceil(math.log10(max(times)) * 2) / 2 + 0.25 if times else 0.0
    height = top + row_h * len(rows) + 22

    def x(seconds: float) -> float:
        return left + (math.log10(seconds) - lo) / (hi - lo) * plot_w

    parts = [f'<svg class="plot perf" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="{escape(op)}: device time per case, log scale">',
             f'<rect class="track" x="{left}" y="{top}" width="{plot_w}" height="{row_h * len(rows)}"/>']
    for index, row in enumerate(rows):
        y = top + index * row_h
        name = f"{row.label} · {row.device}"
        shown = name if len(name) <= 40 else name[:39] + "…"
        parts.append(f'<text x="{left - 4}" y="{y + 11}" text-anchor="end"><title>{escape(name)}</title>'
                     f'{escape(shown)}</text>')
        if row.median_s:
            kind = "over" if row.regression else "ok"
            parts.append(f'<rect class="{kind}" x="{left}" y="{y + 3}" width="{max(1.0, x(row.median_s) - left):.1f}" '
                         f'height="{row_h - 6}"><title>{escape(name)}: {format_seconds(row.median_s)}'
                         f'{_title_extra(row)}</title></rect>')
        else:
            parts.append(f'<text class="none" x="{left + 4}" y="{y + 11}">not timed</text>')
        if row.cpu_s and row.device != "ggml:CPU":
            cx = x(row.cpu_s)
            parts.append(f'<line class="ref" x1="{cx:.1f}" y1="{y + 1}" x2="{cx:.1f}" y2="{y + row_h - 1}">'
                         f'<title>ggml:CPU: {format_seconds(row.cpu_s)}</title></line>')
        if row.baseline_s:
            bx = x(row.baseline_s)
            parts.append(f'<line class="base" x1="{bx:.1f}" y1="{y + 1}" x2="{bx:.1f}" y2="{y + row_h - 1}">'
                         f'<title>baseline: {format_seconds(row.baseline_s)}</title></line>')
    axis_y = top + row_h * len(rows)
    for power in range(math.ceil(lo), math.floor(hi) + 1):
        px = x(10.0**power)
        parts.append(f'<line class="tick" x1="{px:.1f}" y1="{axis_y}" x2="{px:.1f}" y2="{axis_y + 4}"/>'
                     f'<text x="{px:.1f}" y="{axis_y + 15}" text-anchor="middle">{format_seconds(10.0**power)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def _title_extra(row: PerfRow) -> str:
    extra = []
    if row.vs_cpu is not None:
        extra.append(f"{row.vs_cpu:.3g}× ggml:CPU")
    if row.vs_baseline is not None:
        extra.append(f"{row.vs_baseline:.3g}× the baseline's time")
    return (" (" + ", ".join(extra) + ")") if extra else ""

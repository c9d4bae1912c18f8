"""The HTML report: one self-contained file (inline CSS and SVG, no scripts, no external assets).

All text that comes from results or expectations goes through jinja2 autoescaping, so a parameter
or message holding markup renders as text. The page has no JavaScript at all: it opens offline,
in any browser, and nothing in a results file can make it run code.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup, escape

from reports.analysis import (
    CELL_EXPLANATIONS,
    CELL_KINDS,
    CELL_LABELS,
    CELL_MARKS,
    CLAIMED_FAIL,
    KNOWN_ONLY,
    ReportData,
    analyse,
    attach_error_plots,
    classify_cell,
    describes_cpu,
)
from reports.baseline import ERROR_GROWTH_FACTOR, ERROR_GROWTH_FLOOR, PASS_RATE_SIGMAS
from reports.expectations import load_expectations
from reports.model_html import load_model_results
from reports.perf import REGRESSION_FACTOR, PerfSection, build_perf_section, format_quantity, format_seconds
from reports.plots import pass_rate_svg, ratio_histogram_svg
from results.load import (
    ResultsError,
    as_float,
    check_outputs_are_not_inputs,
    distinct_paths,
    drop_duplicate_runs,
    load_many,
    paused_gc,
)
from results.schema import OUTCOMES

# Next to this module (not in a subfolder) so pyproject's package-data "*.j2" ships it.
TEMPLATE_DIR = Path(__file__).parent

# The error-ratio bars use a log scale: ratios span decades (1e-3 for an exact op, 1e3 for a
# broken one) and the interesting point, the bound at 1, must sit at a fixed place.
BAR_WIDTH = 200
BAR_LOG_MIN = -3.0
BAR_LOG_MAX = 2.0
TICK_LABELS = {-3: "0.001", -2: "0.01", -1: "0.1", 0: "1"}
METRIC_ORDER = ("error_ratio", "max_abs", "max_rel", "max_ulp", "nmse", "n_bad", "n", "nonfinite_mismatch",
                "worst_index")
# Metrics that are text, not figures: "detail" repeats the message, which the card shows already.
METRIC_TEXT = ("detail",)


def bar_position(ratio: float) -> float:
    """x (pixels) of an error ratio on the log-scale bar; the bound (ratio 1) is at 60%."""
    if ratio <= 0 or math.isnan(ratio):
        return 0.0
    if math.isinf(ratio):
        return float(BAR_WIDTH)
    fraction = (math.log10(ratio) - BAR_LOG_MIN) / (BAR_LOG_MAX - BAR_LOG_MIN)
    return round(min(1.0, max(0.0, fraction)) * BAR_WIDTH, 1)


def ratio_class(ratio: float | None) -> str:
    if ratio is None:
        return "none"
    if math.isnan(ratio) or ratio > 1.0:
        return "over"
    return "near" if ratio > 0.5 else "ok"


def format_number(value: Any) -> str:
    number = as_float(value)
    if number is None:
        return "—" if value is None else str(value)
    if math.isnan(number) or math.isinf(number):
        return str(value) if isinstance(value, str) else repr(number)
    if number.is_integer() and abs(number) < 1e15:
        return f"{int(number):,}"
    return f"{number:.3g}"


# The bound of an error ratio: a ratio printed as this must be exactly this.
RATIO_BOUND = 1.0
RATIO_DIGITS = 3  # significant digits of a ratio away from the bound
RATIO_MAX_DIGITS = 17  # enough to tell any float from another


def format_ratio(value: Any) -> str:
    """An error ratio (error ÷ tolerance) with enough digits to be told from the bound: 0.99998 and
    1.00002 never print as "1", which the report reserves for a ratio of exactly 1 (a half-ulp tie)."""
    number = as_float(value)
    if number is None or math.isnan(number) or math.isinf(number) or number == RATIO_BOUND:
        return format_number(value)
    for digits in range(RATIO_DIGITS, RATIO_MAX_DIGITS + 1):
        text = f"{number:.{digits}g}"
        if float(text) != RATIO_BOUND:
            return text if digits > RATIO_DIGITS else format_number(number)
    return repr(number)


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def format_percent(fraction: float | None) -> str:
    return "—" if fraction is None else f"{100 * fraction:.1f}%"


def format_bytes(value: Any) -> str:
    number = as_float(value)
    if number is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(number) < 1024 or unit == "TiB":
            return f"{number:.0f} {unit}" if unit == "B" else f"{number:.1f} {unit}"
        number /= 1024
    return str(value)


def format_argv(argv: Any) -> str:
    if isinstance(argv, list):
        return shlex.join(str(arg) for arg in argv)
    return "" if argv is None else str(argv)


def ordered_metrics(metrics: Any) -> list[tuple[str, Any]]:
    if not isinstance(metrics, dict):
        return []
    known = [(name, metrics[name]) for name in METRIC_ORDER if name in metrics]
    rest = [(name, value) for name, value in sorted(metrics.items())
            if name not in METRIC_ORDER and name not in METRIC_TEXT]
    return known + rest


def breakable(text: Any) -> Markup:
    """Escaped text with a line-break opportunity after each comma, slash and opening bracket, so an
    identifier (case id, repro line) wraps between its parts rather than inside a token."""
    escaped = str(escape("" if text is None else text))
    return Markup(re.sub(r"([,/(\[])", r"\1<wbr>", escaped))


def name_breakable(text: Any) -> Markup:
    """A device name or spec (``tests.plugins.faulty:erf_gelu_quick``) with a break opportunity after each
    dot, colon, underscore and slash: in the Summary's narrow columns it wraps between its parts."""
    escaped = str(escape("" if text is None else text))
    return Markup(re.sub(r"([./:_])", r"\1<wbr>", escaped))


def _make_environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        autoescape=True,  # every {{ }} is HTML-escaped: results text can never become markup
        # Records may lack optional fields (older writers, partial headers): missing renders empty.
        undefined=jinja2.ChainableUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        num=format_number,
        ratio=format_ratio,
        duration=format_duration,
        percent=format_percent,
        bytes=format_bytes,
        argv=format_argv,
        bar_x=bar_position,
        ratio_class=ratio_class,
        metrics=ordered_metrics,
        classify=classify_cell,
        describes_cpu=describes_cpu,
        ratio_histogram=ratio_histogram_svg,
        pass_rate_plot=pass_rate_svg,
        seconds=format_seconds,
        quantity=format_quantity,
        breakable=breakable,
        name_breakable=name_breakable,
    )
    return env


def _distinct_headers(data: ReportData) -> list[dict[str, Any]]:
    """One header per (run, host): xdist workers repeat the same environment."""
    seen: dict[tuple[Any, Any], dict[str, Any]] = {}
    workers: dict[tuple[Any, Any], int] = {}
    for results in data.files:
        for header in results.headers:
            key = (header.get("run_id"), header.get("host"))
            seen.setdefault(key, header)
            workers[key] = workers.get(key, 0) + 1
    return [dict(header, _workers=workers[key]) for key, header in seen.items()]


def render_report(data: ReportData, title: str | None = None, perf: PerfSection | None = None,
                  models: Sequence[dict[str, Any]] = ()) -> str:
    """Render analysed report data to a complete HTML document; the title names the devices in it.
    ``perf``: the perf-mode part (reports/perf.py), where records were timed; ``models``: ``conform model``
    results (model.json), rendered as the Models section."""
    env = _make_environment()
    template = env.get_template("report.html.j2")
    powers = range(int(BAR_LOG_MIN), int(BAR_LOG_MAX) + 1)
    ticks = [(TICK_LABELS.get(power, f"{10.0**power:g}"), bar_position(10.0**power)) for power in powers]
    return template.render(
        data=data,
        title=title or data.title(),
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        outcomes=OUTCOMES,
        cell_kinds=CELL_KINDS,
        cell_marks=CELL_MARKS,
        cell_labels=CELL_LABELS,
        cell_explanations=CELL_EXPLANATIONS,
        cell_counts=data.cell_kind_counts(),
        unexpected_claimed_cells=data.unexpected_claimed_cells(),
        claimed_fail=CLAIMED_FAIL,
        known_only=KNOWN_ONLY,
        headline=data.headline(),
        skipped_tests=data.skipped_tests,
        headers=_distinct_headers(data),
        bar_width=BAR_WIDTH,
        bound_x=bar_position(1.0),
        ticks=ticks,
        growth_factor=ERROR_GROWTH_FACTOR,
        growth_floor=ERROR_GROWTH_FLOOR,
        pass_rate_sigmas=PASS_RATE_SIGMAS,
        unexpected_failures=data.unexpected_failures,
        known_failure_count=data.known_failures,
        device_list=", ".join(dict.fromkeys(data.device_names)) or "no device",
        perf=perf,
        regression_factor=REGRESSION_FACTOR,
        models=list(models),
        failing_models=[m for m in models if not str(m.get("verdict", "")).startswith("pass")],
    )


def build_report(
    results_paths: Sequence[str | os.PathLike[str]],
    out_html: str | os.PathLike[str],
    baseline_paths: Sequence[str | os.PathLike[str]] | None = None,
    expectations_path: str | os.PathLike[str] | None = None,
    max_examples_per_cluster: int = 5,
    other_outputs: Sequence[str | os.PathLike[str]] = (),
    model_paths: Sequence[str | os.PathLike[str]] = (),
) -> ReportData:
    """Read results (and optionally baseline runs and an expectations file) and write one HTML file.

    Raises :class:`results.load.ReportInputError` (a one-line, user-facing message) for missing,
    malformed or foreign inputs, and for an output that would overwrite an input. The same file
    given twice, or two copies of one run, are read once; ``ReportData.input_warnings`` says so.
    ``other_outputs`` are further files the caller will write (the CSV), checked the same way.
    ``model_paths``: ``conform model`` results (model.json files or their run folders), the Models section.
    Returns the analysed data, e.g. for a summary line or an exit status.
    """
    if not results_paths and not model_paths:
        raise ResultsError("no results files given")
    models = load_model_results(model_paths)
    out_html = Path(out_html)
    inputs = [*results_paths, *model_paths, *(baseline_paths or []),
              *([expectations_path] if expectations_path else [])]
    tmp = out_html.with_name(out_html.name + ".tmp")
    check_outputs_are_not_inputs([out_html, tmp, *other_outputs], inputs)
    expectations = load_expectations(expectations_path) if expectations_path is not None else []
    out_dir = os.path.dirname(os.path.abspath(out_html))
    results_unique, warnings = distinct_paths(results_paths)
    baseline_unique, baseline_warnings = distinct_paths(baseline_paths or [])
    with paused_gc():  # see paused_gc: a batch of acyclic records, collected when done
        files, run_warnings = drop_duplicate_runs(load_many(results_unique))
        baseline_files = None
        if baseline_paths:
            baseline_files, more = drop_duplicate_runs(load_many(baseline_unique))
            baseline_warnings += more
        data = analyse(
            files,
            expectations=expectations,
            baseline_files=baseline_files,
            out_dir=out_dir,
            max_examples_per_cluster=max_examples_per_cluster,
        )
        data.input_warnings = warnings + run_warnings + [f"baseline {w}" for w in baseline_warnings]
        attach_error_plots(data.clusters)
        html = render_report(data, perf=build_perf_section(files, baseline_files), models=models)
    out_html.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp.write_text(html, encoding="utf-8")
        os.replace(tmp, out_html)  # never leave a half-written report behind
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return data

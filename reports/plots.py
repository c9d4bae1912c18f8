"""Small inline SVG plots, written by hand: no plotting library, no script, no external file.

Three pictures, each where reading numbers is slower than looking:

* the distribution of error ratios of one op on one device (a log-binned histogram with the bound
  marked), in the per-op table;
* error against input value for a failing elementwise op, pooled from a cluster's ``.npz``
  artefacts (GELU_QUICK computed as erf-GELU shows as a smooth bump, a wrong NaN path as marks on
  the edge);
* pass rate per op over the baseline runs and this one.

Every number placed in the markup is formatted here; every text is escaped. The SVGs scale down
with the page (``max-width: 100%``), so none forces horizontal scrolling.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from markupsafe import Markup, escape

# Error-ratio histogram: half-decade bins from 1e-4 to 1e3, an underflow bin (0 included) on the
# left and an overflow bin (beyond 1e3, inf and NaN: no finite ratio) on the right.
HIST_LOG_MIN = -4
HIST_LOG_MAX = 3
HIST_BINS_PER_DECADE = 2
HIST_INNER_BINS = (HIST_LOG_MAX - HIST_LOG_MIN) * HIST_BINS_PER_DECADE
HIST_BINS = HIST_INNER_BINS + 2


def ratio_bin(ratio: float) -> int:
    """The histogram bin of an error ratio: 0 is the underflow bin, ``HIST_BINS - 1`` the overflow."""
    if math.isnan(ratio) or ratio > 10.0**HIST_LOG_MAX:
        return HIST_BINS - 1
    if ratio < 10.0**HIST_LOG_MIN:
        return 0
    position = (math.log10(ratio) - HIST_LOG_MIN) * HIST_BINS_PER_DECADE
    if ratio == 1.0:  # a ratio of exactly the bound passes (a half-ulp tie): the bin under the bound holds it
        return (0 - HIST_LOG_MIN) * HIST_BINS_PER_DECADE
    return 1 + min(HIST_INNER_BINS - 1, int(position))


def _bin_upper_log(index: int) -> float:
    return HIST_LOG_MIN + index / HIST_BINS_PER_DECADE


def ratio_histogram_svg(bins: Sequence[int], label: str, width: int = 200, height: int = 40,
                        known_bins: Sequence[int] | None = None) -> Markup:
    """Bars of case counts per error-ratio bin; the black line is the bound (ratio 1).

    Heights are on a square-root scale, and any non-empty bin is at least 2 px tall: a handful of
    failures next to thousands of passes must still be visible. ``known_bins``: per bin, the failures
    known bugs explain; a bar over the bound made of those alone is drawn in their calm colour.
    """
    total = sum(bins)
    plot_h = height - 12  # room for the axis labels
    bar_w = width / HIST_BINS
    peak = max(bins) if bins else 0
    parts = [f'<svg class="plot hist" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
             f'role="img" aria-label="{escape(label)}: error ratio distribution of {total} cases">'
             f'<rect class="track" x="0" y="0" width="{width}" height="{plot_h}"/>']
    bound_index = 1 + (0 - HIST_LOG_MIN) * HIST_BINS_PER_DECADE  # first bin above ratio 1
    for index, count in enumerate(bins):
        if not count:
            continue
        h = max(2.0, plot_h * math.sqrt(count / peak))
        over = index >= bound_index
        kind = "over" if over else ("near" if index == bound_index - 1 else "ok")
        if over and known_bins is not None and index < len(known_bins) and known_bins[index] == count:
            kind = "known"
        x = index * bar_w
        lower = "0" if index == 0 else f"{10 ** _bin_upper_log(index - 1):.3g}"
        upper = "∞, NaN or none (crash)" if index == HIST_BINS - 1 else f"{10 ** _bin_upper_log(index):.3g}"
        parts.append(f'<rect class="{kind}" x="{x:.1f}" y="{plot_h - h:.1f}" width="{bar_w - 1:.1f}" '
                     f'height="{h:.1f}"><title>{count} case(s) with error ratio {lower} … {upper}</title></rect>')
    bound_x = bound_index * bar_w
    parts.append(f'<line class="bound" x1="{bound_x:.1f}" y1="0" x2="{bound_x:.1f}" y2="{plot_h}"/>')
    for power in (HIST_LOG_MIN, -2, 0, 2):
        x = (1 + (power - HIST_LOG_MIN) * HIST_BINS_PER_DECADE) * bar_w
        parts.append(f'<text x="{x:.1f}" y="{height - 1}" text-anchor="middle">{_power_label(power)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def _power_label(power: int) -> str:
    return {-4: "1e-4", -3: "0.001", -2: "0.01", -1: "0.1", 0: "1", 1: "10", 2: "100", 3: "1e3"}.get(
        power, f"1e{power}")


# Error against input: at most this many points (the page stays small; the shape stays visible).
SCATTER_MAX_POINTS = 1500


def error_points(inputs: np.ndarray, golden: np.ndarray, device: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(x, signed error, x where the NaN/inf pattern differs) for one elementwise case, or None when
    the arrays do not line up element for element."""
    x = np.asarray(inputs, dtype=np.float64).reshape(-1)
    g = np.asarray(golden, dtype=np.float64).reshape(-1)
    d = np.asarray(device, dtype=np.float64).reshape(-1)
    if not (x.size == g.size == d.size) or x.size == 0:
        return None
    finite = np.isfinite(g) & np.isfinite(d) & np.isfinite(x)
    g_nan, d_nan = np.isnan(g), np.isnan(d)
    pattern = (g_nan != d_nan) | (np.isinf(g) != np.isinf(d)) | (np.isinf(g) & np.isinf(d) & (g != d))
    nonfinite_x = x[pattern & np.isfinite(x)]
    return x[finite], d[finite] - g[finite], nonfinite_x


def thin(x: np.ndarray, y: np.ndarray, limit: int = SCATTER_MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """At most ``limit`` points spread evenly along x, keeping the worst (largest |y|) point."""
    if x.size <= limit:
        return x, y
    order = np.argsort(x, kind="stable")
    keep = order[np.linspace(0, x.size - 1, limit - 1).round().astype(int)]
    keep = np.unique(np.append(keep, int(np.argmax(np.abs(y)))))
    return x[keep], y[keep]


def error_scatter_svg(x: np.ndarray, error: np.ndarray, nonfinite_x: np.ndarray, label: str,
                      width: int = 560, height: int = 220) -> Markup:
    """Signed error (device − exact) against the input value; NaN/inf mismatches as red marks on top."""
    left, right, top, bottom = 62, 10, 14, 30
    plot_w, plot_h = width - left - right, height - top - bottom
    xs = np.concatenate([x, nonfinite_x]) if nonfinite_x.size else x
    x_lo, x_hi = _span(xs)
    y_lo, y_hi = _span(np.append(error, 0.0))
    y_lo, y_hi = min(y_lo, -y_hi * 0.02), max(y_hi, -y_lo * 0.02)  # keep y = 0 inside, with a margin

    def px(value: np.ndarray) -> np.ndarray:
        return left + (value - x_lo) / (x_hi - x_lo) * plot_w

    def py(value: np.ndarray) -> np.ndarray:
        return top + (y_hi - value) / (y_hi - y_lo) * plot_h

    parts = [f'<svg class="plot scatter" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
             f'role="img" aria-label="{escape(label)}">',
             f'<rect class="frame" x="{left}" y="{top}" width="{plot_w}" height="{plot_h}"/>']
    zero = float(py(np.array(0.0)))
    parts.append(f'<line class="zero" x1="{left}" y1="{zero:.1f}" x2="{left + plot_w}" y2="{zero:.1f}"/>')
    if x.size:
        dots = "".join(f"M{a:.1f} {b:.1f}h0" for a, b in zip(px(x), py(error), strict=True))
        parts.append(f'<path class="dots" d="{dots}"/>')
    if nonfinite_x.size:
        marks = "".join(f"M{a:.1f} {top}v6" for a in px(np.unique(nonfinite_x))[:SCATTER_MAX_POINTS])
        parts.append(f'<path class="nonfinite" d="{marks}"><title>{nonfinite_x.size} element(s) whose NaN/inf '
                     'pattern differs from the exact result</title></path>')
    for value, anchor, x_pos in ((x_lo, "start", left), (x_hi, "end", left + plot_w)):
        parts.append(f'<text x="{x_pos}" y="{height - 16}" text-anchor="{anchor}">{_fmt(value)}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.0f}" y="{height - 3}" text-anchor="middle">input value (src0)</text>')
    for value in (y_hi, 0.0, y_lo):
        parts.append(f'<text class="ytick" x="{left - 4}" y="{float(py(np.array(value))) + 3:.1f}" '
                     f'text-anchor="end">{_fmt(value)}</text>')
    parts.append(f'<text x="4" y="{top - 3}" text-anchor="start">device − exact</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def _span(values: np.ndarray) -> tuple[float, float]:
    if values.size == 0:
        return -1.0, 1.0
    lo, hi = float(values.min()), float(values.max())
    if lo == hi:
        pad = abs(lo) * 0.5 or 1.0
        return lo - pad, hi + pad
    return lo, hi


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    return f"{value:.3g}"


def pass_rate_svg(points: Sequence[tuple[str, float | None]], label: str, width: int = 180,
                  height: int = 34) -> Markup:
    """Pass rate (0–100 %) per run, oldest first and this run last (filled); a gap where a run had no case."""
    n = len(points)
    left, right, top, bottom = 4, 6, 4, 4
    plot_w, plot_h = width - left - right, height - top - bottom
    step = plot_w / max(1, n - 1)

    def y(rate: float) -> float:
        return top + (1.0 - rate) * plot_h

    parts = [f'<svg class="plot rate" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
             f'role="img" aria-label="{escape(label)}: pass rate over {n} runs">',
             f'<rect class="track" x="{left}" y="{top}" width="{plot_w}" height="{plot_h}"/>',
             f'<line class="full" x1="{left}" y1="{top}" x2="{left + plot_w}" y2="{top}"/>']
    path: list[str] = []
    for index, (_, rate) in enumerate(points):
        if rate is None:
            continue
        path.append(("L" if path else "M") + f"{left + index * step:.1f} {y(rate):.1f}")
    if len(path) > 1:
        parts.append(f'<path class="line" d="{" ".join(path)}"/>')
    for index, (run, rate) in enumerate(points):
        if rate is None:
            continue
        current = index == n - 1
        parts.append(f'<circle class="{"now" if current else "then"}" cx="{left + index * step:.1f}" '
                     f'cy="{y(rate):.1f}" r="{3 if current else 2.2}"><title>{escape(run)}: '
                     f'{100 * rate:.1f}% pass</title></circle>')
    parts.append("</svg>")
    return Markup("".join(parts))

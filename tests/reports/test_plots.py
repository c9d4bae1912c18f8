"""The inline SVG plots: error-ratio histograms, error against input from artefacts, pass rate by run."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from reports.analysis import analyse, attach_error_plots
from reports.html import build_report
from reports.plots import (
    HIST_BINS,
    error_points,
    error_scatter_svg,
    pass_rate_svg,
    ratio_bin,
    ratio_histogram_svg,
    thin,
)
from results.load import load_results
from tests.reports.synth import gelu_quick_as_erf_gelu, make_case, plugin_failure, write_results


def test_ratio_bins() -> None:
    assert ratio_bin(0.0) == 0 and ratio_bin(1e-9) == 0
    assert ratio_bin(math.inf) == HIST_BINS - 1 and ratio_bin(math.nan) == HIST_BINS - 1
    assert ratio_bin(0.99) < ratio_bin(1.01)  # the bound is a bin edge
    assert ratio_bin(1.01) == 1 + 4 * 2  # four decades above 1e-4, two bins each
    assert ratio_bin(999.0) == HIST_BINS - 2


def test_histogram_draws_every_nonempty_bin_visibly() -> None:
    bins = [0] * HIST_BINS
    bins[ratio_bin(0.01)] = 10_000
    bins[ratio_bin(5.0)] = 1  # one failure next to ten thousand passes
    svg = str(ratio_histogram_svg(bins, "ADD on <ggml:CPU>"))
    heights = [float(h) for h in re.findall(r'<rect class="(?:ok|near|over)"[^>]*height="([\d.]+)"', svg)]
    assert len(heights) == 2 and min(heights) >= 2.0
    assert 'class="over"' in svg and "&lt;ggml:CPU&gt;" in svg and "<ggml:CPU>" not in svg


def test_error_points_and_thinning() -> None:
    x = np.array([-1.0, 0.0, 1.0, 2.0])
    golden = np.array([1.0, np.nan, 3.0, np.inf])
    device = np.array([1.5, 0.0, 3.0, np.inf])
    points = error_points(x, golden, device)
    assert points is not None
    xs, err, nonfinite = points
    assert xs.tolist() == [-1.0, 1.0] and err.tolist() == [0.5, 0.0] and nonfinite.tolist() == [0.0]
    assert error_points(np.zeros(3), np.zeros(4), np.zeros(4)) is None
    many_x = np.linspace(-5, 5, 10_000)
    many_err = np.zeros_like(many_x)
    many_err[1234] = 9.0
    tx, ty = thin(many_x, many_err, limit=500)
    assert tx.size <= 500 and 9.0 in ty


def test_scatter_and_pass_rate_plots() -> None:
    svg = str(error_scatter_svg(np.array([-2.0, 0.0, 2.0]), np.array([0.02, 0.0, -0.01]), np.array([5.0]), "x"))
    assert svg.count("h0") == 3 and 'class="nonfinite"' in svg and 'viewBox="0 0 560 220"' in svg
    rate = str(pass_rate_svg([("n1", 1.0), ("n2", None), ("this run", 0.5)], "ADD"))
    assert rate.count("<circle") == 2 and 'class="now"' in rate


def gelu_run(tmp_path: Path, sizes: list[int]) -> Path:
    results = tmp_path / "run" / "results.jsonl"
    cases = []
    for index, size in enumerate(sizes):
        artefact = f"artefacts/gelu_quick-{index}.npz"
        gelu_quick_as_erf_gelu(results.parent / artefact, size, seed=index)
        cases.append(plugin_failure(index, size, artefact=artefact))
    return write_results(results, cases)


def test_error_against_input_shows_erf_gelu(tmp_path: Path) -> None:
    data = analyse([load_results(gelu_run(tmp_path, [1, 256, 512]))])
    assert attach_error_plots(data.clusters) == 1
    plot = str(data.clusters[0].error_plot)
    dots = re.search(r'<path class="dots" d="([^"]+)"', plot)
    assert dots is not None and dots.group(1).count("h0") == 1 + 256 + 512  # pooled from the three cases
    # erf-GELU minus x·σ(1.702x) peaks near 0.02: the y axis shows it
    top_label = float(re.findall(r'class="ytick"[^>]*>([-\d.e]+)</text>', plot)[0])
    assert 0.015 < top_label < 0.03


@pytest.mark.parametrize("problem", ["not elementwise", "missing artefact", "outside the results folder",
                                     "two inputs", "not a zip"])
def test_no_error_plot_without_usable_arrays(tmp_path: Path, problem: str) -> None:
    results = tmp_path / "run" / "results.jsonl"
    artefact = "artefacts/a.npz"
    gelu_quick_as_erf_gelu(results.parent / artefact, 64)
    case = plugin_failure(1, 64, artefact=artefact)
    if problem == "not elementwise":
        case = make_case("SOFT_MAX", outcome="fail", index=1, artefact=artefact)
    elif problem == "missing artefact":
        case["artefact"] = "artefacts/gone.npz"
    elif problem == "outside the results folder":
        gelu_quick_as_erf_gelu(tmp_path / "elsewhere.npz", 64)
        case["artefact"] = "../elsewhere.npz"
    elif problem == "two inputs":
        np.savez(results.parent / artefact, input_0=np.ones(4), input_1=np.ones(4), golden=np.ones(4),
                 device=np.zeros(4))
    elif problem == "not a zip":
        (results.parent / artefact).write_bytes(b"not a zip")
    data = analyse([load_results(write_results(results, [case]))])
    assert attach_error_plots(data.clusters) == 0 and data.clusters[0].error_plot is None


def test_the_report_carries_all_three_plots(tmp_path: Path) -> None:
    results = gelu_run(tmp_path, [1, 128])
    baseline = write_results(tmp_path / "old.jsonl", [make_case("GELU_QUICK", device=results_device(), index=9,
                                                                run_id="old")])
    out = tmp_path / "report.html"
    build_report([results], out, baseline_paths=[baseline])
    html = out.read_text()
    assert html.count('class="plot scatter"') == 1
    assert html.count('class="plot hist"') == 1  # one op on one device
    assert 'class="plot rate"' in html  # GELU_QUICK fell from 100 % to 0 %: flagged, shown


def results_device() -> str:
    return plugin_failure(0, 1)["device"]

"""Issue 35, deliver 3: the report's headline figures are the ones a release note quotes, known-bug
cells are calm in the matrix and in the baseline diff, a partial baseline is said, skipped tests are
counted and listed, ratios near the bound are told from it, graph and model-block results have their
own family."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from reports.analysis import KNOWN_ONLY, analyse
from reports.html import build_report, format_ratio
from reports.matrix import GRAPH_FAMILY, MODEL_BLOCK_FAMILY, op_family
from reports.plots import ratio_bin, ratio_histogram_svg
from results.load import load_results
from results.record import SkipRecord
from tests.reports.synth import footer, header, make_case, write_results

ROOT = Path(__file__).resolve().parents[2]
BUG = {"id": "cpu-clamp-row-stride", "reason": "row j addressed at j·nb1", "repro": "CLAMP(type=f32,...)"}
SENTENCE = "Every case that no known bug covers passed"
# classes that paint a status red (dark red for "claimed supported, but fails", red pills and bars)
RED_CLASSES = ("k-claimed-fail", "k-none-pass", "o-fail", "o-crash", "o-timeout", "o-error", "banner bad",
               'class="over"')


def _body(html: str) -> str:
    return html.split("</style>", 1)[1]  # the stylesheet names every class, used or not


def _figure(html: str, name: str) -> str:
    match = re.search(rf'data-figure="{name}">(?:<a [^>]*>)?([^<]*)<', html)
    assert match, name
    return match.group(1)


def _known_only_cases() -> list[dict]:
    return [make_case("CLAMP", outcome="crash", supported=True, error_ratio=None, index=1, expected=BUG),
            make_case("CLAMP", outcome="fail", supported=True, error_ratio=5.0, index=2, expected=BUG),
            *[make_case("ADD", outcome="pass", error_ratio=0.2, index=10 + i) for i in range(3)],
            make_case("ADD", outcome="unsupported", supported=False, error_ratio=None, index=20)]


def test_a_known_only_run_leads_with_every_uncovered_case_passed_and_shows_no_red(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    data = build_report([write_results(tmp_path / "r.jsonl", _known_only_cases())], out)
    html = out.read_text()
    assert data.all_uncovered_passed
    verdict = html[html.index('id="verdict"'):].split("</div>", 1)[0]
    assert SENTENCE in verdict and "(3 of 3 judged)" in verdict
    assert html.index('id="verdict"') < html.index('class="lede"')  # the report leads with it
    figures = {name: _figure(html, name) for name in ("judged", "passed", "known", "unexpected", "not-run", "skipped")}
    assert figures == {"judged": "3", "passed": "3", "known": "2", "unexpected": "0", "not-run": "1", "skipped": "0"}
    assert "<code>cpu-clamp-row-stride</code> 2" in html  # known, by entry
    assert "100.0%" in html and "60.0%" not in html  # the pass rate of the judged cases, not 3 of 5 that ran
    body = _body(html)
    assert [cls for cls in RED_CLASSES if cls in body] == []
    assert 'class="cell k-known-only"' in body

    # one failure no known bug explains: the sentence goes, and the cell turns red
    cases = [*_known_only_cases(), make_case("ADD", outcome="fail", supported=True, error_ratio=3.0, index=30)]
    data = build_report([write_results(tmp_path / "r2.jsonl", cases)], out)
    html = out.read_text()
    assert not data.all_uncovered_passed and SENTENCE not in html
    assert _figure(html, "unexpected") == "1" and _figure(html, "judged") == "4"
    assert 'class="cell k-claimed-fail" data-kind="claimed-fail"' in html

    # a partial run (no footer) says no such thing either: what it did not reach is unknown
    build_report([write_results(tmp_path / "r3.jsonl", _known_only_cases(), complete=False)], out)
    assert SENTENCE not in out.read_text()


def test_known_bug_cells_are_calm_in_the_baseline_diff(tmp_path: Path) -> None:
    before = write_results(tmp_path / "old.jsonl", [
        make_case("CLAMP", outcome="unsupported", supported=False, error_ratio=None, index=1, run_id="old"),
        make_case("ADD", outcome="pass", index=2, run_id="old")])
    after = write_results(tmp_path / "new.jsonl", _known_only_cases())
    out = tmp_path / "report.html"
    data = build_report([after], out, baseline_paths=[before])
    assert data.baseline is not None
    assert [(c.op, c.before, c.now) for c in data.baseline.cell_changes] == [("CLAMP", "not-claimed", KNOWN_ONLY)]
    html = out.read_text()
    support = html[html.index('id="diff-support"'):html.index('id="matrix"')]
    assert 'class="k-known-only"' in support and "fails only by known bugs" in support
    assert "k-claimed-fail" not in support


def test_a_partial_baseline_is_said(tmp_path: Path) -> None:
    # the baseline was cut off before it reached CLAMP: CLAMP's known-only cell is no support change
    before = write_results(tmp_path / "old.jsonl", [make_case("ADD", outcome="pass", index=2, run_id="old")],
                           complete=False)
    after = write_results(tmp_path / "new.jsonl", _known_only_cases())
    out = tmp_path / "report.html"
    data = build_report([after], out, baseline_paths=[before])
    assert data.baseline is not None and data.baseline.is_partial and data.baseline.cell_changes == []
    html = out.read_text()
    notice = html[html.index('id="baseline-partial"'):].split("</div>", 1)[0]
    assert "The baseline is partial." in notice and "old.jsonl" in notice and "finished normally" in notice
    assert "1 support-matrix cell of this run has no case in the baseline." in html
    # a complete baseline says nothing of the kind
    complete = write_results(tmp_path / "old2.jsonl", [make_case("ADD", outcome="pass", index=2, run_id="old")])
    build_report([after], out, baseline_paths=[complete])
    assert 'id="baseline-partial"' not in out.read_text()


def test_skipped_tests_are_counted_and_listed_with_their_reasons(tmp_path: Path) -> None:
    skip = SkipRecord(run_id="run-1", worker="main", test_id="conformance/test_graphs.py::test_graph[llama_layer]",
                      when="setup", reason="the device declares no Capability.GRAPH").to_json()
    path = write_results(tmp_path / "r.jsonl", _known_only_cases(), extra_records=[skip])
    assert load_results(path).skips == [skip]
    out = tmp_path / "report.html"
    data = build_report([path], out)
    assert [(s.test_id, s.reason) for s in data.skipped_tests] == [(skip["test_id"], skip["reason"])]
    html = out.read_text()
    assert _figure(html, "skipped") == "1" and '<a href="#skipped">1 test skipped</a>' in html
    listing = html[html.index('id="skipped"'):].split("</table>", 1)[0]
    assert "llama_layer" in listing and "the device declares no Capability.GRAPH" in listing


def test_the_plugin_writes_a_skip_record(tmp_path: Path) -> None:
    """A run whose only test skips (test_from_model without --from-model) still writes the skip."""
    results = tmp_path / "r.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "-k", "test_from_model",
         "--device", "golden", "--results", str(results)],
        capture_output=True, text=True, cwd=ROOT, timeout=300, env=os.environ | {"PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0 and "1 skipped" in proc.stdout, proc.stdout[-2000:]
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["type"] for r in lines] == ["header", "skip", "footer"]
    assert lines[1]["test_id"].endswith("test_from_model[none]") and "--from-model" in lines[1]["reason"]


def test_ratios_near_the_bound_are_told_from_it(tmp_path: Path) -> None:
    assert format_ratio(0.99998) == "0.99998" and format_ratio(1.00002) == "1.00002"
    assert format_ratio(1.0) == "1" and format_ratio(0.5) == "0.5" and format_ratio(0.123456) == "0.123"
    assert format_ratio(None) == "—"
    cases = [make_case("ADD", outcome="pass", error_ratio=0.99998, index=1),
             make_case("MUL_MAT", outcome="pass", error_ratio=1.0, index=2)]
    out = tmp_path / "report.html"
    build_report([write_results(tmp_path / "r.jsonl", cases)], out)
    html = out.read_text()
    closest = html[html.index("Closest to their bound"):html.index('id="half-ulp-ties"')]
    assert '<td class="num ratio">0.99998</td>' in closest and "MUL_MAT" not in closest
    # a ratio of exactly 1 passes: its histogram bar is under the bound, not drawn over it
    assert ratio_bin(1.0) == ratio_bin(0.99) < ratio_bin(1.0000001)


def test_a_bar_of_known_failures_only_is_calm() -> None:
    bins = [0] * 20
    bins[ratio_bin(5.0)] = 2
    assert 'class="over"' in str(ratio_histogram_svg(bins, "CLAMP"))
    known = [0] * 20
    known[ratio_bin(5.0)] = 2
    svg = str(ratio_histogram_svg(bins, "CLAMP", known_bins=known))
    assert 'class="over"' not in svg and 'class="known"' in svg


def test_graph_and_model_block_results_have_their_own_family(tmp_path: Path) -> None:
    assert op_family("RMS_NORM_MUL") == GRAPH_FAMILY == "graph"
    assert op_family("LLAMA_LAYER") == op_family("MOE_FFN") == MODEL_BLOCK_FAMILY == "model block"
    assert op_family("ADD") == "binary" and op_family("SET_GET") == "transfer" and op_family("NOT_AN_OP") == "other"
    cases = [make_case(op, outcome="pass", index=i) for i, op in enumerate(("ADD", "RMS_NORM_MUL", "LLAMA_LAYER"))]
    path = write_results(tmp_path / "r.jsonl", cases,
                         header_record=header(devices=["ggml:CPU"], run_id="run-1"),
                         footer_record=footer(run_id="run-1", exitstatus=0, pytest_failed=0, pytest_errors=0))
    data = analyse([load_results(path)])
    families = {family: [op for op, _ in ops] for family, ops, _ in data.matrix_families()}
    assert families == {"binary": ["ADD"], "model block": ["LLAMA_LAYER"], "graph": ["RMS_NORM_MUL"]}
    assert "other" not in {family for family, _, _ in data.op_families()}

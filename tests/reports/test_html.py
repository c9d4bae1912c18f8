"""The HTML report: self-contained, escaped, and showing what the brief promises."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from reports.html import bar_position, build_report
from results.load import ResultsError
from tests.reports.synth import make_case, make_cases, write_results

SCRIPT = "<script>alert('x')</script>"


def test_results_text_is_escaped_everywhere(tmp_path: Path) -> None:
    hostile = make_case("ADD", outcome="fail", index=1, params={"note": SCRIPT}, message=f"boom {SCRIPT}",
                        repro=f"conform run -k '{SCRIPT}'",
                        crash={"signal": SCRIPT, "exitcode": 1, "stderr_tail": SCRIPT})
    hostile["case_id"] = f"ADD(type=f32,v={SCRIPT})"
    hostile["op"] = f"ADD{SCRIPT}"
    hostile["dtypes"] = {"src0": SCRIPT, "dst": "f32"}
    path = write_results(tmp_path / "r.jsonl", [hostile, make_case(index=2, device=f"ggml:{SCRIPT}")])
    out = tmp_path / "report.html"
    build_report([path], out)
    html = out.read_text()
    assert "<script" not in html.lower()  # the report has no scripts of its own either
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html


def test_report_is_self_contained(tmp_path: Path) -> None:
    path = write_results(tmp_path / "r.jsonl", make_cases(200))
    out = tmp_path / "report.html"
    build_report([path], out)
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>")
    assert not re.search(r"<(link|img|iframe|object|embed)\b", html)
    assert not re.search(r"\bsrc\s*=", html)
    assert "url(" not in html and "@import" not in html
    assert "<svg" in html and "<style>" in html


def test_two_devices_two_columns_and_the_cell_marks(tmp_path: Path) -> None:
    cpu = write_results(tmp_path / "cpu.jsonl", [make_case("ADD", device="ggml:CPU"),
                                                 make_case("CPY", device="ggml:CPU", index=1)])
    npu = write_results(tmp_path / "npu.jsonl", [
        make_case("ADD", device="ggml:CANN0", outcome="fail", supported=True, run_id="r2"),
        make_case("CPY", device="ggml:CANN0", outcome="unsupported", supported=False, index=1, run_id="r2"),
    ])
    out = tmp_path / "report.html"
    build_report([cpu, npu], out)
    html = out.read_text()
    cell_pattern = r'data-kind="([^"]+)" data-op="([^"]+)" data-dtype="[^"]+" data-device="([^"]+)"'
    cells = re.findall(cell_pattern, html)
    assert sorted(cells) == sorted([
        ("all-pass", "ADD", "ggml:CPU"), ("claimed-fail", "ADD", "ggml:CANN0"),
        ("all-pass", "CPY", "ggml:CPU"), ("not-claimed", "CPY", "ggml:CANN0"),
    ])
    header = html[html.index('<table class="matrix">'):html.index("</thead>")]
    assert header.index(">CPU<") < header.index(">CANN0<")


def test_partial_run_is_announced(tmp_path: Path) -> None:
    path = write_results(tmp_path / "r.jsonl", make_cases(10), complete=False, truncate_tail='{"type":"ca')
    out = tmp_path / "report.html"
    data = build_report([path], out)
    assert data.is_partial
    html = out.read_text()
    assert "Partial run." in html and "line 12 is cut off" in html


def test_failure_details_and_artefact_link(tmp_path: Path) -> None:
    failing = make_case("MUL_MAT", outcome="fail", error_ratio=7.5, index=3, message="nmse 7.5e-07 > 1e-07")
    crashed = make_case("CPY", outcome="crash", index=4)
    path = write_results(tmp_path / "results" / "r.jsonl", [failing, crashed])
    out = tmp_path / "html" / "report.html"
    build_report([path], out)
    html = out.read_text()
    assert 'href="../results/artefacts/mul_mat-3.npz"' in html
    assert "nmse 7.5e-07 &gt; 1e-07" in html
    assert "conform run --device ggml:CPU -k" in html
    assert "SIGSEGV" in html and "aclnn error 561000" in html
    assert "7.5" in html


def test_baseline_and_expectations_sections(tmp_path: Path) -> None:
    old = write_results(tmp_path / "old.jsonl", [make_case("ADD", index=1),
                                                 make_case("CPY", outcome="fail", index=2)])
    new = write_results(tmp_path / "new.jsonl", [make_case("ADD", outcome="fail", index=1),
                                                 make_case("CPY", index=2)])
    expectations = tmp_path / "x.toml"
    expectations.write_text('[[expectation]]\npattern = "GONE(*"\nreason = "old bug"\n'
                            'category = "backend-bug"\nissue = "https://example.invalid/1"\n')
    out = tmp_path / "report.html"
    build_report([new], out, baseline_paths=[old], expectations_path=expectations)
    html = out.read_text()
    assert 'id="diff-new-clusters"' in html and 'id="diff-gone-clusters"' in html
    assert "New failure clusters (1)" in html and "Clusters gone since the baseline (1)" in html
    assert "stale" in html and "old bug" in html and 'href="https://example.invalid/1"' in html


def test_no_results_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ResultsError):
        build_report([], tmp_path / "r.html")


def test_bar_scale() -> None:
    assert bar_position(0.0) == 0.0
    assert bar_position(1e-9) == 0.0
    assert bar_position(1.0) == pytest.approx(120.0)  # the bound sits at 60% of 200 px
    assert bar_position(float("inf")) == 200.0


def test_artefact_paths_are_url_quoted(tmp_path: Path) -> None:
    case = make_case("ADD", outcome="fail", artefact="arte facts/a#1.npz")
    out = tmp_path / "report.html"
    build_report([write_results(tmp_path / "r.jsonl", [case])], out)
    assert 'href="arte%20facts/a%231.npz"' in out.read_text()


def test_run_with_no_cases_and_naive_timestamps_still_renders(tmp_path: Path) -> None:
    from tests.reports.synth import header

    path = write_results(tmp_path / "r.jsonl", [], header_record=header(started="2026-11-30T01:00:00",
                                                                        devices=["ggml:CANN0"]))
    out = tmp_path / "report.html"
    data = build_report([path], out)
    assert data.total_cases == 0 and data.columns == [] and data.listed_without_cases == ["ggml:CANN0"]
    html = out.read_text()
    assert "No unexpected failures." not in html and "no case ran" in html

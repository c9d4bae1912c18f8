"""No false green: the footer's exit status and pytest's failure counts are read, and failures that
left no case record are counted and shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from reports.cli import report_main
from reports.html import build_report
from tests.reports.synth import footer, make_case, make_cases, write_results

GREEN = 'class="banner good"'


def build(tmp_path: Path, cases: list[dict], **footer_fields) -> tuple[object, str]:  # type: ignore[no-untyped-def]
    tail = footer(**footer_fields) if footer_fields else None
    path = write_results(tmp_path / "r.jsonl", cases, footer_record=tail)
    out = tmp_path / "report.html"
    data = build_report([path], out)
    return data, out.read_text()


def passing(n: int = 5) -> list[dict]:
    return [make_case("ADD", index=i) for i in range(n)]


def test_a_clean_run_is_green(tmp_path: Path) -> None:
    data, html = build(tmp_path, passing(), exitstatus=0, pytest_failed=0, pytest_errors=0)
    assert data.is_green and GREEN in html and "Every case that no known bug covers passed" in html  # type: ignore[attr-defined]


def test_pytest_failures_without_a_record_turn_the_run_red(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A plug-in whose run() returns None wrote no record, yet pytest failed two tests."""
    data, html = build(tmp_path, passing(), exitstatus=1, pytest_failed=2, pytest_errors=0)
    assert not data.is_green and data.unrecorded_failures == 2  # type: ignore[attr-defined]
    assert GREEN not in html and "No unexpected failures." not in html
    assert 'id="run-failed"' in html and "at least 2 failing test(s) left no failing case record" in html
    assert "ended, but failed" in html  # the runs table says so too, not "Complete? yes"
    code = report_main([str(tmp_path / "r.jsonl"), "-o", str(tmp_path / "again.html")])
    captured = capsys.readouterr()
    assert code == 0 and "2 failing tests without a case record (RUN FAILED)" in captured.out
    assert "left no failing case record" in captured.err


def test_the_failed_tests_the_footer_names_are_listed(tmp_path: Path) -> None:
    recorded = make_case("ADD", outcome="fail", index=9)
    listed = [{"test_id": recorded["test_id"], "when": "call", "message": "CaseFailed"},
              {"test_id": "conformance/test_elementwise.py::test_unary[relu-f32]", "when": "call",
               "message": "TypeError: run() returned None"},
              {"test_id": "conformance/test_stateful.py::test_same_shape_sequence", "when": "setup",
               "message": "DeviceError: factory raised"}]
    data, html = build(tmp_path, [*passing(), recorded], exitstatus=1, pytest_failed=2, pytest_errors=1,
                       pytest_failed_tests=listed)
    (run,) = data.runs  # type: ignore[attr-defined]
    assert [t["test_id"] for t in run.status.unrecorded_tests] == [listed[1]["test_id"], listed[2]["test_id"]]
    assert data.unrecorded_failures == 2  # type: ignore[attr-defined]
    assert "test_unary[relu-f32]" in html and "run() returned None" in html and "(setup)" in html


def test_recorded_failures_account_for_pytest_failures(tmp_path: Path) -> None:
    failures = [make_case("ADD", outcome="fail", index=i) for i in range(3)]  # one test, three examples
    data, html = build(tmp_path, [*passing(), *failures], exitstatus=1, pytest_failed=1, pytest_errors=0)
    assert data.unrecorded_failures == 0 and not data.failed_runs  # type: ignore[attr-defined]
    assert 'id="run-failed"' not in html and "3 unexpected failures in 1 cluster" in html


def test_a_known_bug_the_harness_matched_does_not_account_for_a_failed_test(tmp_path: Path) -> None:
    """Known bugs do not fail their test; a pytest failure next to one is still unrecorded."""
    known = make_case("ADD", outcome="fail", index=1, expected={"id": "cpu-add", "reason": "r", "repro": "ADD(...)"})
    data, html = build(tmp_path, [*passing(), known], exitstatus=1, pytest_failed=1, pytest_errors=0)
    assert data.unrecorded_failures == 1 and GREEN not in html  # type: ignore[attr-defined]


def test_exit_status_1_without_counts_and_without_failing_records_is_not_green(tmp_path: Path) -> None:
    data, html = build(tmp_path, passing(), exitstatus=1)
    assert data.unrecorded_failures == 1 and GREEN not in html  # type: ignore[attr-defined]


@pytest.mark.parametrize("exitstatus, words", [(None, "does not record pytest's exit status"),
                                               (5, "exit status 5 (no tests collected)"),
                                               (3, "exit status 3 (internal error)")])
def test_a_missing_or_odd_exit_status_is_never_green(tmp_path: Path, exitstatus: int | None, words: str) -> None:
    path = write_results(tmp_path / "r.jsonl", passing(),
                         footer_record=footer(exitstatus=exitstatus) if exitstatus is not None else
                         {"type": "footer", "run_id": "run-1", "worker": "main", "counts": {}})
    data = build_report([path], tmp_path / "report.html")
    html = (tmp_path / "report.html").read_text()
    assert not data.is_green and GREEN not in html
    assert words in " ".join(p for run in data.runs for p in run.status.problems())


def test_no_cases_and_partial_runs_are_never_green(tmp_path: Path) -> None:
    empty = write_results(tmp_path / "empty.jsonl", [])
    data = build_report([empty], tmp_path / "e.html")
    assert not data.is_green and "Not confirmed clean" in (tmp_path / "e.html").read_text()
    partial = write_results(tmp_path / "p.jsonl", make_cases(20, devices=("ggml:CPU",)), complete=False)
    data = build_report([partial], tmp_path / "p.html")
    assert not data.is_green and GREEN not in (tmp_path / "p.html").read_text()

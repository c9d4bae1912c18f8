"""The report protects its input: it never writes over one, reads a repeated input once, and refuses
files that are not results, each with one line and exit status 2."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from reports.cli import report_main
from results.load import FIRST_LINE_LIMIT, ResultsError, load_results
from tests.reports.synth import header, make_case, make_cases, write_results


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = report_main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error_line(code: int, out: str, err: str) -> str:
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("conform report: error: ") and "Traceback" not in err
    return err


@pytest.mark.parametrize("target", ["results", "results_via_link", "baseline", "expectations", "csv_on_results"])
def test_never_writes_over_an_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str) -> None:
    results = write_results(tmp_path / "run1" / "results.jsonl", make_cases(20))
    baseline = write_results(tmp_path / "old.jsonl", make_cases(20, seed=1, run_id="old"))
    expectations = tmp_path / "known.toml"
    expectations.write_text('[[expectation]]\npattern = "X(*"\nreason = "r"\ncategory = "harness"\n')
    link = tmp_path / "link.jsonl"
    os.symlink(results, link)
    before = {path: path.read_bytes() for path in (results, baseline, expectations)}
    argv = [str(results), "--baseline", str(baseline), "--known-failures", str(expectations)]
    output = {"results": results, "results_via_link": link, "baseline": baseline,
              "expectations": expectations}.get(target, tmp_path / "r.html")
    argv += ["-o", str(output)]
    if target == "csv_on_results":
        argv += ["--csv", str(results)]
    err = one_error_line(*run(argv, capsys))
    assert "refusing to write over an input file" in err
    assert {path: path.read_bytes() for path in before} == before  # every input intact
    assert not (tmp_path / "r.html").exists()


def test_html_and_csv_on_one_path_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = write_results(tmp_path / "r.jsonl", make_cases(10))
    out = tmp_path / "both"
    err = one_error_line(*run([str(results), "-o", str(out), "--csv", str(out)], capsys))
    assert "given as two outputs" in err and not out.exists()


def test_the_same_file_twice_is_read_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = write_results(tmp_path / "r.jsonl", make_cases(30))
    other_spelling = tmp_path / "sub" / ".." / "r.jsonl"
    (tmp_path / "sub").mkdir()
    code, out, err = run([str(results), str(other_spelling), str(results), "-o", str(tmp_path / "r.html")], capsys)
    assert code == 0 and "wrote" in out and ": 30 cases" in out
    assert err.count("the same file as") == 2 and err.count("warning") == 2


def test_a_copy_of_the_same_run_is_dropped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = write_results(tmp_path / "a" / "results.jsonl", make_cases(30))
    copy = tmp_path / "b" / "results.jsonl"
    copy.parent.mkdir()
    shutil.copy(results, copy)
    code, out, err = run([str(results), str(copy), "-o", str(tmp_path / "r.html")], capsys)
    assert code == 0 and ": 30 cases" in out
    assert "run run-1 was already read from" in err and "dropped" in err
    assert "Inputs read once." in (tmp_path / "r.html").read_text()


def test_one_run_id_on_two_hosts_is_two_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """conform run stamps run ids by the second: two hosts started by one cron line share one."""
    first = write_results(tmp_path / "a.jsonl", [make_case(device="ggml:CANN0")],
                          header_record=header(host="node-a", devices=["ggml:CANN0"]))
    second = write_results(tmp_path / "b.jsonl", [make_case(device="ggml:CANN0")],
                           header_record=header(host="node-b", devices=["ggml:CANN0"]))
    code, out, err = run([str(first), str(second), "-o", str(tmp_path / "r.html")], capsys)
    assert code == 0 and ": 2 cases" in out and "warning" not in err


def _write_sparse(path: Path, first: bytes, size: int) -> Path:
    with path.open("wb") as stream:
        stream.write(first)
        stream.seek(size - 1)
        stream.write(b"x")
    return path


@pytest.mark.parametrize(
    "name, make, fragment",
    [
        ("junk.jsonl", lambda p: p.write_bytes(os.urandom(4096)), "does not start with a JSON record"),
        ("huge.jsonl", lambda p: _write_sparse(p, b"{", 100 * 2**20),
         f"no line break in the first {FIRST_LINE_LIMIT >> 20} MiB"),
        ("other.json", lambda p: p.write_text(json.dumps({"type": "header", "schema": "pytest-reportlog"}) + "\n"),
         "schema 'pytest-reportlog'"),
        ("pretty.json", lambda p: p.write_text(json.dumps({"tests": [1, 2]}, indent=2)),
         "its first line is not a JSON record"),
        ("array.jsonl", lambda p: p.write_text("[1, 2, 3]\n"), "does not start with a JSON record"),
        ("case-first.jsonl", lambda p: p.write_text(json.dumps(make_case()) + "\n"), "no results header"),
        ("report.html", lambda p: p.write_text("<!DOCTYPE html><title>x</title>\n"), "does not start with a JSON"),
    ],
)
def test_files_that_are_not_results_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str,
                                                 make, fragment: str) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / name
    make(bad)
    with pytest.raises(ResultsError, match="not a results file"):
        load_results(bad)
    err = one_error_line(*run([str(bad), "-o", str(tmp_path / "r.html")], capsys))
    assert f"{bad}: not a results file" in err and fragment in err
    assert not (tmp_path / "r.html").exists()


def test_a_foreign_file_among_good_ones_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write_results(tmp_path / "good.jsonl", make_cases(5))
    (tmp_path / "notes.txt").write_text("results of last night: all fine\n")
    err = one_error_line(*run([str(good), str(tmp_path / "notes.txt"), "-o", str(tmp_path / "r.html")], capsys))
    assert "notes.txt: not a results file" in err


def test_a_results_file_cut_off_inside_its_header_is_not_a_results_file(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"type":"header","schema":"ggml-cann-confor')
    with pytest.raises(ResultsError, match="not a results file"):
        load_results(path)

"""``conform report``: outputs on success; one clear stderr line, no traceback, on bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from reports.cli import report_main
from tests.reports.synth import make_cases, write_results


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = report_main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_report_and_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = write_results(tmp_path / "r.jsonl", make_cases(50))
    argv = [str(results), "-o", str(tmp_path / "r.html"), "--csv", str(tmp_path / "s.csv")]
    code, out, err = run(argv, capsys)
    assert code == 0 and err == ""
    assert "wrote" in out and (tmp_path / "r.html").stat().st_size > 1000
    assert len((tmp_path / "s.csv").read_text().splitlines()) == 51


def test_partial_run_warns_but_succeeds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = write_results(tmp_path / "r.jsonl", make_cases(5), complete=False, truncate_tail="{")
    code, out, err = run([str(results), "-o", str(tmp_path / "r.html")], capsys)
    assert code == 0 and "PARTIAL" in out
    assert "warning" in err and "line 7 is cut off" in err


@pytest.mark.parametrize("problem", ["missing", "malformed", "expectations", "bad_expectations", "baseline",
                                     "output_is_a_directory"])
def test_bad_input_is_one_line_without_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 problem: str) -> None:
    good = write_results(tmp_path / "good.jsonl", make_cases(5))
    argv = [str(good), "-o", str(tmp_path / "r.html")]
    expected = ""
    if problem == "missing":
        argv[0] = str(tmp_path / "absent.jsonl")
        expected = "absent.jsonl: results file not found"
    elif problem == "malformed":
        lines = good.read_text().splitlines()
        lines[3] = lines[3][:40]  # cut a case in the middle of the file
        (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n")
        argv[0] = str(tmp_path / "bad.jsonl")
        expected = "bad.jsonl:4: malformed line"
    elif problem == "expectations":
        argv += ["--known-failures", str(tmp_path / "none.toml")]
        expected = "none.toml: expectations file not found"
    elif problem == "bad_expectations":
        (tmp_path / "x.toml").write_text("[[expectation]\n")
        argv += ["--known-failures", str(tmp_path / "x.toml")]
        expected = "x.toml: not valid TOML"
    elif problem == "baseline":
        argv += ["--baseline", str(tmp_path / "old.jsonl")]
        expected = "old.jsonl: results file not found"
    elif problem == "output_is_a_directory":
        (tmp_path / "r.html").mkdir()
        expected = f"-o {tmp_path / 'r.html'}: is a directory"
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("conform report: error: ")
    assert expected in err and "Traceback" not in err
    assert not (tmp_path / "r.html").is_file() and not (tmp_path / "r.html.tmp").exists()


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        report_main([])
    assert info.value.code == 2
    assert "required" in capsys.readouterr().err


def test_the_old_expectations_flag_still_reads_known_failures_with_a_deprecation_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write_results(tmp_path / "good.jsonl", make_cases(5))
    known = tmp_path / "known.toml"
    known.write_text('[[expectation]]\npattern = "NOTHING(*"\nreason = "r"\ncategory = "harness"\n')
    for flag in ("--known-failures", "--expectations"):
        code, _, err = run([str(good), "-o", str(tmp_path / f"r{flag}.html"), flag, str(known)], capsys)
        assert code == 0
        assert ("--expectations is deprecated here, use --known-failures" in err) is (flag == "--expectations")

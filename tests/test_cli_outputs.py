"""No conform command writes into a file it reads, or over a file it did not write (the one rule of
conformance/cli/common.py: check_outputs): one line on stderr, exit 2, every file there intact."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.cli.common import Output, UsageError, check_outputs, is_toml
from conformance.cli.model import main as model_main
from tests.reports.synth import make_cases, write_results

NOTES = "results of last night: all fine\n"
RELU = "RELU(type=f32,ne=[4,1,1,1],dst=f32,data=dense:5)"


def refused(code: int, capsys: pytest.CaptureFixture[str], fragment: str) -> str:
    captured = capsys.readouterr()
    assert code == 2, captured.out + captured.err
    err = captured.err
    assert err.count("\n") == 1 and "Traceback" not in err and fragment in err, err
    return err


def snapshot(folder: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    results = write_results(tmp_path / "run" / "results.jsonl", make_cases(20))
    notes = tmp_path / "notes.txt"
    notes.write_text(NOTES)
    gguf = tmp_path / "x.gguf"
    gguf.write_bytes(b"GGUF\x03\x00\x00\x00")
    return {"results": results, "notes": notes, "gguf": gguf}


@pytest.mark.parametrize("spelling", ["same", "link"])
def test_triage_write_refuses_its_results_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               spelling: str) -> None:
    results = write_results(tmp_path / "run" / "results.jsonl", make_cases(20))
    target = results
    if spelling == "link":
        target = tmp_path / "link.jsonl"
        os.symlink(results, target)
    before = results.read_bytes()
    code = main(["triage", str(results), "--write", str(target), "--out", str(tmp_path / "t")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "refusing to write over an input file" in err
    assert results.read_bytes() == before and not (tmp_path / "t").exists()


def test_triage_write_refuses_a_file_that_is_not_toml(tmp_path: Path, files: dict[str, Path],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(tmp_path)
    code = main(["triage", str(files["results"]), "--write", str(files["notes"]), "--out", str(tmp_path / "t")])
    refused(code, capsys, "is not a TOML file")
    assert snapshot(tmp_path) == before and not (tmp_path / "t").exists()


def test_triage_write_appends_to_a_toml_file(tmp_path: Path) -> None:
    entries = tmp_path / "known.toml"
    entries.write_text('[[bug]]\nid = "x"\n')
    assert is_toml(entries)
    check_outputs([Output("--write", entries, "a TOML file", is_toml)], [])  # accepted: no exception
    with pytest.raises(UsageError, match="given as two outputs"):
        check_outputs([Output("-o", entries, "a TOML file", is_toml), Output("--csv", entries, "", is_toml)], [])


@pytest.mark.parametrize("how", ["out_is_a_file", "out_is_the_history", "emit_c_is_a_file"])
def test_repro_refuses_to_write_over_a_file(tmp_path: Path, files: dict[str, Path],
                                            capsys: pytest.CaptureFixture[str], how: str) -> None:
    before = snapshot(tmp_path)
    if how == "out_is_a_file":
        code, fragment = main(["repro", RELU, "--out", str(files["notes"])]), "exists and is not a folder"
    elif how == "out_is_the_history":
        code = main(["repro", "--history", str(files["results"]), "--out", str(files["results"])])
        fragment = "refusing to write over an input file"
    else:
        code, fragment = main(["repro", RELU, "--emit-c", str(files["notes"])]), "is not a folder"
    refused(code, capsys, fragment)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("target", ["results", "notes", "csv_on_notes"])
def test_report_refuses_an_input_or_a_file_it_did_not_write(tmp_path: Path, files: dict[str, Path],
                                                            capsys: pytest.CaptureFixture[str], target: str) -> None:
    before = snapshot(tmp_path)
    argv = ["report", str(files["results"])]
    if target == "csv_on_notes":
        argv += ["-o", str(tmp_path / "r.html"), "--csv", str(files["notes"])]
        fragment = "is not a support CSV"
    else:
        argv += ["-o", str(files[target])]
        fragment = "refusing to write over an input file" if target == "results" else "is not a conform HTML report"
    refused(main(argv), capsys, fragment)
    assert snapshot(tmp_path) == before and not (tmp_path / "r.html").exists()


def test_report_replaces_its_own_report_and_csv(tmp_path: Path, files: dict[str, Path],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["report", str(files["results"]), "-o", str(tmp_path / "r.html"), "--csv", str(tmp_path / "s.csv")]
    assert main(argv) == 0 and main(argv) == 0  # the second run replaces what the first wrote
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize("how", ["out_is_the_model", "out_is_a_file"])
def test_model_refuses_to_write_over_a_file(tmp_path: Path, files: dict[str, Path],
                                            capsys: pytest.CaptureFixture[str], how: str) -> None:
    before = snapshot(tmp_path)
    out = files["gguf"] if how == "out_is_the_model" else files["notes"]
    code = model_main([str(files["gguf"]), "--out", str(out)])
    refused(code, capsys, "refusing to write over an input file" if how == "out_is_the_model"
            else "exists and is not a folder")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("how", ["baseline_is_the_results", "report_is_not_a_report", "out_is_a_file"])
def test_perf_refuses_to_write_over_a_file(tmp_path: Path, files: dict[str, Path],
                                           capsys: pytest.CaptureFixture[str], how: str) -> None:
    out = tmp_path / "perf"
    out.mkdir()
    argv = ["perf", "--shapes", "llama-tiny", "--ops", "ADD", "--repeats", "1", "--warmup", "0", "--no-report"]
    if how == "baseline_is_the_results":
        (out / "results.jsonl").write_bytes(files["results"].read_bytes())
        argv += ["--out", str(out), "--baseline", str(out / "results.jsonl")]
        fragment = "refusing to write over an input file"
    elif how == "report_is_not_a_report":
        (out / "report.html").write_text(NOTES)
        argv = [a for a in argv if a != "--no-report"] + ["--out", str(out)]
        fragment = "is not a conform HTML report"
    else:
        argv += ["--out", str(files["notes"])]
        fragment = "exists and is not a folder"
    before = snapshot(tmp_path)
    refused(main(argv), capsys, fragment)
    assert snapshot(tmp_path) == before

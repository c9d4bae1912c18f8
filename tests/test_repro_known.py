"""``conform repro`` counts a case as the suite does: a failure that a listed entry gives (the entry lists
that very outcome) is KNOWN, named with the entry, and exits 0; ``--strict`` makes it exit 1; a failure no
entry explains (a faulty plug-in's wrong value, even beside a crash-only entry) still exits 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.cli import main

# README's first repro line: ggml's CPU evaluates GELU_QUICK of F32 through an F16 table, a listed deviation
GELU_QUICK = "GELU_QUICK(type=f32,ne=[64,3,1,1],dst=f32,data=dense:5)"
DEVIATION = "cpu-gelu-quick-f16-table"
FAULTY = "tests.plugins.faulty:erf_gelu_quick"  # GELU_QUICK computed as erf-GELU: wrong, no entry

CRASH_ONLY_ENTRY = f"""
[[bug]]
id = "plugin-gelu-quick-crashes"
devices = "{FAULTY}"
op = "GELU_QUICK"
outcomes = ["crash"]
reason = "a crash-only entry: it must not explain a wrong value"
repro = "{GELU_QUICK}"
"""


def repro(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["repro", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_readme_line_is_known_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = repro(capsys, GELU_QUICK, "--device", "ggml:CPU")
    assert code == 0, out + err
    assert out.startswith(f"KNOWN  {GELU_QUICK}  on ggml:CPU")
    assert f"known bug {DEVIATION}" in out and "judged against the entry's own bound" in out


def test_strict_makes_a_known_failure_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = repro(capsys, GELU_QUICK, "--device", "ggml:CPU", "--strict")
    assert code == 1 and out.startswith("KNOWN") and DEVIATION in out


def test_a_passing_case_exits_0_even_under_strict(capsys: pytest.CaptureFixture[str]) -> None:
    case = "RELU(type=f32,ne=[64,3,1,1],dst=f32,data=dense:5)"
    code, out, _ = repro(capsys, case, "--device", "ggml:CPU", "--strict")
    assert code == 0 and out.startswith(f"PASS  {case}") and "known bug" not in out


def test_a_faulty_plugin_without_an_entry_still_fails(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = repro(capsys, GELU_QUICK, "--device", FAULTY)
    assert code == 1 and out.startswith(f"FAIL  {GELU_QUICK}")
    assert "no listed entry gives FAIL for this case: unexpected" in out


def test_a_crash_only_entry_does_not_explain_a_wrong_value(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    entries = tmp_path / "crash-only.toml"
    entries.write_text(CRASH_ONLY_ENTRY)
    code, out, _ = repro(capsys, GELU_QUICK, "--device", FAULTY, "--expectations", str(entries))
    assert code == 1 and out.startswith("FAIL") and "plugin-gelu-quick-crashes" not in out
    code, out, _ = repro(capsys, "--sequence", GELU_QUICK, "--device", FAULTY, "--expectations", str(entries))
    assert code == 1 and "UNEXPECTED: no listed entry gives FAIL" in out


def test_an_entry_for_the_plugins_wrong_value_makes_it_known(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    entries = tmp_path / "fail.toml"
    entries.write_text(CRASH_ONLY_ENTRY.replace('["crash"]', '["fail"]'))
    code, out, _ = repro(capsys, GELU_QUICK, "--device", FAULTY, "--expectations", str(entries))
    assert code == 0 and out.startswith("KNOWN") and "known bug plugin-gelu-quick-crashes" in out


def test_a_sequence_ending_in_a_known_failure_names_the_entry(capsys: pytest.CaptureFixture[str]) -> None:
    relu = "RELU(type=f32,ne=[64,3,1,1],dst=f32,data=dense:5)"
    code, out, _ = repro(capsys, "--sequence", relu, GELU_QUICK, "--device", "ggml:CPU")
    assert code == 0, out
    assert f"2/2 KNOWN       {GELU_QUICK}  (known bug {DEVIATION})" in out
    assert f"KNOWN: known bug {DEVIATION}" in out
    code, _, _ = repro(capsys, "--sequence", relu, GELU_QUICK, "--device", "ggml:CPU", "--strict")
    assert code == 1

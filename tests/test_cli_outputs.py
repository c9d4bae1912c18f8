"""No conform command writes into a file it reads: one line on stderr, exit 2, the input intact."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conformance.cli import main
from tests.reports.synth import make_cases, write_results


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

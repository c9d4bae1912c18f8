"""The results reader: strict lines, a tolerated cut-off tail, partial runs, safe artefacts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from results.load import ResultsError, as_float, load_artefact, load_many, load_results
from results.schema import dumps_record
from tests.reports.synth import footer, header, make_case, make_cases, write_results


def test_complete_file_reads_all_records(tmp_path: Path) -> None:
    path = write_results(tmp_path / "r.jsonl", make_cases(20))
    results = load_results(path)
    assert len(results.headers) == 1 and len(results.footers) == 1
    assert len(results.cases) == 20
    assert not results.is_partial and results.partial_reasons() == []


def test_truncated_final_line_is_dropped_and_reported(tmp_path: Path) -> None:
    path = write_results(tmp_path / "r.jsonl", make_cases(5), complete=False,
                         truncate_tail='{"type":"case","case_id":"ADD(type=f3')
    results = load_results(path)
    assert len(results.cases) == 5
    assert results.truncated_line == 7  # header + 5 cases, then the cut-off line
    assert results.is_partial
    assert any("line 7" in reason for reason in results.partial_reasons())


def test_fewer_footers_than_headers_is_partial(tmp_path: Path) -> None:
    lines = [header(worker="gw0"), header(worker="gw1"), make_case(worker="gw0"),
             make_case(worker="gw1", index=1), footer(worker="gw0")]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(dumps_record(r) + "\n" for r in lines))
    results = load_results(path)
    assert results.is_partial
    assert "2 writing process(es) started but only 1" in results.partial_reasons()[0]


@pytest.mark.parametrize(
    "bad_line, fragment",
    [
        ("{not json", "malformed line"),
        ('{"type":"case","metrics":{"nmse":NaN}}', "NaN"),
        ("[1, 2]", "expected a JSON object"),
        ('{"no_type": 1}', 'no "type"'),
        ('{"type":"case","case_id":"X()","device":"ggml:CPU","op":"X","outcome":"boom"}', "unknown outcome"),
        ('{"type":"case","device":"ggml:CPU","op":"X","outcome":"pass"}', "lacks case_id"),
    ],
)
def test_bad_line_in_the_middle_names_file_and_line(tmp_path: Path, bad_line: str, fragment: str) -> None:
    path = tmp_path / "r.jsonl"
    lines = [dumps_record(header()), dumps_record(make_case()), bad_line, dumps_record(make_case(index=2))]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ResultsError) as info:
        load_results(path)
    assert f"{path}:3:" in str(info.value)
    assert fragment in str(info.value)


def test_bad_last_line_with_newline_is_an_error_not_a_truncation(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(dumps_record(header()) + "\n{oops\n")
    with pytest.raises(ResultsError, match=r":2: malformed"):
        load_results(path)


def test_invalid_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    head, case = dumps_record(header()).encode(), dumps_record(make_case()).encode()
    path.write_bytes(head + b"\n\xff\xfe\n" + case + b"\n")
    with pytest.raises(ResultsError, match=r":2: malformed"):
        load_results(path)


def test_other_schema_and_newer_version_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(dumps_record(header(schema="something/else")) + "\n")
    with pytest.raises(ResultsError, match="not a results file"):
        load_results(path)
    path.write_text(dumps_record(header(schema_version=99)) + "\n")
    with pytest.raises(ResultsError, match="newer than this reader"):
        load_results(path)


def test_missing_file_and_empty_file(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="not found"):
        load_many([tmp_path / "absent.jsonl"])
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ResultsError, match="empty results file"):
        load_results(tmp_path / "empty.jsonl")


def test_nan_strings_become_floats() -> None:
    assert as_float("nan") != as_float("nan")
    assert as_float("inf") == float("inf") and as_float("-inf") == float("-inf")
    assert as_float(2) == 2.0 and as_float(True) is None and as_float("x") is None


def test_artefacts_never_unpickle(tmp_path: Path) -> None:
    good = tmp_path / "good.npz"
    np.savez(good, golden=np.arange(4, dtype=np.float32), device=np.ones(4, dtype=np.float16))
    arrays = load_artefact(good)
    assert set(arrays) == {"golden", "device"} and arrays["device"].dtype == np.float16
    evil = tmp_path / "evil.npz"
    np.savez(evil, inputs_0=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ValueError):
        load_artefact(evil)

"""Known failures: matching, never counted as passes, stale entries, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from reports.analysis import KNOWN_ONLY, analyse, classify_cell
from reports.expectations import ExpectationsError, load_expectations
from results.load import load_results
from tests.reports.synth import make_case, write_results

EXPECTATIONS = '''
[[expectation]]
pattern = "MUL_MAT(type=q4_0,*"
reason = "Q4_0 matmul accumulates in f16"
issue = "https://github.com/ggml-org/llama.cpp/issues/1"
category = "backend-bug"
device = "ggml:CANN*"

[[expectation]]
pattern = "tests/test_ops.py::test_rope*"
reason = "harness: ROPE yarn not modelled"
category = "harness"

[[expectation]]
pattern = "SOFT_MAX(*"
reason = "was broken in 8.0.RC1"
category = "backend-bug"

[[expectation]]
pattern = "CONCAT(*"
reason = "never run here"
category = "unsupported"
'''


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "expected.toml"
    path.write_text(text)
    return path


def analysed(tmp_path: Path):
    cases = [
        make_case("MUL_MAT", device="ggml:CANN0", src0="q4_0", outcome="fail", index=1),
        make_case("MUL_MAT", device="ggml:CANN0", src0="q4_0", outcome="pass", index=2),
        # the first entry is for CANN devices only: this CPU failure stays unexpected
        make_case("MUL_MAT", device="ggml:CPU", src0="q4_0", outcome="fail", index=3),
        make_case("ROPE", device="ggml:CANN0", outcome="crash", index=4),
        make_case("SOFT_MAX", device="ggml:CANN0", outcome="pass", index=5),
    ]
    results = load_results(write_results(tmp_path / "r.jsonl", cases))
    return analyse([results], expectations=load_expectations(write(tmp_path, EXPECTATIONS)))


def test_matched_failures_are_known_and_not_passes(tmp_path: Path) -> None:
    data = analysed(tmp_path)
    npu = data.device_summaries["ggml:CANN0"]
    assert npu.known == 2 and npu.counts["pass"] == 2 and npu.unexpected_failures == 0
    assert npu.pass_rate == 0.5  # known failures still count against the pass rate
    known = {item.case["data_seed"]: c.known_cause.id.split()[0] for c in data.known_clusters for item in c.shown}
    assert known == {1: "#1", 4: "#2"}
    unexpected = [item.case["data_seed"] for c in data.clusters for item in c.shown]
    assert unexpected == [3]
    cell = data.matrix[("MUL_MAT", "q4_0→f32")]["ggml:CANN0"]
    assert cell.known == 1 and classify_cell(cell) == KNOWN_ONLY  # known, still not a pass (nor "claimed, fails")


def test_failures_and_declined_cases_are_counted_apart(tmp_path: Path) -> None:
    cases = [make_case("CONCAT", outcome="unsupported", supported=False, index=1),
             make_case("CONCAT", outcome="fail", index=2), make_case("CONCAT", outcome="fail", index=3)]
    results = load_results(write_results(tmp_path / "r.jsonl", cases))
    expectations = load_expectations(write(tmp_path, EXPECTATIONS))
    analyse([results], expectations=expectations)
    data = analyse([results], expectations=expectations)  # reused: counts start afresh
    concat = data.expectations[3]
    assert (concat.matched_failures, concat.matched_unsupported, concat.is_stale) == (2, 1, False)
    assert data.device_summaries["ggml:CPU"].known == 2


def test_stale_entries(tmp_path: Path) -> None:
    data = analysed(tmp_path)
    stale = {e.index: e for e in data.stale_expectations}
    assert set(stale) == {3, 4}
    assert stale[3].matched_passing == 1  # SOFT_MAX passes now: fixed?
    assert stale[4].matched_passing == 0  # matches nothing at all


def test_exact_case_id_with_brackets_matches(tmp_path: Path) -> None:
    case = make_case("ADD", outcome="fail", index=7)
    entry_text = f'[[expectation]]\npattern = "{case["case_id"]}"\nreason = "r"\ncategory = "harness"\n'
    path = write(tmp_path, entry_text)
    (entry,) = load_expectations(path)
    assert entry.matches(case)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("[[expectation]\npattern = 1", "not valid TOML"),
        ('[[expectation]]\npattern = "A*"\nreason = "r"\ncategory = "flaky"\n', "category 'flaky'"),
        ('[[expectation]]\npattern = "A*"\ncategory = "harness"\n', "'reason' is required"),
        ('[[expectation]]\npattern = "A*"\nreason = "r"\ncategory = "harness"\nreson = "x"\n', "unknown key"),
        ('[[expectations]]\npattern = "A*"\n', "unknown top-level key"),
        ('expectation = "x"\n', "array of tables"),
    ],
)
def test_malformed_expectations_give_a_clear_error(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(ExpectationsError) as info:
        load_expectations(write(tmp_path, text))
    assert fragment in str(info.value) and "expected.toml" in str(info.value)


def test_missing_expectations_file(tmp_path: Path) -> None:
    with pytest.raises(ExpectationsError, match="not found"):
        load_expectations(tmp_path / "nope.toml")

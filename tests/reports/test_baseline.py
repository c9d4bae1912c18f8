"""Diff against a baseline run: every category, matched by case id and device."""

from __future__ import annotations

from pathlib import Path

from reports.analysis import diff_against_baseline
from reports.load import load_results
from tests.reports.synth import make_case, write_results


def test_baseline_categories(tmp_path: Path) -> None:
    before = [
        make_case("ADD", outcome="pass", index=1),  # -> fail: new failure
        make_case("ADD", outcome="fail", index=2),  # -> pass: fixed
        make_case("CPY", outcome="unsupported", supported=False, index=3),  # -> pass: newly supported
        make_case("CPY", outcome="pass", index=4),  # -> unsupported: newly unsupported
        make_case("MUL_MAT", outcome="pass", error_ratio=0.1, index=5),  # error 0.1 -> 0.5: grew 5x
        make_case("SCALE", outcome="pass", error_ratio=0.3, index=6),  # 0.3 -> 0.5: not 2x
        make_case("ROPE", outcome="pass", error_ratio=0.0, index=7),  # 0 -> 0.015: under the floor
        make_case("ADD", outcome="pass", index=8, device="ggml:CANN0"),  # same case id, other device
        make_case("GONE", outcome="pass", index=9),
    ]
    after = [
        make_case("ADD", outcome="fail", index=1),
        make_case("ADD", outcome="pass", index=2),
        make_case("CPY", outcome="pass", index=3),
        make_case("CPY", outcome="unsupported", supported=False, index=4),
        make_case("MUL_MAT", outcome="pass", error_ratio=0.5, index=5),
        make_case("SCALE", outcome="pass", error_ratio=0.5, index=6),
        make_case("ROPE", outcome="pass", error_ratio=0.015, index=7),
        make_case("ADD", outcome="pass", index=8, device="ggml:CANN0"),
        make_case("NEW", outcome="fail", index=10),
    ]
    old = load_results(write_results(tmp_path / "old.jsonl", before))
    new = load_results(write_results(tmp_path / "new.jsonl", after))
    diff = diff_against_baseline([new], [old])
    assert [e.case_id.split("(")[0] + str(e.case_id[-2]) for e in diff.new_failures] == ["ADD1"]
    assert [(e.before, e.after) for e in diff.new_failures] == [("pass", "fail")]
    assert [e.case_id[-2] for e in diff.fixed] == ["2"]
    assert [e.case_id[-2] for e in diff.newly_supported] == ["3"]
    assert [e.case_id[-2] for e in diff.newly_unsupported] == ["4"]
    assert [(g.op, g.before, g.after) for g in diff.error_growth] == [("MUL_MAT", 0.1, 0.5)]
    assert diff.error_growth[0].factor == 5.0
    assert (diff.compared, diff.only_current, diff.only_baseline) == (8, 1, 1)

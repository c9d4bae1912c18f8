"""The baseline diff compares failure clusters and per-op figures (pass rate, worst error ratio)
across runs that drew different cases, and support changes per matrix cell; not case ids."""

from __future__ import annotations

from pathlib import Path

from reports.baseline import diff_against_baseline
from reports.html import build_report
from results.load import load_results
from tests.reports.synth import header, make_case, write_results


def run(tmp_path: Path, name: str, cases: list[dict], started: str = "2026-11-30T01:00:00+00:00"):  # type: ignore[no-untyped-def]
    run_id = cases[0]["run_id"] if cases else name
    head = header(run_id=run_id, started=started, devices=sorted({c["device"] for c in cases}))
    return load_results(write_results(tmp_path / f"{name}.jsonl", cases, header_record=head))


def cases_of(op: str, seed_base: int, passed: int, failed: int = 0, run_id: str = "now", **kw) -> list[dict]:  # type: ignore[no-untyped-def]
    """``passed`` + ``failed`` cases of one op with data seeds no other run shares (fresh case ids)."""
    out = [make_case(op, outcome="pass", error_ratio=kw.get("ratio", 0.1), index=seed_base + i, run_id=run_id)
           for i in range(passed)]
    out += [make_case(op, outcome="fail", error_ratio=kw.get("fail_ratio", 5.0), index=seed_base + passed + i,
                      run_id=run_id, src0=kw.get("src0", "f32")) for i in range(failed)]
    return out


def test_the_same_bug_in_runs_that_share_no_case_id_is_not_new(tmp_path: Path) -> None:
    before = run(tmp_path, "old", cases_of("GELU_QUICK", 0, 90, 10, run_id="old"))
    after = run(tmp_path, "new", cases_of("GELU_QUICK", 1000, 88, 12))
    assert not {c["case_id"] for c in before.cases} & {c["case_id"] for c in after.cases}
    diff = diff_against_baseline([after], [before])
    assert diff.new_clusters == [] and diff.gone_clusters == []
    (grown,) = diff.grown_clusters  # 10 -> 12 cases of the same cluster
    assert (grown.op, grown.count_before, grown.count_now) == ("GELU_QUICK", 10, 12)
    (trend,) = diff.op_trends
    assert (trend.passed_before, trend.ran_before, trend.passed_now, trend.ran_now) == (90, 100, 88, 100)
    assert not trend.pass_rate_fell  # 90% -> 88% is within the noise of 100 draws


def test_new_gone_and_grown_clusters(tmp_path: Path) -> None:
    before = run(tmp_path, "old", cases_of("ADD", 0, 50, 0, run_id="old") + cases_of("MUL", 100, 40, 5, run_id="old")
                 + cases_of("DIV", 200, 40, 3, run_id="old", fail_ratio=2.0))
    after = run(tmp_path, "new", cases_of("ADD", 1000, 45, 5) + cases_of("MUL", 1100, 45, 0)
                + cases_of("DIV", 1200, 40, 3, fail_ratio=9.0))
    diff = diff_against_baseline([after], [before])
    assert [(c.op, c.count_now) for c in diff.new_clusters] == [("ADD", 5)]
    assert [(c.op, c.count_before, c.still_ran) for c in diff.gone_clusters] == [("MUL", 5, True)]
    assert [(c.op, c.worst_before, c.worst_now) for c in diff.grown_clusters] == [("DIV", 2.0, 9.0)]
    falls = {t.op for t in diff.pass_rate_falls}
    assert falls == {"ADD"}  # 100% -> 90% over 50 draws is beyond noise


def test_error_growth_on_passing_cases(tmp_path: Path) -> None:
    before = run(tmp_path, "old", cases_of("MUL_MAT", 0, 30, ratio=0.1, run_id="old")
                 + cases_of("SCALE", 100, 30, ratio=0.3, run_id="old")
                 + cases_of("ROPE", 200, 30, ratio=0.0, run_id="old"))
    after = run(tmp_path, "new", cases_of("MUL_MAT", 1000, 30, ratio=0.5) + cases_of("SCALE", 1100, 30, ratio=0.5)
                + cases_of("ROPE", 1200, 30, ratio=0.015))
    diff = diff_against_baseline([after], [before])
    assert [(t.op, t.worst_passing_before, t.worst_passing_now, t.growth) for t in diff.error_growth] == [
        ("MUL_MAT", 0.1, 0.5, 5.0)]  # SCALE grew 1.7x; ROPE is under the floor


def test_several_baseline_runs_give_a_pass_rate_series_oldest_first(tmp_path: Path) -> None:
    older = run(tmp_path, "n1", cases_of("ADD", 0, 10, 0, run_id="n1"), started="2026-11-28T01:00:00+00:00")
    old = run(tmp_path, "n2", cases_of("ADD", 100, 8, 2, run_id="n2"), started="2026-11-29T01:00:00+00:00")
    after = run(tmp_path, "now", cases_of("ADD", 200, 5, 5))
    diff = diff_against_baseline([after], [old, older])  # given newest first: ordered by start time
    assert diff.baseline_runs == ["n1 (2026-11-28)", "n2 (2026-11-29)"]
    (trend,) = diff.op_trends
    assert trend.series == [("n1 (2026-11-28)", 1.0), ("n2 (2026-11-29)", 0.8), ("this run", 0.5)]
    assert (trend.passed_before, trend.ran_before) == (18, 20) and trend.pass_rate_fell


def test_support_changes_per_cell(tmp_path: Path) -> None:
    before = run(tmp_path, "old", [make_case("CPY", outcome="unsupported", supported=False, index=1, run_id="old"),
                                   make_case("ADD", outcome="pass", index=2, run_id="old")])
    after = run(tmp_path, "new", [make_case("CPY", outcome="fail", supported=True, index=3),
                                  make_case("ADD", outcome="unsupported", supported=False, index=4)])
    diff = diff_against_baseline([after], [before])
    assert [(c.op, c.before, c.now) for c in diff.cell_changes] == [("ADD", "all-pass", "not-claimed"),
                                                                    ("CPY", "not-claimed", "claimed-fail")]


def test_the_baseline_section_renders(tmp_path: Path) -> None:
    before = write_results(tmp_path / "old.jsonl", cases_of("ADD", 0, 50, 0, run_id="old"))
    after = write_results(tmp_path / "new.jsonl", cases_of("ADD", 1000, 40, 10))
    out = tmp_path / "report.html"
    build_report([after], out, baseline_paths=[before])
    html = out.read_text()
    section = html[html.index('id="baseline"'):html.index('id="matrix"')]
    assert 'id="diff-new-clusters"' in section and "New failure clusters (1)" in section
    assert 'class="plot rate"' in section and "100.0% → 80.0%" in section and "<strong>fell</strong>" in section

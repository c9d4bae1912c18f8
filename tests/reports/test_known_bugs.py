"""Known backend bugs the harness matched (``expected`` on the record): listed apart with their
reason, never passes, never new failures; a passing record that carries one marks the bug stale."""

from __future__ import annotations

from pathlib import Path

from reports.analysis import analyse
from reports.expectations import load_expectations
from reports.html import build_report
from results.load import load_results
from tests.reports.synth import make_case, write_results

BUG = {"id": "vulkan-silu-ulp", "reason": "lavapipe's expf is 4 ulp off at |y| ≈ 0.006",
       "repro": "SILU(type=f32,ne=[4,1,1,1],dst=f32,data=dense:7)"}
FIXED = {"id": "cpu-clamp-row-stride", "reason": "row j addressed at j·nb1", "repro": "CLAMP(type=f32,...)"}


def cases() -> list[dict]:
    return [
        make_case("SILU", device="ggml:Vulkan0", outcome="fail", error_ratio=1.31, index=1, expected=BUG),
        make_case("SILU", device="ggml:Vulkan0", outcome="fail", error_ratio=1.2, index=2, expected=BUG),
        make_case("SILU", device="ggml:Vulkan0", outcome="pass", error_ratio=0.4, index=3, expected=BUG),
        make_case("SILU", device="ggml:Vulkan0", outcome="pass", error_ratio=0.3, index=4),
        make_case("CLAMP", device="ggml:Vulkan0", outcome="pass", error_ratio=0.0, index=5, expected=FIXED),
        make_case("ADD", device="ggml:Vulkan0", outcome="fail", error_ratio=3.0, index=6),
    ]


def test_known_bug_failures_are_apart_and_not_passes(tmp_path: Path) -> None:
    data = analyse([load_results(write_results(tmp_path / "r.jsonl", cases()))])
    summary = data.device_summaries["ggml:Vulkan0"]
    assert summary.known == 2 and summary.unexpected_failures == 1 and summary.counts["pass"] == 3
    assert summary.pass_rate == 3 / 6  # a known failure is still not a pass
    assert [cluster.key.op for cluster in data.clusters] == ["ADD"]
    (known,) = data.known_clusters
    assert known.count == 2 and known.known_cause.id == BUG["id"] and known.known_cause.reason == BUG["reason"]
    assert data.matrix[("SILU", "f32")]["ggml:Vulkan0"].known == 2


def test_a_bug_whose_cases_all_pass_is_stale(tmp_path: Path) -> None:
    data = analyse([load_results(write_results(tmp_path / "r.jsonl", cases()))])
    bugs = {bug.cause.id: bug for bug in data.known_bugs}
    assert (bugs[BUG["id"]].failures, bugs[BUG["id"]].passing, bugs[BUG["id"]].is_stale) == (2, 1, False)
    assert (bugs[FIXED["id"]].failures, bugs[FIXED["id"]].passing, bugs[FIXED["id"]].is_stale) == (0, 1, True)
    assert [bug.cause.id for bug in data.stale_known_bugs] == [FIXED["id"]]


def test_the_page_lists_known_bugs_with_reason_and_repro(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    build_report([write_results(tmp_path / "r.jsonl", cases())], out)
    html = out.read_text()
    known = html[html.index('id="known"'):html.index('id="environment"')]
    failures = html[html.index('id="failures"'):html.index('id="known"')]
    assert BUG["id"] in known and "lavapipe" in known and BUG["repro"] in known
    assert "stale</strong>: every matching case passed" in known and FIXED["id"] in known
    assert "SILU(" not in failures and "ADD(" in failures
    assert "Known failures (2)" in html


def test_the_expectations_file_still_works_next_to_known_bugs(tmp_path: Path) -> None:
    expectations = tmp_path / "known.toml"
    expectations.write_text('[[expectation]]\npattern = "ADD(*"\nreason = "report-side entry"\n'
                            'category = "backend-bug"\n\n[[expectation]]\npattern = "SILU(*"\n'
                            'reason = "never used"\ncategory = "harness"\n')
    results = load_results(write_results(tmp_path / "r.jsonl", cases()))
    data = analyse([results], expectations=load_expectations(expectations))
    assert data.clusters == [] and data.known_failures == 3
    add_entry, silu_entry = data.expectations
    # the record's own bug wins over the file: SILU's failures stay with the harness's bug
    assert add_entry.matched_failures == 1 and silu_entry.matched_failures == 0 and silu_entry.is_stale
    causes = sorted((cluster.known_cause.from_harness, cluster.count) for cluster in data.known_clusters)
    assert causes == [(False, 1), (True, 2)]


def test_a_run_whose_only_failures_are_known_bugs_is_clean(tmp_path: Path) -> None:
    """ggml:CPU's own kernel bugs, listed as known: the cell stays marked, the run is green."""
    cases = [make_case("CLAMP", outcome="crash", supported=True, index=1, expected=FIXED),
             make_case("CLAMP", outcome="fail", supported=True, index=2, expected=FIXED),
             make_case("CLAMP", outcome="pass", index=3)]
    out = tmp_path / "report.html"
    data = build_report([write_results(tmp_path / "r.jsonl", cases)], out)
    html = out.read_text()
    assert data.is_green and data.unexpected_claimed_cells() == 0
    verdict = html[html.index('id="verdict"'):].split("</div>", 1)[0]
    assert "Every case that no known bug covers passed</span> (1 of 1 judged)." in verdict
    assert '<span class="pill o-known">2 known</span> failures (known bugs, in 1 support-matrix cell that fails ' \
           'only by known bugs) are <a href="#known">listed apart</a>.' in verdict
    # the cell is "known only", in the calm colour of known failures: nothing on the page is marked claimed-fail
    assert 'class="cell k-known-only" data-kind="known-only" data-known="all"' in html and "(2 known)" in html
    assert "k-claimed-fail" not in html.split("</style>", 1)[1]
    cases.append(make_case("CLAMP", outcome="fail", supported=True, index=4))  # one that no bug explains
    data = build_report([write_results(tmp_path / "r2.jsonl", cases)], out)
    assert not data.is_green and data.unexpected_claimed_cells() == 1
    assert "; 1 support-matrix cell where the backend claims support but cases fail" in out.read_text()

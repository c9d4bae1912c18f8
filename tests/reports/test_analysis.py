"""Aggregation: matrix cells, keys, device columns, coverage and per-op error."""

from __future__ import annotations

from pathlib import Path

import pytest

from reports.analysis import (
    ALL_PASS,
    CLAIMED_FAIL,
    NONE_PASS,
    NOT_CLAIMED,
    NOT_RUN,
    SOME_PASS,
    CellStats,
    analyse,
    classify_cell,
    device_name,
    dtype_key,
    op_params_text,
)
from reports.html import render_report
from results.load import load_results
from tests.reports.synth import header, make_case, make_cases, write_results


def cell_of(*cases: dict) -> CellStats:
    cell = CellStats()
    for case in cases:
        cell.add(case, known=False)
    return cell


@pytest.mark.parametrize(
    "cases, kind",
    [
        ([make_case(outcome="pass"), make_case(outcome="pass")], ALL_PASS),
        ([make_case(outcome="pass"), make_case(outcome="fail", supported=None)], SOME_PASS),
        ([make_case(outcome="pass"), make_case(outcome="unsupported", supported=False)], SOME_PASS),
        ([make_case(outcome="fail", supported=None), make_case(outcome="crash", supported=None)], NONE_PASS),
        ([make_case(outcome="pass"), make_case(outcome="fail", supported=True)], CLAIMED_FAIL),
        ([make_case(outcome="timeout", supported=True)], CLAIMED_FAIL),
        ([make_case(outcome="error", supported=True)], CLAIMED_FAIL),
        ([make_case(outcome="unsupported", supported=False)], NOT_CLAIMED),
        ([make_case(outcome="fail", supported=False)], NONE_PASS),  # declined, forced to run anyway
        ([], NOT_RUN),
    ],
)
def test_cell_classification(cases: list[dict], kind: str) -> None:
    assert classify_cell(cell_of(*cases)) == kind


def test_no_records_is_not_run() -> None:
    assert classify_cell(None) == NOT_RUN


def test_keys() -> None:
    assert dtype_key({"src0": "f16", "dst": "f16"}) == "f16"
    assert dtype_key({"src0": "q4_0", "src1": "f32", "dst": "f32"}) == "q4_0→f32"
    assert dtype_key({"dst": "f32"}) == "f32"
    assert dtype_key(None) == "?"
    assert device_name("ggml:CANN0") == "CANN0" and device_name("golden") == "golden"
    assert op_params_text("GELU_QUICK(type=f16,ne_a=[128,2,2,2],v=0)") == "type=f16,ne_a=[128,2,2,2],v=0"


def test_two_devices_in_two_files_merge_into_two_columns(tmp_path: Path) -> None:
    cpu = write_results(tmp_path / "cpu.jsonl", make_cases(40, devices=("ggml:CPU",)))
    npu = write_results(tmp_path / "npu.jsonl", make_cases(40, devices=("ggml:CANN0",), run_id="run-2"))
    data = analyse([load_results(cpu), load_results(npu)])
    assert [column.key for column in data.columns] == ["ggml:CPU", "ggml:CANN0"]
    assert data.columns[1].name == "CANN0" and data.columns[1].backend_reg_name == "CANN"
    for cells in data.matrix.values():
        assert set(cells) <= {"ggml:CPU", "ggml:CANN0"}
    assert data.device_summaries["ggml:CPU"].total == 40 and data.device_summaries["ggml:CANN0"].total == 40


def test_same_device_on_two_hosts_gets_a_column_per_host(tmp_path: Path) -> None:
    first = write_results(tmp_path / "a.jsonl", [make_case(device="ggml:CANN0")],
                          header_record=header(host="node-a", devices=["ggml:CANN0"]))
    second = write_results(tmp_path / "b.jsonl", [make_case(device="ggml:CANN0", run_id="run-2")],
                           header_record=header(run_id="run-2", host="node-b", devices=["ggml:CANN0"]))
    data = analyse([load_results(first), load_results(second)])
    assert [column.key for column in data.columns] == ["ggml:CANN0@node-a", "ggml:CANN0@node-b"]
    assert all(summary.total == 1 for summary in data.device_summaries.values())


def test_per_op_coverage_and_worst_error(tmp_path: Path) -> None:
    cases = [
        make_case("ROPE", params={"mode": 0, "n_dims": 64}, error_ratio=0.2, index=0),
        make_case("ROPE", params={"mode": 2, "n_dims": 128}, error_ratio=0.9, index=1),
        make_case("ROPE", params={"mode": 8, "n_dims": 128}, outcome="fail", error_ratio=4.0, index=2),
        make_case("ROPE", params={"mode": 8, "n_dims": 32}, src0="f16", dst="f16", index=3),
    ]
    data = analyse([load_results(write_results(tmp_path / "r.jsonl", cases))])
    rope = data.ops["ROPE"]
    assert rope.coverage["mode"].values == {"0", "2", "8"}
    assert rope.coverage["n_dims"].range_text == "32 … 128"
    assert rope.coverage["type"].values == {"f32", "f16"}
    stats = rope.per_device["ggml:CPU"]
    assert (stats.cases, stats.ran, stats.passed, stats.failed) == (4, 4, 3, 1)
    assert stats.worst_ratio == 4.0 and stats.worst_passing_ratio == 0.9


def test_examples_are_capped_per_cluster_and_open_with_the_smallest(tmp_path: Path) -> None:
    cases = [make_case("MUL_MAT", outcome="fail", error_ratio=2.0 + i, index=i) for i in range(30)]
    cases[17]["shapes"] = {"src0": [1, 1, 1, 1], "dst": [1, 1, 1, 1]}  # the shrunk one, mid-file
    data = analyse([load_results(write_results(tmp_path / "r.jsonl", cases))], max_examples_per_cluster=10)
    (cluster,) = data.clusters
    assert cluster.count == 30 and len(cluster.shown) == 11 and cluster.not_shown == 19
    assert cluster.smallest is not None and cluster.smallest.case["data_seed"] == 17
    assert [item.error_ratio for item in cluster.examples] == [31.0 - i for i in range(10)]  # then worst first
    assert cluster.worst_ratio == 31.0


def test_artefact_link_is_relative_to_the_report_and_never_a_scheme(tmp_path: Path) -> None:
    cases = [make_case("ADD", outcome="fail", index=1),
             make_case("ADD", outcome="fail", index=2, artefact="javascript:alert(1)")]
    path = write_results(tmp_path / "results" / "r.jsonl", cases)
    data = analyse([load_results(path)], out_dir=str(tmp_path / "out"))
    hrefs = {item.case["data_seed"]: item.artefact_href for item in data.clusters[0].shown}
    assert hrefs[1] == "../results/artefacts/add-1.npz"
    assert hrefs[2] is None


def test_nan_and_inf_error_ratios_rank_as_worst(tmp_path: Path) -> None:
    nan_case = make_case("ADD", outcome="fail", index=1)
    nan_case["metrics"]["error_ratio"] = "nan"
    inf_case = make_case("CPY", outcome="fail", index=2)
    inf_case["metrics"]["error_ratio"] = "inf"
    data = analyse([load_results(write_results(tmp_path / "r.jsonl", [nan_case, inf_case]))])
    assert data.ops["ADD"].per_device["ggml:CPU"].worst_ratio == float("inf")
    assert data.ops["CPY"].per_device["ggml:CPU"].worst_ratio == float("inf")


def test_per_op_regimes_reached(tmp_path: Path) -> None:
    sum_rows = "SUM_ROWS(type=f32,ne=[{n},2,1,1],dst=f32,data={d}:1)"
    cases = [
        make_case("SUM_ROWS", case_id=sum_rows.format(n=300, d="uniform"), index=0),
        make_case("SUM_ROWS", case_id=sum_rows.format(n=2000, d="special"), index=1),
        make_case("SUM_ROWS", case_id="SUM_ROWS(not an id)", index=2),  # an id that no longer parses
        make_case("ABS", index=3),  # a small case: its declared grid regime is listed as not reached
        make_case("PERMUTE", index=4),  # no declared regimes (a view: OpSpec.no_regimes): none listed
    ]
    data = analyse([load_results(write_results(tmp_path / "r.jsonl", cases))])
    assert data.ops["SUM_ROWS"].regimes == {"row>256": 2, "row>512": 1, "row>1024": 1, "row>=4096": 0,
                                            "rows>65535": 0, "special": 1}
    assert data.ops["ABS"].regimes == {"elements>65536": 0, "elements>256,partial": 1}
    assert data.ops["PERMUTE"].regimes == {}
    html = render_report(data)
    assert "row&gt;=4096 ✗ not reached" in html and "row&gt;1024 ✓ (1)" in html

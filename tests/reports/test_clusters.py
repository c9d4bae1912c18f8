"""Failure clusters: by op, device, dtype signature and kind of failure; each opens with its
smallest case, shows its count and worst ratio; every cluster is listed, examples are capped."""

from __future__ import annotations

import re
from pathlib import Path

from reports.analysis import analyse
from reports.clusters import FailureKind, dtype_signature, failure_kind, input_elements
from reports.html import build_report
from results.load import load_results
from tests.reports.synth import make_case, write_results


def test_failure_kinds() -> None:
    fail = make_case("ADD", outcome="fail", error_ratio=3.0)
    assert failure_kind(fail) == (FailureKind.MAGNITUDE, "")
    nonfinite = make_case("ADD", outcome="fail", error_ratio=3.0)
    nonfinite["metrics"]["nonfinite_mismatch"] = 2
    assert failure_kind(nonfinite) == (FailureKind.NONFINITE, "")
    nmse_only = make_case("ADD", outcome="fail", error_ratio=3.0)
    nmse_only["metrics"]["n_bad"] = 0
    assert failure_kind(nmse_only) == (FailureKind.NMSE, "")
    written = make_case("ADD", outcome="fail", message="the device modified input(s) src0 (or the padding ...)")
    assert failure_kind(written) == (FailureKind.INPUTS_WRITTEN, "")
    assert failure_kind(make_case("ADD", outcome="crash")) == (FailureKind.CRASH, "SIGSEGV")
    assert failure_kind(make_case("ADD", outcome="timeout")) == (FailureKind.TIMEOUT, "")
    assert failure_kind(make_case("ADD", outcome="error")) == (FailureKind.ERROR, "")


def test_signature_and_size() -> None:
    assert dtype_signature({"src1": "f32", "src0": "q4_0", "dst": "f32"}) == "q4_0·f32→f32"
    assert dtype_signature({"src10": "i32", "src2": "f16", "dst": "f16"}) == "f16·i32→f16"
    assert input_elements({"shapes": {"src0": [4, 3, 1, 1], "src1": [4, 1, 1, 1], "dst": [9, 9, 9, 9]}}) == 16
    assert input_elements({"metrics": {"n": 7}}) == 7


def test_clusters_split_by_op_device_signature_and_kind(tmp_path: Path) -> None:
    cases = [
        make_case("MUL_MAT", device="ggml:Vulkan0", outcome="fail", src0="f16", error_ratio=5.0, index=1),
        make_case("MUL_MAT", device="ggml:Vulkan0", outcome="fail", src0="f16", error_ratio=9.0, index=2),
        make_case("MUL_MAT", device="ggml:Vulkan0", outcome="fail", src0="f32", error_ratio=1200.0, index=3),
        make_case("MUL_MAT", device="ggml:CPU", outcome="fail", src0="f16", error_ratio=2.0, index=4),
        make_case("MUL_MAT", device="ggml:Vulkan0", outcome="crash", src0="f16", index=5),
        make_case("MUL_MAT", device="ggml:Vulkan0", outcome="crash", src0="f16", index=6,
                  crash={"signal": "SIGABRT", "exitcode": -6, "stderr_tail": "GGML_ASSERT"}),
        make_case("SILU", device="ggml:Vulkan0", outcome="fail", error_ratio=1.31, index=7),
    ]
    cases[1]["metrics"]["nonfinite_mismatch"] = 1
    data = analyse([load_results(write_results(tmp_path / "r.jsonl", cases))])
    keys = [(c.key.op, c.key.column, c.key.signature, c.key.kind_label, c.count) for c in data.clusters]
    assert keys == [
        ("MUL_MAT", "ggml:CPU", "f16→f32", "error over tolerance", 1),
        ("MUL_MAT", "ggml:Vulkan0", "f16→f32", "crash SIGABRT", 1),
        ("MUL_MAT", "ggml:Vulkan0", "f16→f32", "crash SIGSEGV", 1),
        ("MUL_MAT", "ggml:Vulkan0", "f16→f32", "NaN/inf pattern", 1),
        ("MUL_MAT", "ggml:Vulkan0", "f16→f32", "error over tolerance", 1),
        ("MUL_MAT", "ggml:Vulkan0", "f32→f32", "error over tolerance", 1),
        ("SILU", "ggml:Vulkan0", "f32→f32", "error over tolerance", 1),
    ]
    assert data.clusters[-2].worst_ratio == 1200.0


def test_a_cluster_opens_with_the_smallest_case(tmp_path: Path) -> None:
    """116 failures of one bug: the shrunk ne=[1,1,1,1] case leads, whatever its error."""
    cases = [make_case("GELU_QUICK", outcome="fail", src0="f16", dst="f16", error_ratio=2.0 + i % 9, index=i)
             for i in range(116)]
    cases[80]["shapes"] = {"src0": [1, 1, 1, 1]}
    cases[80]["metrics"]["error_ratio"] = 1.05
    out = tmp_path / "report.html"
    data = build_report([write_results(tmp_path / "r.jsonl", cases)], out, max_examples_per_cluster=3)
    (cluster,) = data.clusters
    assert cluster.count == 116 and cluster.smallest is not None and cluster.smallest.elements == 1
    assert cluster.worst_ratio == 10.0 and len(cluster.examples) == 3 and cluster.not_shown == 112
    html = out.read_text()
    section = html[html.index('<section class="cluster"'):]
    first_card = re.search(r'data-case-id="([^"]+)" data-role="([a-z]+)"', section)
    assert first_card is not None and first_card.groups() == (cases[80]["case_id"], "smallest")
    assert "116 cases" in section and "Worst error ratio 10" in section and "112 others" in section


def test_every_cluster_is_listed(tmp_path: Path) -> None:
    """No cap hides a cluster: 150 ops × 2 dtypes failing give 300 cluster sections."""
    cases = []
    for op in range(150):
        for src0 in ("f32", "f16"):
            cases += [make_case(f"OP_{op:03d}", outcome="fail", src0=src0, dst=src0, index=i) for i in range(3)]
    out = tmp_path / "report.html"
    data = build_report([write_results(tmp_path / "r.jsonl", cases)], out)
    html = out.read_text()
    assert len(data.clusters) == 300
    assert len(re.findall(r'<section class="cluster" id="cluster-\d+"', html)) == 300
    assert "Failures (900 in 300 clusters)" in html


def test_the_metrics_row_does_not_repeat_the_message(tmp_path: Path) -> None:
    case = make_case("ADD", outcome="fail", message="out[3,0,0,0]=1.0, but should be 2.0 " + "x" * 400)
    case["metrics"]["detail"] = case["message"]
    out = tmp_path / "report.html"
    build_report([write_results(tmp_path / "r.jsonl", [case])], out)
    metrics = re.search(r'<dd class="metrics">(.*?)</dd>', out.read_text(), re.S)
    assert metrics is not None and "detail" not in metrics.group(1) and "x" * 400 not in metrics.group(1)

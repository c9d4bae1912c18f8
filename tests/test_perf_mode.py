"""Perf mode: ``conform perf`` judges and times model-shaped cases on ggml:CPU, writes a ``perf`` block
on each case record (bytes, FLOPs, timings), and the report shows them and flags regressions
against a baseline at the same case."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conformance.inputs import make_inputs
from conformance.perf import LLAMA_TINY, bytes_moved, flops, llama, tensor_bytes
from golden.case import parse_case_id
from reports.perf import REGRESSION_FACTOR, build_perf_section
from results.load import load_results
from tests.reports.synth import header, make_case, write_results

ROOT = Path(__file__).resolve().parents[1]


def _conform(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "conformance.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=600)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("perf") / "run"
    done = _conform("perf", "--shapes", "llama-tiny", "--out", str(out), "--warmup", "1", "--target", "0.02")
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
    return out


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_every_perf_case_is_judged_and_timed_on_cpu(tiny_run: Path) -> None:
    records = _records(tiny_run / "results.jsonl")
    assert records[0]["type"] == "header" and records[0]["profile"] == "perf"
    assert records[-1]["type"] == "footer" and records[-1]["exitstatus"] == 0
    cases = [r for r in records if r["type"] == "case"]
    assert {r["op"] for r in cases} == {"RMS_NORM", "MUL_MAT", "ROPE", "SOFT_MAX", "FLASH_ATTN_EXT", "GET_ROWS"}
    assert len(cases) == len(llama(LLAMA_TINY))
    for r in cases:
        perf = r["perf"]
        assert r["outcome"] == "pass" and r["device"] == "ggml:CPU" and r["test_id"].startswith("perf::")
        assert 0 < perf["min_s"] <= perf["median_s"] <= perf["max_s"] and perf["repeats"] >= 5
        assert perf["bytes"] > 0 and perf["gb_per_s"] == pytest.approx(perf["bytes"] / perf["median_s"] / 1e9)
    matmul = next(r for r in cases if r["op"] == "MUL_MAT" and "prefill" in r["test_id"])
    k, m = matmul["shapes"]["src0"][:2]
    n = matmul["shapes"]["src1"][1]
    assert matmul["perf"]["flops"] == 2 * k * m * n
    html = (tiny_run / "report.html").read_text()
    assert 'id="perf"' in html and html.count('class="plot perf"') == 6  # a chart per op


def test_bytes_and_flops_follow_the_shapes() -> None:
    cases = {f"{c.phase} {c.role}": c.case for c in llama(LLAMA_TINY)}
    d, n = LLAMA_TINY.n_embd, LLAMA_TINY.prompt
    matmul = cases["prefill attn_q f16"]
    assert flops(matmul, d * n) == 2 * d * d * n
    assert bytes_moved(matmul, 4 * d * n) == 2 * d * d + 4 * d * n + 4 * d * n
    table = cases["decode embedding"]
    gathered = bytes_moved(table, 4 * d)
    assert gathered < tensor_bytes(table.inputs[0])  # one row of the table, not all of it
    assert flops(table, d) is None  # data movement: no FLOP count
    attention = cases["prefill attention"]
    heads, hd = LLAMA_TINY.n_head, LLAMA_TINY.head_dim
    assert flops(attention, hd * n * heads) == 2 * n * n * heads * (hd + hd) + 5 * n * n * heads


def test_the_attention_cases_mask_nothing_and_their_ids_rebuild_their_inputs() -> None:
    for item in llama(LLAMA_TINY):
        if item.case.op == "FLASH_ATTN_EXT":
            again = parse_case_id(item.case.case_id)
            mask = make_inputs(again)[3]
            n_q = item.case.inputs[0].ne[1]
            assert np.isfinite(mask[..., :n_q, :]).all()  # every key seen: the full attention work


def _perf_case(device: str, label: str, median: float, run_id: str, index: int, cpu: float | None = None,
               **extra: Any) -> dict[str, Any]:
    block: dict[str, Any] = {"role": label, "median_s": median, "min_s": median, "max_s": median,
                             "mean_s": median, "repeats": 5, "warmup": 2, "bytes": 1 << 20, "flops": 1 << 30}
    if cpu is not None:
        block["cpu_median_s"] = cpu
    block.update(extra)
    return make_case("MUL_MAT", device=device, index=index, run_id=run_id, test_id=f"perf::{label}",
                     case_id=f"MUL_MAT(type0=f16,ne0=[4096,4096,1,1],type1=f32,ne1=[4096,{index},1,1],"
                             f"dst=f32,data=uniform:1)",
                     perf=block)


def test_a_case_slower_than_the_baseline_is_a_regression(tmp_path: Path) -> None:
    now = [_perf_case("ggml:CPU", "decode", 1.0e-3, "now", 1), _perf_case("ggml:CPU", "prefill", 1.0e-1, "now", 512),
           _perf_case("ggml:Vulkan0", "decode", 2.0e-4, "now", 1, cpu=1.0e-3),
           _perf_case("ggml:Vulkan0", "prefill", 1.3e-2, "now", 512, cpu=1.0e-1)]
    before = [_perf_case("ggml:CPU", "decode", 0.95e-3, "base", 1),
              _perf_case("ggml:CPU", "prefill", 1.0e-1, "base", 512),
              _perf_case("ggml:Vulkan0", "decode", 1.9e-4, "base", 1),
              _perf_case("ggml:Vulkan0", "prefill", 1.0e-2, "base", 512)]
    current = write_results(tmp_path / "now.jsonl", now, header_record=header(run_id="now"))
    baseline = write_results(tmp_path / "base.jsonl", before, header_record=header(run_id="base"))
    section = build_perf_section([load_results(current)], [load_results(baseline)])
    assert section is not None and section.compared == 4
    flagged = [(r.device, r.label) for r in section.regressions]
    assert flagged == [("ggml:Vulkan0", "prefill")]  # 1.3x; 1.05x is noise under the 1.2x bar
    vulkan = next(r for r in section.ops["MUL_MAT"] if r.device == "ggml:Vulkan0" and r.label == "decode")
    assert vulkan.vs_cpu == pytest.approx(5.0) and vulkan.vs_baseline == pytest.approx(2.0e-4 / 1.9e-4)
    assert REGRESSION_FACTOR == 1.2
    assert build_perf_section([load_results(baseline)], None) is not None
    assert build_perf_section([load_results(write_results(tmp_path / "plain.jsonl", [make_case("ADD")]))]) is None


@pytest.mark.parametrize("args", [["--shapes", "llama-70b"], ["--ops", "NOT_AN_OP"], ["--roofline", "3000"],
                                  ["--roofline", "0,1"], ["--baseline", "/nonexistent/results.jsonl"]])
def test_bad_perf_input_is_one_line(args: list[str], tmp_path: Path) -> None:
    done = _conform("perf", "--out", str(tmp_path / "out"), *args)
    assert done.returncode == 2 and done.stdout == "" and len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr

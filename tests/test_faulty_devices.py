"""The harness must catch deliberately wrong devices and survive crashing and hanging ones."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.harness import Harness
from golden.case import OpCase, TensorSpec

PLUGINS = "tests.plugins.faulty"


def gelu_quick_case(seed: int, distribution: str) -> OpCase:
    return OpCase("GELU_QUICK", (TensorSpec("f32", (256, 4, 1, 1)),), dst="f32",
                  data_seed=seed, distribution=distribution)


@pytest.fixture(scope="module")
def erf_harness():
    h = Harness(f"{PLUGINS}:erf_gelu_quick", {}, timeout=60)
    yield h
    h.close()


def test_erf_gelu_quick_fails_on_dense_inputs(erf_harness: Harness) -> None:
    record = erf_harness.evaluate(gelu_quick_case(1, "dense"))
    assert record.outcome == "fail"
    # erf-GELU vs quick-GELU differ by up to 0.02 near x ≈ −2.27
    assert 0.01 < record.metrics["max_abs"] < 0.03


def test_erf_gelu_quick_is_invisible_to_test_backend_ops_metric(erf_harness: Harness) -> None:
    """On test-backend-ops' [-150, 150] range the NMSE is below its 1e-7 bar, yet we fail it."""
    record = erf_harness.evaluate(gelu_quick_case(2, "wide"))
    assert record.metrics["nmse"] < 1e-7
    assert record.outcome == "fail"


def test_erf_device_passes_other_ops(erf_harness: Harness) -> None:
    case = OpCase("GELU", (TensorSpec("f32", (256, 4, 1, 1)),), data_seed=3, distribution="dense")
    assert erf_harness.evaluate(case).outcome == "pass"


def test_abort_is_a_crash_record_and_the_next_case_runs() -> None:
    h = Harness(f"{PLUGINS}:aborts_on_odd_rows", {}, timeout=60)
    try:
        crashed = h.evaluate(OpCase("RELU", (TensorSpec("f32", (7, 2, 1, 1)),), data_seed=1))
        assert crashed.outcome == "crash"
        assert crashed.crash.signal == "SIGABRT"
        assert "GGML_ASSERT(ne0 % 2 == 0) failed" in crashed.crash.stderr_tail
        assert "GGML_ASSERT" in crashed.message
        fine = h.evaluate(OpCase("RELU", (TensorSpec("f32", (8, 2, 1, 1)),), data_seed=1))
        assert fine.outcome == "pass"
    finally:
        h.close()


def test_hung_call_is_a_timeout_record_and_the_next_case_runs() -> None:
    h = Harness(f"{PLUGINS}:hangs_on_silu", {}, timeout=2)
    try:
        hung = h.evaluate(OpCase("SILU", (TensorSpec("f32", (8, 1, 1, 1)),), data_seed=1))
        assert hung.outcome == "timeout"
        assert h.evaluate(OpCase("RELU", (TensorSpec("f32", (8, 1, 1, 1)),), data_seed=1)).outcome == "pass"
    finally:
        h.close()


def test_input_corruption_is_a_failure() -> None:
    h = Harness(f"{PLUGINS}:writes_into_inputs", {}, timeout=60)
    try:
        rec = h.evaluate(OpCase("RELU", (TensorSpec("f32", (8, 1, 1, 1)),), data_seed=1))
        assert rec.outcome == "fail"
        assert "modified input(s) src0" in rec.message
        # CLAMP writes its input by definition (it returns a view of it): not a failure
        clamp = OpCase("CLAMP", (TensorSpec("f32", (8, 1, 1, 1)),), params=(("min", -0.5), ("max", 0.5)))
        assert h.evaluate(clamp).outcome == "pass"
    finally:
        h.close()


def _run_suite(tmp_path: Path, device: str, k: str, *extra: str) -> tuple[int, list[dict]]:
    results = tmp_path / "results.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "-k", k,
         "--device", device, "--results", str(results), "--conform-profile", "dev", *extra],
        capture_output=True, text=True, cwd=Path(__file__).parent.parent, timeout=300,
    )
    records = [json.loads(line) for line in results.read_text().splitlines()]
    return proc.returncode, records


def test_suite_reports_erf_gelu_quick_as_failing(tmp_path: Path) -> None:
    # dev-detect: the dev profile's draws, the failure not shrunk (shrinking this near-miss took minutes)
    code, records = _run_suite(tmp_path, f"{PLUGINS}:erf_gelu_quick", "gelu_quick and f32", "-x",
                               "--conform-profile", "dev-detect")
    cases = [r for r in records if r["type"] == "case"]
    assert code == 1
    assert any(r["outcome"] == "fail" and r["op"] == "GELU_QUICK" for r in cases)
    failing = next(r for r in cases if r["outcome"] == "fail")
    assert failing["repro"].startswith("conform repro 'GELU_QUICK(")
    assert (tmp_path / failing["artefact"]).exists()


def test_suite_records_crash_and_keeps_going(tmp_path: Path) -> None:
    code, records = _run_suite(tmp_path, f"{PLUGINS}:aborts_on_odd_rows", "(relu or hardsigmoid) and f32 and not leaky")
    cases = [r for r in records if r["type"] == "case"]
    assert code == 1
    first_crash = next(i for i, r in enumerate(cases) if r["outcome"] == "crash")
    assert cases[first_crash]["op"] == "RELU" and cases[first_crash]["crash"]["signal"] == "SIGABRT"
    # the run went on after the crash: HARDSIGMOID (collected after RELU) ran and passed
    assert any(r["op"] == "HARDSIGMOID" and r["outcome"] == "pass" for r in cases[first_crash:])
    assert records[0]["type"] == "header" and records[-1]["type"] == "footer"

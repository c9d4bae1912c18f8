"""The device contract is one path, checked: what run() returns is validated next to the device, and
every way a case can go wrong in the harness or the plug-in leaves a record that says how."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conformance import harness as harness_module
from conformance.harness import Harness
from conformance.verdict import Metrics
from conformance.verdict import judge as judge_module
from device.base import DeviceError, RunResult, output_dtype
from device.ggml.device import open_ggml_device
from device.golden_device import GoldenDevice
from golden.case import OpCase, TensorSpec
from results.schema import ResultsWriter

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = "tests.plugins.contract_breakers"
RELU = OpCase("RELU", (TensorSpec("f32", (8, 2, 1, 1)),), dst="f32", data_seed=1)


def evaluate(factory: str, case: OpCase = RELU):
    h = Harness(f"{PLUGINS}:{factory}", {}, timeout=60)
    try:
        return h.evaluate(case)
    finally:
        h.close()


@pytest.mark.parametrize(("factory", "expect"), [
    ("returns_none", "run() returned NoneType, not a RunResult"),
    ("returns_list", "RunResult.output is list, not a numpy array"),
    ("returns_float64", "dtype float64, but a f32 destination is returned as float32"),
    ("extra_big_array", "RunResult.extra['odd'] is an ndarray of 100000 float64 elements"),
    ("extra_object", "RunResult.extra['odd'] holds a object, which a results file cannot store"),
    ("extra_lambda", "RunResult.extra['odd'] holds a function"),
])
def test_a_broken_result_is_an_error_record_saying_why(factory: str, expect: str) -> None:
    record = evaluate(factory)
    assert record.outcome == "error"
    assert "device contract broken" in record.message and expect in record.message, record.message
    json.dumps(record.to_json())  # and it can be written


@pytest.mark.parametrize(("factory", "stored"), [
    ("extra_set", [1, 2, 3]),
    ("extra_bytes", "00ff"),
    ("extra_small_array", [0.0, 1.0, 2.0]),
])
def test_extra_is_made_json_safe(factory: str, stored: object) -> None:
    record = evaluate(factory)
    assert record.outcome == "pass"
    assert record.extra == {"odd": stored}


def test_info_is_made_json_safe_and_the_spec_is_the_opened_one() -> None:
    h = Harness(f"{PLUGINS}:info_set", {}, timeout=60)
    try:
        assert h.inventory["features"] == ["a", "b"] and h.inventory["serial"] == "0102"
        assert h.inventory["spec"] == f"{PLUGINS}:info_set"
        assert h.inventory["import_root"] == str(ROOT)
        json.dumps(h.inventory)
    finally:
        h.close()


@pytest.mark.parametrize(("factory", "expect"), [
    ("info_list", "info() returned list, not a dict"),
    ("info_object", "info()['handle'] holds a object"),
    ("factory_raises", "failed to open: RuntimeError: no such board"),
])
def test_a_device_that_cannot_open_is_one_line_naming_it(factory: str, expect: str) -> None:
    with pytest.raises(DeviceError) as caught:
        Harness(f"{PLUGINS}:{factory}", {}, timeout=60)
    message = str(caught.value)
    assert f"{PLUGINS}:{factory}" in message and expect in message and "\n" not in message, message


def test_an_override_of_run_is_what_runs() -> None:
    """A GgmlDevice subclass whose ADD returns zeros fails ADD: the worker calls run(), nothing else."""
    add = OpCase("ADD", (TensorSpec("f32", (8, 2, 1, 1)), TensorSpec("f32", (8, 2, 1, 1))), dst="f32",
                 data_seed=3, distribution="dense")
    h = Harness(f"{PLUGINS}:zero_add", {}, timeout=60)
    try:
        assert h.evaluate(add).outcome == "fail"
        assert h.evaluate(RELU).outcome == "pass"
    finally:
        h.close()


OUTPUT_CASES = [
    OpCase("RELU", (TensorSpec("f32", (5, 3, 1, 1)),), dst="f32", data_seed=1),
    OpCase("RELU", (TensorSpec("f16", (5, 3, 1, 1)),), dst="f16", data_seed=1),
    OpCase("CPY", (TensorSpec("f32", (5, 3, 1, 1)),), (("dst_ne", (5, 3, 1, 1)),), dst="bf16", data_seed=1),
    OpCase("ARGSORT", (TensorSpec("f32", (5, 3, 1, 1)),), (("order", "asc"),), dst="i32", data_seed=1),
    OpCase("CPY", (TensorSpec("f32", (64, 2, 1, 1)),), (("dst_ne", (64, 2, 1, 1)),), dst="q8_0", data_seed=1),
]


@pytest.mark.parametrize("case", OUTPUT_CASES, ids=lambda c: f"{c.op}-{c.dst}")
def test_ggml_and_golden_return_the_destination_dtype(case: OpCase) -> None:
    from conformance.data import as_stored
    from conformance.inputs import make_inputs

    inputs = [as_stored(x, t.dtype) for x, t in zip(make_inputs(case), case.inputs, strict=True)]
    ggml = open_ggml_device("CPU", {})
    try:
        assert ggml.supports(case) is True
        got = ggml.run(case, inputs)  # the graph supports() built
        again = ggml.run(case, inputs)  # no supports() before: built afresh
    finally:
        ggml.close()
    want = output_dtype(case.dst)
    assert got.output.dtype == want and again.output.dtype == want
    np.testing.assert_array_equal(got.output, again.output)
    assert GoldenDevice().run(case, inputs).output.dtype == want


# ---- harness exceptions become ERROR records ------------------------------------------------------

@pytest.fixture
def golden_harness(tmp_path: Path):
    writer = ResultsWriter(str(tmp_path / "r.jsonl"))
    h = Harness("golden", {}, writer=writer, out_dir=str(tmp_path))
    yield h, tmp_path / "r.jsonl"
    h.close()
    writer.close()


def _boom(*args: object, **kwargs: object) -> None:
    raise RuntimeError("planted")


@pytest.mark.parametrize(("module", "target", "step"), [
    (harness_module, "make_inputs", "making the inputs"),
    (judge_module, "compare", "judging the result"),
])
def test_a_harness_exception_is_an_error_record(golden_harness, monkeypatch: pytest.MonkeyPatch, module: object,
                                                target: str, step: str) -> None:
    h, results = golden_harness
    monkeypatch.setattr(module, target, _boom)
    record = h.evaluate(RELU)
    assert record.outcome == "error"
    assert record.message == f"harness error while {step}: RuntimeError: planted"
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert lines[-1]["case_id"] == RELU.case_id and lines[-1]["outcome"] == "error"


def test_a_golden_exception_is_an_error_record(golden_harness, monkeypatch: pytest.MonkeyPatch) -> None:
    h, _ = golden_harness
    monkeypatch.setattr(harness_module.catalogue, "evaluate", _boom)
    record = h.evaluate(RELU)
    assert record.outcome == "error" and "while computing the golden: RuntimeError: planted" in record.message


def test_a_record_that_cannot_be_stored_is_stored_as_an_error(golden_harness, monkeypatch: pytest.MonkeyPatch) -> None:
    h, results = golden_harness
    monkeypatch.setattr(Metrics, "as_dict", lambda self: {"odd": object()})
    record = h.evaluate(RELU)
    assert record.outcome == "error" and "the record could not be stored" in record.message
    last = json.loads(results.read_text().splitlines()[-1])
    assert last["outcome"] == "error" and "metrics" not in last


def test_a_comparator_breaking_its_contract_is_an_error_record(golden_harness, monkeypatch: pytest.MonkeyPatch) -> None:
    h, _ = golden_harness
    monkeypatch.setattr(GoldenDevice, "run", lambda self, case, inputs: RunResult(
        np.zeros((2, 8), np.float32), inputs_after="nonsense"))  # type: ignore[arg-type]
    record = h.evaluate(RELU)
    assert record.outcome == "error" and "inputs_after" in record.message


# ---- through pytest: every failing test has its record, and the footer counts them ----------------

def test_suite_records_every_broken_result_and_counts_failures(tmp_path: Path) -> None:
    results = tmp_path / "r.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "--op", "relu,abs",
         "--device", f"{PLUGINS}:returns_none", "--results", str(results), "--conform-profile", "dev"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )
    assert proc.returncode == 1, proc.stdout[-2000:]
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    cases = [r for r in lines if r["type"] == "case"]
    footer = lines[-1]
    assert footer["type"] == "footer" and footer["exitstatus"] == 1
    failed_ids = {t["test_id"] for t in footer["pytest_failed_tests"]}
    assert footer["pytest_failed"] == len(failed_ids) > 0 and footer["pytest_errors"] == 0
    assert failed_ids == {r["test_id"] for r in cases if r["outcome"] == "error"}
    assert all("run() returned NoneType" in t["message"] for t in footer["pytest_failed_tests"])
    assert lines[0]["cwd"] == str(ROOT) and lines[0]["devices"][0]["import_root"] == str(ROOT)


def test_a_leaking_device_is_recorded_and_flagged(tmp_path: Path) -> None:
    """Every case passes, yet the footer records the device process' growth and the report flags it."""
    from reports.html import build_report
    from reports.runstatus import MEMORY_GROWTH_FLAG

    results = tmp_path / "r.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "--op", "relu", "-k", "f32",
         "--device", f"{PLUGINS}:leaks", "--results", str(results), "--conform-profile", "dev"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    footer = json.loads(results.read_text().splitlines()[-1])
    (end,) = footer["devices_end"]
    cases = sum('"type":"case"' in line for line in results.read_text().splitlines())
    assert end["worker_rss_growth_max"] >= 0.9 * (cases - 1) * 32 * 2**20 > MEMORY_GROWTH_FLAG
    data = build_report([results], tmp_path / "report.html")
    assert any("the device process grew by" in w for run in data.runs for w in run.status.memory_warnings)


def test_a_failure_without_a_record_is_counted_by_the_report(tmp_path: Path) -> None:
    """A test that fails outside the harness leaves no case record; the footer's counts make the report
    say so (red, never "No unexpected failures")."""
    from reports.html import build_report

    extra = tmp_path / "test_outside.py"
    extra.write_text("def test_fails_outside_the_harness(conform):\n    assert conform.inventory['spec'] == 'x'\n")
    results = tmp_path / "r.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance/test_elementwise.py", str(extra), "-q", "-p", "no:cacheprovider",
         "-k", "[relu-f32] or outside", "--device", "golden", "--results", str(results),
         "--conform-profile", "dev", "--rootdir", str(ROOT)],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )
    assert proc.returncode == 1, proc.stdout[-2000:]
    footer = json.loads(results.read_text().splitlines()[-1])
    assert footer["pytest_failed"] == 1
    (listed,) = footer["pytest_failed_tests"]
    assert listed["test_id"].endswith("test_fails_outside_the_harness") and listed["when"] == "call"
    assert "AssertionError" in listed["message"] or "assert" in listed["message"]
    data = build_report([results], tmp_path / "report.html")
    assert data.unrecorded_failures == 1 and not data.is_green
    assert "test_fails_outside_the_harness" in (tmp_path / "report.html").read_text()

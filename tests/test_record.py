"""The typed results record and the SET_GET case id."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conformance.harness import Harness
from conformance.set_get import SetGetCase
from device.known_bug import KnownBug
from golden import dtypes, quant
from golden.case import OpCase, TensorSpec
from results.outcome import Outcome
from results.record import CaseDescription, CaseRecord, ExpectedFailure
from results.schema import OUTCOMES

ROOT = Path(__file__).parent.parent
# results/RESULTS.md's case fields, schema version 1
CASE_FIELDS = {"type", "test_id", "case_id", "device", "op", "dtypes", "shapes", "layout", "params", "distribution",
               "data_seed", "supported", "outcome", "tolerance", "duration_s", "repro", "artefact", "message"}


def test_outcome_values_are_the_schema_strings() -> None:
    assert OUTCOMES == ("pass", "fail", "crash", "timeout", "unsupported", "error")
    assert {o.value for o in Outcome if o.failing} == {"fail", "crash", "timeout", "error"}
    assert json.dumps({"outcome": Outcome.CRASH}) == '{"outcome": "crash"}'


def test_both_writers_write_the_same_fields() -> None:
    h = Harness("golden", {}, run_id="r", worker="main")
    try:
        case_record = h.evaluate(OpCase("RELU", (TensorSpec("f32", (8, 2, 1, 1)),), data_seed=1)).to_json()
        set_get = SetGetCase(TensorSpec("f32", (8, 2, 1, 1)), ((0, 64),), ((0, 64),), 1)
        transfer_record = h.evaluate_set_get(set_get).to_json()  # golden has no transfer(): unsupported
    finally:
        h.close()
    for record in (case_record, transfer_record):
        assert CASE_FIELDS | {"run_id", "worker"} <= set(record)
        assert CaseRecord.from_json(record).to_json() == record
    assert case_record["outcome"] == "pass" and "metrics" in case_record and "crash" not in case_record
    assert transfer_record["outcome"] == "unsupported" and "declare transfer()" in transfer_record["message"]
    assert transfer_record["repro"] == f"conform repro '{set_get.case_id}' --device golden"


def test_expected_failure_comes_from_a_known_bug() -> None:
    bug = KnownBug("cpu-x", "CPU", "CLAMP", lambda case: True, "wrong rows", "CLAMP(type=f32,...)")
    expected = ExpectedFailure.of(bug)
    case = OpCase("CLAMP", (TensorSpec("f32", (8, 1, 1, 1)),), params=(("min", 0.0), ("max", 1.0)))
    record = CaseRecord(case.case_id, "ggml:CPU", "CLAMP", Outcome.FAIL, CaseDescription.of(case), "uniform", 0,
                        True, 0.0, "conform repro ...", {"reason": "r"}, expected=expected)
    assert record.to_json()["expected"] == {"id": "cpu-x", "reason": "wrong rows", "repro": "CLAMP(type=f32,...)",
                                            "outcomes": ["fail"]}
    assert CaseRecord.from_json(record.to_json()).expected == expected


@pytest.mark.parametrize("case", [
    SetGetCase(TensorSpec("q4_0", (64, 4, 1, 1)), ((72, 72), (0, 72)), ((36, 72), (143, 1)), 7),
    SetGetCase(TensorSpec("f16", (5, 3, 1, 1), name="blk.0.attn_q.weight"), ((0, 30),), ((0, 30),), 2**32 - 1),
])
def test_set_get_id_round_trips(case: SetGetCase) -> None:
    assert SetGetCase.parse(case.case_id) == case
    assert " " not in case.case_id and case.case_id.startswith("SET_GET(type=")
    raw = case.raw_bytes()
    assert raw.dtype == np.uint8 and raw.size == case.nbytes and np.array_equal(raw, case.raw_bytes())


def test_set_get_bytes_are_the_dtype_of_uniform_values() -> None:
    case = SetGetCase(TensorSpec("q8_0", (64, 3, 1, 1)), ((0, 204),), ((0, 204),), 11)
    values = quant.dequantize(case.raw_bytes(), "q8_0", 64 * 3)
    assert np.abs(values).max() <= 4.0 and case.nbytes == 3 * 2 * dtypes.type_size("q8_0")


@pytest.mark.parametrize(("case_id", "message"), [
    ("SET_GET(type=f32,ne=[4,1,1,1],writes=[[0,17]],reads=[[0,16]],data=bytes:0)", "outside the tensor's 16 bytes"),
    ("SET_GET(type=q4_0,ne=[20,1,1,1],writes=[[0,1]],reads=[[0,1]],data=bytes:0)", "multiple of 32"),
    ("SET_GET(type=f32,ne=[4,1,1,1],writes=[[0,16]],reads=[[0,16]],data=uniform:0)", "data=bytes"),
    ("SET_GET(type=f32,ne=[4,1,1,1],writes=[[0,16]],reads=[[0,16]],s=1,data=bytes:0)", "no parameter 's'"),
    ("SET_GET(type=f32,ne=[4,1,1,1],writes=[0,16],reads=[[0,16]],data=bytes:0)", "pairs"),
    ("SET_GET(type=f32,ne=[4,1,1,1],reads=[[0,16]],data=bytes:0)", "no writes"),
])
def test_bad_set_get_ids(case_id: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SetGetCase.parse(case_id)


def test_conform_repro_runs_a_set_get_case() -> None:
    case = SetGetCase(TensorSpec("q4_0", (64, 2, 1, 1)), ((0, 36), (36, 36)), ((18, 40),), 3)
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", "repro", case.case_id, "--device", "ggml:CPU"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith(f"PASS  {case.case_id}  on ggml:CPU"), proc.stderr

"""CaseView reads a loaded case line into typed fields; wrong types read as absent, as dict lookups did."""

from __future__ import annotations

import math

from results.load import load_results
from results.outcome import Outcome
from results.view import CaseView
from tests.reports.synth import make_case, write_results


def test_a_written_record_reads_back_typed(tmp_path) -> None:
    record = make_case("MUL_MAT", device="ggml:Vulkan0", outcome="fail", error_ratio=3.5, src0="f16",
                       expected={"id": "vk-1", "reason": "r", "repro": "x"}, decided_by="catalogue:MUL_MAT[f16_f32]",
                       companion_of="MUL_MAT(...)")
    [raw] = load_results(write_results(tmp_path / "r.jsonl", [record])).cases
    view = CaseView.of(raw)
    assert (view.op, view.device, view.outcome, view.failing) == ("MUL_MAT", "ggml:Vulkan0", Outcome.FAIL, True)
    assert view.dtypes == {"src0": "f16", "dst": "f32"}
    assert (view.error_ratio, view.expected_id, view.companion_of) == (3.5, "vk-1", "MUL_MAT(...)")
    assert view.tolerance_row == "MUL_MAT[f16_f32]"
    assert view.raw is raw


def test_fields_of_the_wrong_type_read_as_absent() -> None:
    view = CaseView.of({"case_id": "c", "device": "d", "op": "ADD", "outcome": "pass", "dtypes": "f32",
                        "duration_s": "slow", "supported": "yes", "test_id": 3, "expected": {"id": ""},
                        "metrics": {"error_ratio": "nan"}, "decided_by": 7, "companion_of": ""})
    assert (view.dtypes, view.duration_s, view.supported, view.test_id, view.expected_id) == (None, 0.0, None, None,
                                                                                              None)
    assert view.error_ratio is not None and math.isnan(view.error_ratio)  # the writer stores NaN as "nan"
    assert (view.decided_by, view.tolerance_row, view.companion_of, view.failing) == (None, None, None, False)

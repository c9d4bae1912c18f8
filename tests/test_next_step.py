"""An unexpected failure's message names where it goes next: a known bug of the backend, or the row."""

from __future__ import annotations

import pytest

from conformance.harness import next_step
from results.outcome import Outcome
from results.record import CaseDescription, CaseRecord


def _record(op: str, outcome: Outcome, decided_by: str | None = None) -> CaseRecord:
    return CaseRecord(case_id=f"{op}(type=f32)", device="", op=op, outcome=outcome,
                      description=CaseDescription({}, {}, {}, {}), distribution="", data_seed=0, supported=True,
                      duration_s=0.0, repro="", tolerance={}, decided_by=decided_by)


@pytest.mark.parametrize(("device", "known_bugs"), [("ggml:CPU", "device/ggml/known_bugs_cpu.toml"),
                                                    ("ggml:Vulkan0", "device/ggml/known_bugs_vulkan.toml"),
                                                    ("ggml:CANN1", "device/ggml/known_bugs_cann.toml")])
def test_a_wrong_result_names_the_known_bug_file_and_the_tolerance_row(device: str, known_bugs: str) -> None:
    text = next_step(device, _record("EXP", Outcome.FAIL, "catalogue:EXP[f32]"))
    assert known_bugs in text and "--expectations" in text
    assert "EXP[f32] in golden/unary.py" in text and 'README "Adding an op"' in text


def test_a_crash_names_the_known_bug_but_no_tolerance_row() -> None:
    text = next_step("tests.plugins.faulty:erf_gelu_quick", _record("EXP", Outcome.CRASH))
    assert "known bug in the device's plug-in" in text and "golden/" not in text


def test_an_op_this_catalogue_lacks_still_names_a_next_step() -> None:
    text = next_step("ggml:CPU", _record("EXPM1", Outcome.FAIL))
    assert "the op's tolerance row in the op's golden/<family>.py" in text

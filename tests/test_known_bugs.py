"""Known backend bugs are matched per device and release, and a documented deviation covers only what
stays within its own bound."""

from __future__ import annotations

import pytest

from conformance.harness import Harness
from device.known_bugs import find
from golden.case import Layout, OpCase, TensorSpec
from results.outcome import Outcome

GELU = OpCase("GELU", (TensorSpec("f32", (64, 3, 1, 1)),), distribution="dense", data_seed=5)


def test_a_bug_matches_its_device_release_and_cases_only() -> None:
    clamp = OpCase("CLAMP", (TensorSpec("f32", (4, 3, 3, 1), Layout(perm=(0, 2, 1, 3))),),
                   params=(("min", 0.0), ("max", 1.0)))
    assert find(clamp, "CPU", "0.20.2") is not None
    assert find(clamp, "CPU", "0.99.0") is None  # another release: not known to have it
    assert find(clamp, "Vulkan0", "0.20.2") is None  # another device
    packed = OpCase("CLAMP", (TensorSpec("f32", (4, 3, 3, 1)),), params=(("min", 0.0), ("max", 1.0)))
    assert find(packed, "CPU", "0.20.2") is None  # a layout the kernel handles


@pytest.mark.parametrize(("factory", "outcome", "expected"), [
    ("f16_table", Outcome.FAIL, True),  # the CPU's documented F16 table: a known deviation
    ("quick_gelu", Outcome.FAIL, False),  # beyond the deviation's own bound: a real failure
])
def test_a_documented_deviation_covers_only_what_it_documents(factory: str, outcome: Outcome, expected: bool) -> None:
    harness = Harness(f"tests.plugins.cpu_like:{factory}", timeout=60.0)
    try:
        record = harness.evaluate(GELU)
    finally:
        harness.close()
    assert record.outcome is outcome
    assert (record.expected is not None) is expected
    if expected:
        assert record.expected is not None and record.expected.id == "cpu-gelu-f16-table"


@pytest.mark.parametrize(("dtype", "perm", "known"), [
    ("f16", (0, 3, 2, 1), True),  # F16 data whose rows are not ne0 elements apart: the kernel ignores nb1
    ("f32", (0, 3, 2, 1), True),
    ("f16", (0, 1, 2, 3), False),  # packed F16 rows: the kernel handles them (the predicate once took 4-byte rows)
    ("f32", (0, 1, 2, 3), False),
])
def test_the_im2col_row_stride_bug_measures_rows_in_the_data_type(dtype: str, perm: tuple, known: bool) -> None:
    params = (("s0", 1), ("s1", 1), ("p0", 0), ("p1", 0), ("d0", 1), ("d1", 1), ("is_2d", True))
    case = OpCase("IM2COL", (TensorSpec(dtype, (1, 1, 1, 1)), TensorSpec(dtype, (1, 2, 1, 2), Layout(perm=perm))),
                  params=params, dst=dtype)
    bug = find(case, "CPU", "0.20.2")
    assert (bug is not None and bug.id == "cpu-im2col-2d-ignores-nb1") is known

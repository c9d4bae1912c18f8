"""Bad movement-op parameters: the harness rejects them before any device, and a ggml abort sent
on purpose is recorded as a CRASH with its GGML_ASSERT text instead of killing the run."""

from __future__ import annotations

import numpy as np
import pytest

import conformance.cases.movement  # noqa: F401  (GET_ROWS index maker)
from conformance.data import as_stored
from conformance.harness import open_runner
from conformance.inputs import make_inputs
from golden import catalogue
from golden.case import Layout, OpCase, TensorSpec
from results.outcome import Outcome

GET_ROWS = OpCase("GET_ROWS", (TensorSpec("f32", (4, 3, 1, 1)), TensorSpec("i32", (2, 1, 1, 1))))


def _inputs(case: OpCase) -> list[np.ndarray]:
    return [as_stored(x, t.dtype) for x, t in zip(make_inputs(case), case.inputs, strict=True)]


def test_get_rows_index_out_of_range_crashes_the_cpu_worker_not_the_run() -> None:
    data, rows = _inputs(GET_ROWS)
    rows = rows.copy()
    rows.flat[0] = 3  # data has 3 rows: index 3 is one past the end
    runner = open_runner("ggml:CPU", {}, 60)
    try:
        attempt = runner.attempt(GET_ROWS, [data, rows])
        assert attempt.outcome is Outcome.CRASH, attempt
        assert attempt.crash is not None and "GGML_ASSERT" in attempt.crash.stderr_tail, attempt.crash
        # the worker restarts: a good case right after runs normally
        good = runner.attempt(GET_ROWS, _inputs(GET_ROWS))
        assert good.answered, good
    finally:
        runner.close()


BAD_CASES = [
    pytest.param(OpCase("REPEAT", (TensorSpec("f32", (3, 2, 1, 1)),), params=(("ne", (4, 2, 1, 1)),)),
                 "cannot repeat", id="repeat-not-a-multiple"),
    pytest.param(OpCase("CONCAT", (TensorSpec("f32", (3, 2, 1, 1)), TensorSpec("f32", (3, 5, 1, 1))),
                        params=(("dim", 0),)), "differ outside dim 0", id="concat-mismatch"),
    pytest.param(OpCase("CONCAT", (TensorSpec("f32", (3, 2, 1, 1)), TensorSpec("f16", (3, 2, 1, 1))),
                        params=(("dim", 1),)), "same type", id="concat-types"),
    pytest.param(OpCase("ARANGE", (), params=(("start", 2.0), ("stop", 2.0), ("step", 1.0))),
                 "must be greater than start", id="arange-empty"),
    pytest.param(OpCase("ARANGE", (), params=(("start", 0.0), ("stop", 2.0), ("step", -1.0))),
                 "step", id="arange-negative-step"),
    pytest.param(OpCase("RESHAPE", (TensorSpec("f32", (6, 1, 1, 1)),), params=(("ne", (4, 1, 1, 1)),)),
                 "elements", id="reshape-count"),
    pytest.param(OpCase("RESHAPE", (TensorSpec("f32", (3, 2, 1, 1), Layout(perm=(1, 0, 2, 3))),),
                        params=(("ne", (6, 1, 1, 1)),)), "contiguous", id="reshape-permuted"),
    pytest.param(OpCase("CPY", (TensorSpec("f32", (6, 1, 1, 1)),), params=(("dst_ne", (5, 1, 1, 1)),)),
                 "elements", id="cpy-count"),
    pytest.param(OpCase("PERMUTE", (TensorSpec("f32", (3, 2, 1, 1)),), params=(("axes", (0, 0, 1, 2)),)),
                 "not a permutation", id="permute-axes"),
    pytest.param(OpCase("VIEW", (TensorSpec("f32", (6, 1, 1, 1)),),
                        params=(("ne", (4, 1, 1, 1)), ("nb", (4, 16, 16, 16)), ("offset", 12))),
                 "past the source", id="view-out-of-bounds"),
    pytest.param(OpCase("ACC", (TensorSpec("f32", (4, 2, 1, 1)), TensorSpec("f32", (2, 2, 1, 1))),
                        params=(("nb1", 16), ("nb2", 32), ("nb3", 32), ("offset", 24))),
                 "past a's", id="acc-out-of-bounds"),
    pytest.param(OpCase("ACC", (TensorSpec("f32", (4, 2, 1, 1)), TensorSpec("f32", (2, 2, 1, 1))),
                        params=(("nb1", 6), ("nb2", 32), ("nb3", 32), ("offset", 0))),
                 "multiples of 4", id="acc-misaligned"),
    pytest.param(OpCase("PAD", (TensorSpec("f32", (4, 2, 1, 1)),), params=(("lp", (1, 0, 0, 0)),
                                                                             ("rp", (0, 0, 0, 0)))),
                 "form=pad_ext", id="pad-left-without-ext"),
    pytest.param(OpCase("UPSCALE", (TensorSpec("f32", (4, 2, 1, 1)),), params=(("sf", 1),)),
                 "> 1", id="upscale-factor"),
]


@pytest.mark.parametrize(("case", "message"), BAD_CASES)
def test_bad_parameters_are_rejected_before_the_device(case: OpCase, message: str) -> None:
    inputs = [np.zeros(t.np_shape) for t in case.inputs]
    with pytest.raises(ValueError, match=case.op) as info:
        catalogue.evaluate(case, catalogue.golden_inputs(case, inputs))
    assert message in str(info.value)


def test_get_rows_index_out_of_range_is_rejected_before_the_device() -> None:
    data, rows = _inputs(GET_ROWS)
    rows = rows.copy()
    rows.flat[0] = -1
    with pytest.raises(ValueError, match=r"row index -1 is outside \[0, 3\)"):
        catalogue.evaluate(GET_ROWS, catalogue.golden_inputs(GET_ROWS, [data, rows]))

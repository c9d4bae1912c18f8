"""The harness catches planted numerics faults (tests/plugins/faulty_numerics.py) and passes the
same devices on cases that do not exercise the fault."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import conformance.cases.numerics  # noqa: F401  (registers the input makers)
from conformance.cases.numerics import pool_case, rope_case
from conformance.harness import Harness
from golden import catalogue, conv
from golden.case import OpCase, TensorSpec

PLUGIN = "tests.plugins.faulty_numerics"


@pytest.fixture(scope="module")
def harnesses() -> Iterator[dict[str, Harness]]:
    opened = {name: Harness(f"{PLUGIN}:{name}", timeout=60.0)
              for name in ("rope_double_attn", "softmax_ignore_max_bias", "pool_avg_exclude_pad", "pool_max_zero_pad")}
    yield opened
    for h in opened.values():
        h.close()


def rope(attn_factor: float, *, ext_factor: float = 0.0, n_dims: int = 32, seed: int = 0) -> OpCase:
    x = TensorSpec("f32", (32, 4, 5, 1))
    params = (("n_dims", n_dims), ("mode", 2), ("n_ctx_orig", 4096), ("freq_base", 10000.0), ("freq_scale", 0.5),
              ("ext_factor", ext_factor), ("attn_factor", attn_factor), ("beta_fast", 32.0), ("beta_slow", 1.0),
              ("freq_factors", False))
    return OpCase("ROPE", (x, TensorSpec("i32", (5, 1, 1, 1))), params=params, data_seed=seed, distribution="wide")


def soft_max(max_bias: float, *, heads: int = 6, seed: int = 0) -> OpCase:
    inputs = (TensorSpec("f32", (16, 4, heads, 1)), TensorSpec("f16", (16, 5, 1, 1)))
    params = (("scale", 0.125), ("max_bias", max_bias), ("mask", True), ("sinks", False))
    return OpCase("SOFT_MAX", inputs, params=params, data_seed=seed)


def pool(op: int, p: float, *, k: int = 3, seed: int = 0) -> OpCase:
    params = (("op", op), ("k0", k), ("k1", k), ("s0", 2), ("s1", 2), ("p0", p), ("p1", p))
    return OpCase("POOL_2D", (TensorSpec("f32", (9, 7, 2, 1)),), params=params, data_seed=seed)


FAULTY = [
    ("rope_double_attn", rope(1.4245)),
    ("rope_double_attn", rope(0.8, ext_factor=1.0, n_dims=16)),
    ("softmax_ignore_max_bias", soft_max(8.0)),
    ("softmax_ignore_max_bias", soft_max(0.5, heads=5, seed=3)),  # non-power-of-two head count
    ("pool_avg_exclude_pad", pool(1, 1.0)),
    ("pool_avg_exclude_pad", pool(1, 1.7, seed=2)),  # float padding: the taps use int(p) = 1
    ("pool_max_zero_pad", pool(0, 1.0, k=2)),  # border windows of one or two taps: negative ones become 0
    ("pool_max_zero_pad", replace(pool(0, 1.0), params=(("op", 0), ("k0", 1), ("k1", 1), ("s0", 1), ("s1", 1),
                                                         ("p0", 1.0), ("p1", 1.0)))),  # padding-only: −FLT_MAX
]
CLEAN = [
    ("rope_double_attn", rope(1.0)),
    ("rope_double_attn", rope(1.0, ext_factor=1.0, n_dims=16)),
    ("softmax_ignore_max_bias", soft_max(0.0)),
    ("pool_avg_exclude_pad", pool(1, 0.0)),
    ("pool_avg_exclude_pad", pool(1, 0.5)),  # p = 0.5 is stored as 0: no padded taps
    ("pool_avg_exclude_pad", pool(0, 1.0)),  # MAX ignores the divisor
    ("pool_max_zero_pad", pool(0, 0.0)),
    ("pool_avg_exclude_pad", OpCase("ROPE", rope(1.4245).inputs, rope(1.4245).params)),  # other ops untouched
]


def _ids(cases: list[tuple[str, OpCase]]) -> list[str]:
    return [f"{fault}-{case.case_id}" for fault, case in cases]


@pytest.mark.parametrize(("fault", "case"), FAULTY, ids=_ids(FAULTY))
def test_fault_is_reported(harnesses: dict[str, Harness], fault: str, case: OpCase) -> None:
    record = harnesses[fault].evaluate(case)
    assert record.outcome == "fail", record.message
    assert "should be" in record.message


@pytest.mark.parametrize(("fault", "case"), CLEAN, ids=_ids(CLEAN))
def test_unexercised_fault_passes(harnesses: dict[str, Harness], fault: str, case: OpCase) -> None:
    record = harnesses[fault].evaluate(case)
    assert record.outcome == "pass", record.message


@settings(max_examples=15, deadline=None, derandomize=True, database=None)
@given(data=st.data())
def test_rope_fault_iff_attn_factor(harnesses: dict[str, Harness], data: st.DataObject) -> None:
    """Over the suite's own RoPE strategy: fail exactly when attn_factor ≠ 1."""
    sig = catalogue.get("ROPE").signatures[0]
    case = data.draw(rope_case("ROPE", sig), label="case")
    outcome = harnesses["rope_double_attn"].evaluate(case).outcome
    assert outcome == ("pass" if case.param("attn_factor") == 1.0 else "fail")


@settings(max_examples=15, deadline=None, derandomize=True, database=None)
@given(data=st.data())
def test_pool_fault_iff_padded_avg(harnesses: dict[str, Harness], data: st.DataObject) -> None:
    """Over the suite's POOL_2D strategy: fail exactly when an AVG window lies partly outside the image
    (a window wholly outside averages to 0 either way)."""
    sig = catalogue.get("POOL_2D").signatures[0]
    case = data.draw(pool_case("POOL_2D", sig), label="case")
    p = case.params_dict
    ne = case.inputs[0].ne
    share = conv.pool_2d(np.ones(tuple(reversed(ne))), conv.POOL_AVG, p["k0"], p["k1"], p["s0"], p["s1"],
                         p["p0"], p["p1"])
    exercised = p["op"] == conv.POOL_AVG and bool(np.any((share > 0) & (share < 1)))
    outcome = harnesses["pool_avg_exclude_pad"].evaluate(case).outcome
    assert outcome == ("fail" if exercised else "pass")

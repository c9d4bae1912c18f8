"""FLASH_ATTN_EXT and SET_ROWS: the goldens against plain loops, the semantics the docs state (fully
masked rows are 0, GQA groups consecutive heads, duplicates may take any writer's value), and what
ggml's CPU does on them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from conformance.cases.kvcache import judge_set_rows
from conformance.data import as_stored
from conformance.inputs import make_inputs
from golden import attention, catalogue, dtypes
from golden.case import OpCase, TensorSpec


def _fa_case(n_q: int, n_kv: int, n_head: int, n_head_kv: int, d: int, *, mask: bool, sinks: bool = False,
             softcap: float = 0.0, max_bias: float = 0.0) -> OpCase:
    inputs = [TensorSpec("f32", (d, n_q, n_head, 1)), TensorSpec("f16", (d, n_kv, n_head_kv, 1)),
              TensorSpec("f16", (d, n_kv, n_head_kv, 1))]
    if mask:
        inputs.append(TensorSpec("f16", (n_kv, n_q, 1, 1)))
    if sinks:
        inputs.append(TensorSpec("f32", (n_head, 1, 1, 1)))
    params = (("scale", float(np.float32(1 / math.sqrt(d)))), ("max_bias", max_bias), ("logit_softcap", softcap),
              ("prec", "default"), ("mask", mask), ("sinks", sinks))
    return OpCase("FLASH_ATTN_EXT", tuple(inputs), params=params, data_seed=7)


def _loop_attention(case: OpCase, xs: list[np.ndarray]) -> np.ndarray:
    """Attention one (head, query) at a time, written independently of golden/attention.py."""
    q, k, v = (np.asarray(x, np.float64)[0] for x in xs[:3])  # (heads, rows, d)
    mask = np.asarray(xs[3], np.float64)[0, 0] if case.param("mask") else None
    sinks = np.asarray(xs[-1], np.float64).ravel() if case.param("sinks") else None
    n_head, n_q = q.shape[0], q.shape[1]
    group = n_head // k.shape[0]
    slopes = attention.alibi_slopes(n_head, case.param("max_bias"))
    out = np.zeros((n_q, n_head, v.shape[-1]))
    for h in range(n_head):
        for t in range(n_q):
            logits = case.param("scale") * (k[h // group] @ q[h, t])
            if case.param("logit_softcap"):
                c = case.param("logit_softcap")
                logits = c * np.tanh(logits / c)
            if mask is not None:
                logits = logits + slopes[h] * mask[t]
            terms = [x for x in logits if x != -np.inf] + ([sinks[h]] if sinks is not None else [])
            if not terms:
                continue  # fully masked, no sink: 0
            top = max(terms)
            e = np.exp(logits - top)
            total = e.sum() + (math.exp(sinks[h] - top) if sinks is not None else 0.0)
            out[t, h] = (e / total) @ v[h // group]
    return out[None]


@pytest.mark.parametrize(("mask", "sinks", "softcap", "max_bias"),
                         [(False, False, 0.0, 0.0), (True, False, 0.0, 8.0), (True, True, 0.0, 0.0),
                          (False, True, 30.0, 0.0)])
def test_golden_matches_a_plain_loop(mask: bool, sinks: bool, softcap: float, max_bias: float) -> None:
    case = _fa_case(5, 9, 4, 2, 16, mask=mask, sinks=sinks, softcap=softcap, max_bias=max_bias)
    xs = catalogue.golden_inputs(case, [as_stored(x, t.dtype) for x, t in zip(make_inputs(case), case.inputs,
                                                                             strict=True)])
    np.testing.assert_allclose(catalogue.evaluate(case, xs), _loop_attention(case, xs), rtol=1e-12, atol=1e-14)


def test_gqa_groups_consecutive_heads() -> None:
    """Heads 0 and 1 share kv head 0 when n_head = 4, n_head_kv = 2: same q gives the same output."""
    case = _fa_case(1, 6, 4, 2, 8, mask=False)
    rng = np.random.default_rng(1)
    q = np.repeat(rng.uniform(-1, 1, size=(1, 1, 1, 8)), 4, axis=1)
    k = dtypes.round_to(rng.uniform(-1, 1, size=(1, 2, 6, 8)), "f16")
    v = dtypes.round_to(rng.uniform(-1, 1, size=(1, 2, 6, 8)), "f16")
    out = catalogue.evaluate(case, [q, k, v])[0, 0]  # (n_head, DV)
    np.testing.assert_array_equal(out[0], out[1])
    np.testing.assert_array_equal(out[2], out[3])
    assert not np.array_equal(out[1], out[2])


@pytest.mark.parametrize("sinks", [False, True])
def test_a_fully_masked_row_is_zero_in_the_golden_the_bound_and_on_ggml_cpu(sinks: bool) -> None:
    from device.ggml.device import GgmlDevice

    case = _fa_case(3, 5, 2, 1, 64, mask=True, sinks=sinks)
    stored = [as_stored(x, t.dtype) for x, t in zip(make_inputs(case), case.inputs, strict=True)]
    stored[3] = np.asarray(stored[3]).copy()
    stored[3][0, 0, 1, :] = -np.inf  # query 1 sees no key
    stored[3][0, 0, 0, :] = 0.0
    xs = catalogue.golden_inputs(case, stored)
    golden = catalogue.evaluate(case, xs)
    allowed = attention.attention_error_bound(case, xs, golden)
    assert np.all(golden[0, 1] == 0.0) and np.all(allowed[0, 1] == 0.0)
    assert np.all(allowed[0, 0] > 0.0)
    dev = GgmlDevice("CPU")
    try:
        out = np.asarray(dev.run(case, stored).output, np.float64)
    finally:
        dev.close()
    assert np.all(out[0, 1] == 0.0), "ggml's CPU defines a fully masked row as 0"
    assert np.all(np.isfinite(out))


def _set_rows_case(dst: str = "f32") -> OpCase:
    return OpCase("SET_ROWS", (TensorSpec(dst, (4, 5, 1, 1)), TensorSpec("f32", (4, 3, 1, 1)),
                               TensorSpec("i64", (3, 1, 1, 1))), dst=dst)


def test_set_rows_last_duplicate_wins_in_the_golden() -> None:
    case = _set_rows_case()
    a = np.zeros((1, 1, 5, 4))
    b = np.arange(12, dtype=np.float64).reshape(1, 1, 3, 4)
    idx = np.array([[[[2, 4, 2]]]], dtype=np.int64)
    out = catalogue.evaluate(case, [a, b, idx])
    np.testing.assert_array_equal(out[0, 0, 2], b[0, 0, 2])
    np.testing.assert_array_equal(out[0, 0, 4], b[0, 0, 1])
    np.testing.assert_array_equal(out[0, 0, [0, 1, 3]], 0.0)


def test_set_rows_verdict_accepts_any_duplicate_and_nothing_else() -> None:
    case = _set_rows_case("f16")
    a = np.zeros((1, 1, 5, 4))
    b = np.arange(12, dtype=np.float64).reshape(1, 1, 3, 4) + 0.1
    idx = np.array([[[[2, 4, 2]]]], dtype=np.int64)
    golden = catalogue.evaluate(case, [a, b, idx])
    row = catalogue.tolerance_of(case)
    first_writer = golden.copy()
    first_writer[0, 0, 2] = dtypes.round_to(b[0, 0, 0], "f16")
    mixed = golden.copy()
    mixed[0, 0, 2, :2] = dtypes.round_to(b[0, 0, 0, :2], "f16")  # a torn write: elements from both writers
    assert judge_set_rows(case, [a, b, idx], golden, first_writer, row).passed
    assert judge_set_rows(case, [a, b, idx], golden, mixed, row).passed
    off_by_one = golden.copy()
    off_by_one[0, 0, 3] = golden[0, 0, 2]
    off_by_one[0, 0, 2] = 0.0
    verdict = judge_set_rows(case, [a, b, idx], golden, off_by_one, row)
    assert not verdict.passed and verdict.n_bad == 8
    unrounded = golden.copy()
    unrounded[0, 0, 4] = b[0, 0, 1]  # not converted to F16
    assert not judge_set_rows(case, [a, b, idx], golden, unrounded, row).passed

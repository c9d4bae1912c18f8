"""The aggregate criterion (golden/tolerance.py) and the prec-dependent FLASH_ATTN_EXT bound: a
reduction with a dropped tail stays within every element's worst-case bound and is caught by the RMS
check, while the exact result rounded to f32 passes both."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.data import as_stored
from conformance.inputs import make_inputs
from conformance.verdict import compare
from device.base import as_output
from golden import attention, catalogue
from golden.case import OpCase, parse_case_id
from tests.plugins import faulty_bounds

MUL_MAT_K4096 = "MUL_MAT(type0=f16,ne0=[4096,3,1,1],type1=f32,ne1=[4096,2,1,1],dst=f32,data=uniform:{seed})"
SUM_ROWS_8192 = "SUM_ROWS(type=f32,ne=[8192,2,1,1],dst=f32,data=uniform:{seed})"
FA_F16 = ("FLASH_ATTN_EXT(type0=f32,ne0=[64,4,2,1],type1=f16,ne1=[64,{n},1,1],type2=f16,ne2=[64,{n},1,1],"
              "dst=f32,scale=0.125,max_bias=0.0,logit_softcap=0.0,prec={prec},mask=False,sinks=False,"
              "data=uniform:{seed})")
# a quarter of 200 keys dropped stays within the F16 accumulator's worst case 2n(w+u)Σp|v|; with 511
# keys and zero-mean V it is within its typical rounding too under prec default (caught under prec f32)
FA_200 = FA_F16.replace("{n}", "200").replace("{prec}", "default")
FA_511 = FA_F16.replace("{n}", "511")


def _judge(case: OpCase, device_output: np.ndarray) -> tuple[bool, int, str, float | None]:
    stored = [as_stored(x, t.dtype) for x, t in zip(make_inputs(case), case.inputs, strict=True)]
    exact = catalogue.golden_inputs(case, stored)
    golden = catalogue.evaluate(case, exact)
    m = compare(case, exact, golden, np.asarray(device_output, np.float64), catalogue.tolerance_of(case))
    return m.passed, m.n_bad, m.criterion, m.aggregate_ratio


def _exact(case: OpCase) -> np.ndarray:
    stored = [as_stored(x, t.dtype) for x, t in zip(make_inputs(case), case.inputs, strict=True)]
    return catalogue.evaluate(case, catalogue.golden_inputs(case, stored))


def _faulty(case: OpCase) -> np.ndarray:
    stored = [as_stored(x, t.dtype) for x, t in zip(make_inputs(case), case.inputs, strict=True)]
    xs = catalogue.golden_inputs(case, stored)
    if case.op == "MUL_MAT":
        return faulty_bounds.mul_mat_without_last_term(xs)
    if case.op == "SUM_ROWS":
        return faulty_bounds.sum_rows_without_last(xs)
    return faulty_bounds.fa_without_last_split(xs, case)


@pytest.mark.parametrize("template", [MUL_MAT_K4096, SUM_ROWS_8192, FA_200],
                         ids=["mul_mat", "sum_rows", "flash_attn_ext"])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_dropped_tail_within_the_worst_case_fails_the_aggregate(template: str, seed: int) -> None:
    case = parse_case_id(template.format(seed=seed))
    passed, n_bad, criterion, aggregate = _judge(case, as_output(_faulty(case), "f32"))
    assert n_bad == 0, "the fault must stay within every element's worst-case bound (it stands for that hole)"
    assert not passed and criterion == "aggregate" and aggregate is not None and aggregate > 1


@pytest.mark.parametrize("template", [MUL_MAT_K4096, SUM_ROWS_8192, FA_511.replace("{prec}", "default"),
                                      FA_511.replace("{prec}", "f32")],
                         ids=["mul_mat", "sum_rows", "flash_attn_ext", "flash_attn_ext-prec_f32"])
def test_the_exact_result_rounded_once_passes_both_criteria(template: str) -> None:
    case = parse_case_id(template.format(seed=0))
    passed, n_bad, _, aggregate = _judge(case, as_output(_exact(case), "f32"))
    assert passed and n_bad == 0 and aggregate is not None and aggregate < 0.5


def test_under_prec_f32_a_dropped_quarter_of_511_keys_fails_the_element_bound() -> None:
    """Under prec default the F16 accumulator's worst case (2n(w+u)Σp|v|) and its typical rounding
    both hide this fault on zero-mean data; GGML_PREC_F32 allows neither."""
    loose = parse_case_id(FA_511.format(prec="default", seed=0))
    tight = parse_case_id(FA_511.format(prec="f32", seed=0))
    assert _judge(loose, as_output(_faulty(loose), "f32"))[0]
    passed, n_bad, criterion, _ = _judge(tight, as_output(_faulty(tight), "f32"))
    assert not passed and n_bad > 0 and criterion == "element"


def test_prec_f32_gives_no_f16_allowance() -> None:
    """GGML_PREC_F32 allows an f32 V accumulator only: its bound is far below prec default's."""
    loose = parse_case_id(FA_511.format(prec="default", seed=0))
    tight = parse_case_id(FA_511.format(prec="f32", seed=0))
    stored = [as_stored(x, t.dtype) for x, t in zip(make_inputs(loose), loose.inputs, strict=True)]
    golden = catalogue.evaluate(loose, stored)
    ratio = attention.attention_error_bound(tight, stored, golden) / attention.attention_error_bound(loose, stored,
                                                                                                      golden)
    assert float(np.max(ratio)) < 0.05

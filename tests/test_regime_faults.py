"""The regime faults (tests/plugins/faulty_regimes.py) are the golden device outside their regime and
wrong inside it: a suite that never draws the regime cannot catch them (test_planted_faults.py shows
the ci profile does)."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.inputs import make_inputs
from device.golden_device import GoldenDevice
from golden import catalogue
from golden.case import parse_case_id
from tests.plugins import faulty_regimes as faults

ROW = "{op}(type=f32,ne=[{n},3,1,1],dst=f32{params},data=uniform:3)"
SSM = "SSM_CONV(type0=f32,ne0=[{t},5,2,1],type1=f32,ne1=[4,5,1,1],dst=f32,data=uniform:3)"
GLA = ("GATED_LINEAR_ATTN(type0=f32,ne0=[4,1,{T},1],type1=f32,ne1=[4,1,{T},1],type2=f32,ne2=[4,1,{T},1],"
       "type3=f32,ne3=[4,1,{T},1],type4=f32,ne4=[16,2,1,1],dst=f32,scale=0.5,data=uniform:3)")
COUNT = "COUNT_EQUAL(type0=i32,ne0=[64,2,1,1],type1=i32,ne1=[64,2,1,1],dst=i64,data={d}:3)"
CONCAT = "CONCAT(type0=i32,ne0=[8,2,1,1],type1=i32,ne1=[8,2,1,1],dst=i32,dim=1,data={d}:3)"

DUP = "DUP(type=f32,ne=[{n},{rows},1,1],dst=f32,data=uniform:3)"
MUL_MAT = "MUL_MAT(type0=f32,ne0=[{k},65,1,1],type1=f32,ne1=[{k},33,1,1],dst=f32,data=uniform:3)"
GET_ROWS = "GET_ROWS(type0=f32,ne0=[2,1001,1,1],type1=i32,ne1=[{n},1,1,1],dst=f32,data=uniform:3)"
ROPE = ("ROPE(type0=f32,ne0=[{n},4,2,1],type1=i32,ne1=[2,1,1,1],dst=f32,n_dims={n},mode=0,n_ctx_orig=0,"
        "freq_base=10000.0,freq_scale=1.0,ext_factor=0.0,attn_factor=1.0,beta_fast=0.0,beta_slow=0.0,"
        "freq_factors=False,data=dense:3)")
SOFT_MAX = "SOFT_MAX(type=f32,ne=[3,{rows},1,1],dst=f32,scale=1.0,max_bias=0.0,mask=False,sinks=False,data=uniform:3)"
WIDE_MUL_MAT = "MUL_MAT(type0=f32,ne0=[4,{rows},1,1],type1=f32,ne1=[4,2,1,1],dst=f32,data=uniform:3)"
GROUP_NORM = "GROUP_NORM(type=f32,ne=[2,1,{g},1],dst=f32,n_groups={g},eps=9.999999747378752e-06,data=uniform:3)"
SOLVE_TRI = "SOLVE_TRI(type0=f32,ne0=[2,2,{b},1],type1=f32,ne1=[1,2,{b},1],dst=f32,data=uniform:3)"
SILU = "SILU(type=f32,ne=[{n},1,1,1],dst=f32,data=uniform:3)"
MUL = "MUL(type0=f32,ne0=[{n},1,1,1],type1=f32,ne1=[{n},1,1,1],dst=f32,data=uniform:3)"

# (factory, a case outside the regime, a case inside it)
CASES = [
    (faults.rms_norm_per_tile, ROW.format(op="RMS_NORM", n=512, params=",eps=1e-06"),
     ROW.format(op="RMS_NORM", n=513, params=",eps=1e-06")),
    (faults.cumsum_per_tile, ROW.format(op="CUMSUM", n=1024, params=""), ROW.format(op="CUMSUM", n=1100, params="")),
    (faults.ssm_conv_chunks_from_zero, SSM.format(t=3 + 64), SSM.format(t=3 + 70)),
    (faults.gla_chunks_from_initial_state, GLA.format(T=128), GLA.format(T=140)),
    (faults.count_equal_through_f32, COUNT.format(d="uniform"), COUNT.format(d="wide")),
    (faults.concat_through_f32, CONCAT.format(d="uniform"), CONCAT.format(d="wide")),
    (faults.dup_past_the_grid, DUP.format(n=4096, rows=16), DUP.format(n=4096, rows=17)),
    (faults.mul_mat_skips_partial_k_tile, MUL_MAT.format(k=512), MUL_MAT.format(k=300)),
    (faults.get_rows_past_the_grid, GET_ROWS.format(n=65535), GET_ROWS.format(n=65537)),
    (faults.rope_skips_partial_head_tile, ROPE.format(n=512), ROPE.format(n=640)),
    (faults.soft_max_rows_past_the_grid, SOFT_MAX.format(rows=65535), SOFT_MAX.format(rows=65536)),
    (faults.mul_mat_weight_rows_past_the_grid, WIDE_MUL_MAT.format(rows=65535), WIDE_MUL_MAT.format(rows=65537)),
    (faults.group_norm_groups_past_the_grid, GROUP_NORM.format(g=65535), GROUP_NORM.format(g=65536)),
    (faults.solve_tri_systems_past_the_grid, SOLVE_TRI.format(b=65535), SOLVE_TRI.format(b=65537)),
    (faults.silu_skips_a_partial_block, SILU.format(n=512), SILU.format(n=300)),
    (faults.mul_skips_a_partial_block, MUL.format(n=256), MUL.format(n=257)),
]


@pytest.mark.parametrize(("factory", "outside", "inside"), CASES, ids=[c[0].__name__ for c in CASES])
def test_regime_fault_is_wrong_only_inside_its_regime(factory, outside: str, inside: str) -> None:  # type: ignore[no-untyped-def]
    device = factory({})
    for case_id, wrong in ((outside, False), (inside, True)):
        case = parse_case_id(case_id)
        inputs = make_inputs(case)
        expected = np.asarray(GoldenDevice().run(case, inputs).output, np.float64)
        got = np.asarray(device.run(case, inputs).output, np.float64)
        same = np.array_equal(expected, got, equal_nan=True)
        regime_names = [r.name for r in catalogue.get(case.op).regimes if r(case)]
        assert same != wrong, f"{case_id}: expected {'wrong' if wrong else 'golden'} output (regimes {regime_names})"
        assert regime_names or not wrong, f"{case_id} is in none of {case.op}'s declared regimes"

"""Aliasing inputs as a layout (``Layout.alias``): one input a view into another's allocation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conformance.inputs import make_inputs
from golden.case import Layout, parse_case_id
from golden.geometry import check_aliases

ROOT = Path(__file__).resolve().parents[1]
OVERLAP = ("ADD(type0=f32,ne0=[64,3,1,1],lay0=pad[0,1,0,0],type1=f32,ne1=[64,3,1,1],lay1=alias[0]/offs[7],dst=f32,"
           "data=uniform:1)")
MLA = ("FLASH_ATTN_EXT(type0=f32,ne0=[576,1,4,1],type1=f16,ne1=[576,32,1,1],type2=f16,ne2=[512,32,1,1],"
       "lay2=alias[1]/pad[64,0,0,0],dst=f32,scale=0.0625,max_bias=0.0,logit_softcap=0.0,prec=f32,mask=False,"
       "sinks=False,data=uniform:7)")


def test_alias_labels_round_trip_and_old_labels_parse_as_before() -> None:
    for layout in (Layout(alias=1, pad=(64, 0, 0, 0)), Layout(alias=0, offset=5), Layout(offset=5)):
        assert Layout.from_label(layout.label()) == layout
    assert Layout.from_label("perm[0,2,1,3]/pad[0,0,28,0]/offs[5]").alias is None
    assert not Layout(alias=0).is_contiguous


def test_aliased_values_are_the_source_bytes() -> None:
    a, b = make_inputs(parse_case_id(OVERLAP))
    flat = np.concatenate([a.reshape(-1), np.full(64, np.nan)])  # a's padding row is NaN fill
    assert np.array_equal(b.reshape(-1), flat[7:7 + 192], equal_nan=True)
    q, k, v = make_inputs(parse_case_id(MLA))
    assert np.array_equal(v, k[..., :512])


def test_an_alias_that_does_not_fit_is_refused() -> None:
    case = parse_case_id(OVERLAP.replace("lay0=pad[0,1,0,0],", ""))
    with pytest.raises(ValueError, match="spans 796 bytes of a 768-byte allocation"):
        check_aliases(case.inputs)
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", "repro", OVERLAP.replace("lay0=pad[0,1,0,0],", "")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "aliases input 0" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("case_id", [OVERLAP, MLA], ids=["overlapping_add", "mla_v_in_k"])
def test_aliased_cases_pass_on_ggml_cpu_with_inputs_intact(case_id: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", "repro", case_id, "--device", "ggml:CPU"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.lstrip().startswith("PASS"), proc.stdout[-800:] + proc.stderr[-800:]

"""Every case the suite draws can be replayed from its id: ``conform repro`` checks an id before any
data exists (validators get no inputs then), and a validator that indexed the data rejected every
MUL_MAT_ID id as malformed."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance import cases
from conformance.cli import check_case
from golden import catalogue
from golden.case import OpCase
from golden.spec import Signature

OPS = [(spec.name, spec.all_signatures[0])
       for spec in catalogue.OPS.values() if spec.implemented and spec.all_signatures]


@pytest.mark.parametrize(("op", "sig"), OPS, ids=[op for op, _ in OPS])
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_drawn_case_id_is_accepted_by_repro(op: str, sig: Signature, data: st.DataObject) -> None:
    case = data.draw(cases.strategy_for(op, sig))
    parsed = check_case(case.case_id)
    assert isinstance(parsed, OpCase)
    assert parsed.case_id == case.case_id

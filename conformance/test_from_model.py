"""Model-shaped op cases (``--from-model RUN``): one Hypothesis test per distinct node signature of a
captured ``conform model`` run, drawing the signature itself first, then cases near it
(``conformance/model_cases.py``). Ids are ``test_from_model[mul_mat-3]``: ``-k from_model`` runs only
these, ``--op MUL_MAT`` one op of them.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.model_cases import ModelSignature, load_signatures, near
from conformance.suite import DRAWS_PER_EXAMPLE

NO_RUN = "no --from-model RUN given: these cases come from a captured conform model run"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "signature" not in metafunc.fixturenames:
        return
    run = metafunc.config.getoption("from_model", None)
    if not run:
        metafunc.parametrize(("op", "signature"), [pytest.param(None, None, id="none", marks=pytest.mark.skip(
            reason=NO_RUN))])
        return
    signatures = load_signatures(run)  # checked when the session started: bad input stopped it there
    metafunc.parametrize(("op", "signature"), [pytest.param(s.case.op, s, id=s.test_id) for s in signatures])


@given(data=st.data())
def test_from_model(conform: Any, op: str, signature: ModelSignature, data: st.DataObject) -> None:
    for _ in range(DRAWS_PER_EXAMPLE):
        if conform.check_drawn(data.draw(near(signature.case), label="case")):
            break

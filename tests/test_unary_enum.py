"""The unary ops' enum numbers are checked against the loaded ggml (``ggml_unary_op_name``) before a
graph uses them: a table copied from another ggml.h is a harness error, not a wrong op run quietly."""

from __future__ import annotations

import pytest

from device.ggml import lib as ggml_lib
from device.ggml import ops_elementwise
from device.ggml.graph import GraphBuilder, GraphBuildError


@pytest.fixture(scope="module")
def builder() -> GraphBuilder:
    return GraphBuilder(ggml_lib.load(), 4)


def test_every_unary_number_names_its_op_in_the_loaded_library(builder: GraphBuilder) -> None:
    for op, number in ops_elementwise.UNARY_OPS.items():
        assert ops_elementwise.unary_op_number(builder, op) == number


def test_a_number_from_another_ggml_h_is_refused(builder: GraphBuilder, monkeypatch: pytest.MonkeyPatch) -> None:
    # GELU_ERF's number before ggml moved it: 14 is EXPM1 in the libraries we bind
    monkeypatch.setitem(ops_elementwise.UNARY_OPS, "GELU_ERF", 14)
    monkeypatch.setattr(ops_elementwise, "_CHECKED_NUMBERS", set())
    with pytest.raises(GraphBuildError, match="GELU_ERF"):
        ops_elementwise.unary_op_number(builder, "GELU_ERF")

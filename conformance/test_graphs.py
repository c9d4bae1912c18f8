"""The graph tier: one Hypothesis test per graph pattern × dtype signature (``golden/graphs/patterns/``).

Ids are ``test_graph[rms_norm_mul-f32]``: ``-k rms_norm_mul`` and ``--op RMS_NORM_MUL`` select a
pattern. Each case runs fused, with fusion blocked and under ggml's graph allocator
(``conformance/graphs.py``).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.graph_strategies import graph_strategy
from conformance.graphs import check_graph
from golden.graphs.registry import patterns


def _parameters() -> list[Any]:
    return [pytest.param(name.upper(), sig, id=f"{name}-{sig}") for name, p in patterns().items()
            for sig in p.signatures]


@pytest.mark.parametrize(("op", "sig"), _parameters())
@given(data=st.data())
def test_graph(conform: Any, op: str, sig: str, data: st.DataObject) -> None:
    check_graph(conform, data.draw(graph_strategy(op.lower(), sig), label="graph case"), once=True)

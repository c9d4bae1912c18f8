"""The graph tier: one Hypothesis test per graph pattern × dtype signature (``golden/graphs/patterns/``).

Ids are ``test_graph[rms_norm_mul-f32]``: ``-k rms_norm_mul`` and ``--op RMS_NORM_MUL`` select a
pattern; a pattern split by one param (``graph_strategies.VARIANTS``) has one test per value,
``test_graph[topk_moe-f32-softmax_weight]``. Each case runs fused, with fusion blocked and under ggml's graph allocator
(``conformance/graphs.py``).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.graph_strategies import VARIANTS, graph_strategy
from conformance.graphs import check_graph
from golden.graphs.registry import patterns


def _parameters() -> list[Any]:
    out = []
    for name, p in patterns().items():
        for sig in p.signatures:
            if name in VARIANTS:
                out += [pytest.param(name.upper(), sig, v, id=f"{name}-{sig}-{v}") for v in VARIANTS[name][1]]
            else:
                out.append(pytest.param(name.upper(), sig, None, id=f"{name}-{sig}"))
    return out


@pytest.mark.parametrize(("op", "sig", "variant"), _parameters())
@given(data=st.data())
def test_graph(conform: Any, op: str, sig: str, variant: str | None, data: st.DataObject) -> None:
    check_graph(conform, data.draw(graph_strategy(op.lower(), sig, variant), label="graph case"), once=True)

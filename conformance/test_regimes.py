"""Every declared regime, drawn in every run: one test per op and regime (``test_regime[mean-row>=4096]``).

The group tests reach an op's regimes through strategy branches of a fixed share (golden.spec.Regime;
tests/test_regime_coverage.py shows the ci profile and two fresh seeds reach each), but a short random
draw (the dev profile's 12 examples) can still miss one. Here each (op, regime) draws cases from the op's
own strategies over all its signatures, kept only where the regime holds, so each run judges at least one
case inside every regime; the report's coverage column then shows every declared regime reached.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance import cases
from conformance.strategies import FLOAT_ONLY_REGIMES
from conformance.suite import DRAWS_PER_EXAMPLE
from golden import catalogue
from golden.case import OpCase
from golden.spec import OpSpec, Regime

# a tenth of the profile's examples (at least one): dev 1, ci 3, nightly 40 per regime; the group tests
# draw the rest of each regime's cases
SHARE_OF_PROFILE = 10


def regime_examples() -> int:
    """This run's examples per regime: a tenth of the loaded profile's (at least one)."""
    return max(1, settings().max_examples // SHARE_OF_PROFILE)


def regime_params() -> list[Any]:
    return [pytest.param(spec.name, regime.name, id=f"{spec.name.lower()}-{regime.name}")
            for spec in catalogue.implemented() for regime in spec.regimes]


def inside(spec: OpSpec, regime: Regime) -> st.SearchStrategy[OpCase]:
    """The op's cases over all its signatures (its float ones, where only those have the regime's branch:
    conformance.strategies.FLOAT_ONLY_REGIMES), those in ``regime`` only."""
    signatures = spec.all_signatures
    if (spec.name, regime.name) in FLOAT_ONLY_REGIMES:
        signatures = tuple(s for s in signatures if not s.quantized)
    drawn = st.one_of([cases.strategy_for(spec.name, s) for s in signatures])
    return drawn.filter(regime)


@pytest.mark.parametrize(("op", "regime"), regime_params())
@settings(max_examples=regime_examples())
@given(data=st.data())
def test_regime(conform: Any, op: str, regime: str, data: st.DataObject) -> None:
    spec = catalogue.get(op)
    wanted = next(r for r in spec.regimes if r.name == regime)
    for _ in range(DRAWS_PER_EXAMPLE):  # a case a known bug covers judges nothing: draw again
        if conform.check_drawn(data.draw(inside(spec, wanted), label="case")):
            break

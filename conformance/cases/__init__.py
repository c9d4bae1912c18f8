"""How the suite draws and judges each catalogue op: one entry per op, in its family module.

Each module in this package registers, for the ops of one family, the Hypothesis strategy that
draws valid cases (``draw``), the strategy for quantized signatures (``quantized``), the input maker
for ops whose inputs have structure (``make_inputs``: indices, positions, masks) and the comparator
for ops not judged elementwise (``judge``). Ops with no entry of their own take their golden
family's default strategy (a new plain unary op needs nothing here). The catalogue drives the
suite: ``conformance/suite.py`` turns every op × signature into a test.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from hypothesis import strategies as st

from conformance.cases.registry import (  # noqa: F401  (the package's interface)
    ON_CHANGE,
    CaseStrategy,
    Comparator,
    InputMaker,
    MissingPiece,
    OpCases,
    family_default,
    lookup_loaded,
    register,
)
from golden import catalogue
from golden.case import OpCase
from golden.spec import Signature

_LOOKED_UP: dict[str, OpCases] = {}  # lookup()'s answers, forgotten whenever an entry changes


def lookup(op: str) -> OpCases:
    """The op's entry with its family default filled in (no check that it is complete)."""
    load_all()
    found = _LOOKED_UP.get(op)
    if found is None:
        found = _LOOKED_UP[op] = lookup_loaded(op)
    return found


def entry(op: str) -> OpCases:
    """The op's complete entry; :class:`MissingPiece` names whatever the catalogue needs and is absent."""
    spec = catalogue.get(op)
    found = lookup(op)
    missing = []
    if spec.signatures and found.draw is None:
        missing.append("a case strategy (conformance/cases: register(draw=...) or a family default)")
    if spec.quantized_signatures and found.quantized is None:
        missing.append("a quantized case strategy (register(quantized=...))")
    if spec.structured_inputs and found.make_inputs is None:
        missing.append("an input maker (structured_inputs=True; register(make_inputs=...))")
    if spec.own_verdict and found.judge is None:
        missing.append("a comparator (own_verdict=True; register(judge=...))")
    if not found.group:
        missing.append("a test group")
    if missing:
        raise MissingPiece(f"{spec.name}: the suite lacks " + "; ".join(missing))
    return found


@functools.cache
def strategy_for(op: str, signature: Signature) -> st.SearchStrategy[OpCase]:
    """The op's case strategy for one signature, built once (Hypothesis validates each new strategy
    object on its first draw)."""
    found = entry(op)
    draw = found.quantized if signature.quantized else found.draw
    assert draw is not None  # entry() checked it
    return draw(op, signature)


ON_CHANGE.extend((_LOOKED_UP.clear, strategy_for.cache_clear))


_LOADED = False


def load_all() -> None:
    """Import every family module of this package (each registers its ops on import)."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")

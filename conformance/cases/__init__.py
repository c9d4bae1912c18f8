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
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from hypothesis import strategies as st

from golden import catalogue
from golden.case import OpCase
from golden.spec import Signature

CaseStrategy = Callable[[str, Signature], st.SearchStrategy[OpCase]]
InputMaker = Callable[[OpCase, np.random.Generator], list[np.ndarray]]
Comparator = Callable[..., object]  # (case, exact inputs, golden, device output) -> verdict.Metrics


class MissingPiece(LookupError):
    """The suite lacks something the catalogue says an op needs (a harness error, never a skip)."""


@dataclass(frozen=True)
class OpCases:
    op: str
    group: str  # the test function (test_<group>) whose parameters include this op
    draw: CaseStrategy | None = None
    quantized: CaseStrategy | None = None
    make_inputs: InputMaker | None = None
    judge: Comparator | None = None


_ENTRIES: dict[str, OpCases] = {}
_FAMILY_DEFAULTS: dict[str, OpCases] = {}
_LOOKED_UP: dict[str, OpCases] = {}  # lookup()'s answers, forgotten whenever an entry changes


def register(*ops: str, group: str | None = None, draw: CaseStrategy | None = None,
             quantized: CaseStrategy | None = None, make_inputs: InputMaker | None = None,
             judge: Comparator | None = None) -> None:
    """Add (or complete) the entries of ``ops``; only the given pieces change."""
    _forget_answers()
    for op in ops:
        old = _ENTRIES.get(op) or OpCases(op, group or "")
        _ENTRIES[op] = OpCases(
            op, group or old.group, draw or old.draw, quantized or old.quantized, make_inputs or old.make_inputs,
            judge or old.judge)


def family_default(family: str, *, group: str, draw: CaseStrategy) -> None:
    """The strategy (and test group) for ops of a golden family that register nothing of their own."""
    _forget_answers()
    _FAMILY_DEFAULTS[family] = OpCases("", group, draw)


def _forget_answers() -> None:
    _LOOKED_UP.clear()
    strategy_for.cache_clear()


def lookup(op: str) -> OpCases:
    """The op's entry with its family default filled in (no check that it is complete)."""
    load_all()
    found = _LOOKED_UP.get(op)
    if found is None:
        found = _LOOKED_UP[op] = _lookup(op)
    return found


def _lookup(op: str) -> OpCases:
    spec = catalogue.get(op)
    own = _ENTRIES.get(spec.name)
    default = _FAMILY_DEFAULTS.get(spec.family)
    if own is None:
        return replace(default, op=spec.name) if default is not None else OpCases(spec.name, "")
    if own.draw is None and default is not None:
        own = replace(own, draw=default.draw, group=own.group or default.group)
    return own


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


_LOADED = False


def load_all() -> None:
    """Import every family module of this package (each registers its ops on import)."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")

"""The registry the family modules of ``conformance.cases`` fill: one :class:`OpCases` per op.

Apart from the package's ``__init__`` (which imports the family modules), so that a family module
imports this and never the package that imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from hypothesis import strategies as st

from golden import catalogue
from golden.case import OpCase
from golden.spec import Signature

CaseStrategy = Callable[[str, Signature], st.SearchStrategy[OpCase]]
InputMaker = Callable[[OpCase, np.random.Generator], list[np.ndarray]]
# (case, exact inputs, golden, device output, the tolerance row it judges with) -> verdict.Metrics; the row is
# handed in (the catalogue's, a documented deviation's, a graph node's chained bound), never looked up again
Comparator = Callable[..., object]


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
# called whenever an entry changes, so that answers built from the old entries are forgotten
ON_CHANGE: list[Callable[[], None]] = []


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
    for forget in ON_CHANGE:
        forget()


def lookup_loaded(op: str) -> OpCases:
    """The op's entry among those registered so far, with its family default filled in."""
    spec = catalogue.get(op)
    own = _ENTRIES.get(spec.name)
    default = _FAMILY_DEFAULTS.get(spec.family)
    if own is None:
        return replace(default, op=spec.name) if default is not None else OpCases(spec.name, "")
    if own.draw is None and default is not None:
        own = replace(own, draw=default.draw, group=own.group or default.group)
    return own

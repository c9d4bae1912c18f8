"""One resolution per case: what judges it on this device and release, looked up once.

A :class:`Resolution` holds the op's spec (``golden/catalogue``), the suite's entry for it (strategy,
input maker, comparator: ``conformance/cases``), the catalogue's tolerance row with its id, and the
device's known bug covering the case (whose own tolerance, if it has one, is a documented deviation).
The harness resolves a case once and hands this object on instead of looking each piece up again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from conformance import cases
from conformance.cases.registry import OpCases
from device.known_bug import KnownBug
from golden import catalogue
from golden.case import OpCase
from golden.spec import OpSpec
from golden.tolerance import Tolerance


@dataclass(frozen=True)
class Resolution:
    spec: OpSpec
    entry: OpCases
    tolerance: Tolerance  # the catalogue's row: what any correct implementation meets
    tolerance_row: str  # its id, OP[key]: "GELU[f16]", "MUL_MAT[q4_0_f32_to_f32]"
    known_bug: KnownBug | None  # this device and release's bug covering the case

    @property
    def deviation(self) -> Tolerance | None:
        """The known bug's documented deviation (its own bound), if it has one."""
        return self.known_bug.tolerance if self.known_bug is not None else None

    def decided_by(self, by_deviation: bool) -> str:
        """What decided the verdict, by id: ``catalogue:OP[key]`` or ``deviation:<known bug id>``."""
        if by_deviation and self.known_bug is not None:
            return f"deviation:{self.known_bug.id}"
        return f"catalogue:{self.tolerance_row}"


def resolve(case: OpCase, known_bug_of: Callable[[OpCase], KnownBug | None]) -> Resolution:
    """The case's resolution; KeyError for an op the catalogue lacks or a destination it has no row for."""
    spec = catalogue.get(case.op)
    key = spec.tolerance_key(case.dst, catalogue.signature_of(case).label())
    return Resolution(spec, cases.lookup(case.op), spec.tolerance[key], f"{spec.name}[{key}]", known_bug_of(case))

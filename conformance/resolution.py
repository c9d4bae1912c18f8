"""One resolution per case: what judges it on this device and release, looked up once.

A :class:`Resolution` holds the op's spec (``golden/catalogue``), the suite's entry for it (strategy,
input maker, comparator: ``conformance/cases``), the catalogue's tolerance row with its id, and the
device's known bug covering the case (whose own tolerance, if it has one, is a documented deviation).
The harness resolves a case once and hands this object on instead of looking each piece up again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
    # every known bug of this device and release covering the case, in list order: a case can sit under
    # a documented deviation (its bound) and a defect (a crash on a misaligned view) at once
    known_bugs: tuple[KnownBug, ...] = ()

    @property
    def known_bug(self) -> KnownBug | None:
        """The first covering known bug (what a report names when nothing more precise applies)."""
        return self.known_bugs[0] if self.known_bugs else None

    @property
    def deviation_bug(self) -> KnownBug | None:
        """The first covering known bug that is a documented deviation (carries its own bound)."""
        return next((b for b in self.known_bugs if b.tolerance is not None), None)

    @property
    def deviation(self) -> Tolerance | None:
        """The documented deviation's own bound, if one covers the case."""
        bug = self.deviation_bug
        return bug.tolerance if bug is not None else None

    @property
    def corrupts_process(self) -> bool:
        return any(b.corrupts_process for b in self.known_bugs)

    def explaining(self, outcome: str, deviation_held: bool) -> KnownBug | None:
        """The covering bug that says the case gives ``outcome`` (a documented deviation only while the
        result stayed within its bound); for a pass, the first covering bug (a stale expectation)."""
        deviation = self.deviation_bug
        if outcome == "fail" and deviation is not None and deviation_held:
            return deviation  # within the backend's own documented bound
        candidates = [b for b in self.known_bugs if b.tolerance is None or deviation_held]
        if outcome == "pass":
            return candidates[0] if candidates else None
        return next((b for b in candidates if outcome in b.outcomes), None)

    def decided_by(self, by_deviation: bool) -> str:
        """What decided the verdict, by id: ``catalogue:OP[key]`` or ``deviation:<known bug id>``."""
        bug = self.deviation_bug
        if by_deviation and bug is not None:
            return f"deviation:{bug.id}"
        return f"catalogue:{self.tolerance_row}"


def resolve(case: OpCase, known_bugs_of: Callable[[OpCase], Sequence[KnownBug]]) -> Resolution:
    """The case's resolution; KeyError for an op the catalogue lacks or a destination it has no row for."""
    spec = catalogue.get(case.op)
    key = spec.tolerance_key(case.dst, catalogue.signature_of(case).label())
    return Resolution(spec, cases.lookup(case.op), spec.tolerance[key], f"{spec.name}[{key}]",
                      tuple(known_bugs_of(case)))

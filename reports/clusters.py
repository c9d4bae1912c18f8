"""Failure clusters: failing cases that are very likely one bug.

A nightly run that finds one bug finds it hundreds of times (every example Hypothesis tried, and
every step of its shrinking). A cluster gathers the failures of one op on one device with one dtype
signature and one kind of failure (a crash by signal, a timeout, a harness error, or for a wrong
result what is wrong: the NaN/inf pattern, the inputs written, the shape, or just the magnitude).
Each cluster keeps its smallest case (fewest input elements: the one Hypothesis shrank to, and the
one to debug), its worst few and its count, so every cluster can be listed without listing every
case.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from reports.repro import header_inventory, pasteable_repro
from results.load import ResultsFile, as_float
from results.outcome import Outcome


class FailureKind(Enum):
    """What went wrong, as far as the record tells; the value is the label the report shows."""

    CRASH = "crash"
    TIMEOUT = "timeout"
    ERROR = "harness error"
    SHAPE = "wrong shape or size"
    INPUTS_WRITTEN = "inputs written"
    DEVICE_MEMORY = "device memory check"
    NONFINITE = "NaN/inf pattern"
    NMSE = "NMSE over bound"
    MAGNITUDE = "error over tolerance"


_KIND_ORDER = {kind: index for index, kind in enumerate(FailureKind)}


def failure_kind(case: dict[str, Any]) -> tuple[FailureKind, str]:
    """The kind of a failing record, and a detail that splits it further (a crash's signal)."""
    outcome = case["outcome"]
    if outcome == Outcome.CRASH:
        crash = case.get("crash")
        signal = crash.get("signal") if isinstance(crash, dict) else None
        return FailureKind.CRASH, str(signal) if signal not in (None, "") else ""
    if outcome == Outcome.TIMEOUT:
        return FailureKind.TIMEOUT, ""
    if outcome == Outcome.ERROR:
        return FailureKind.ERROR, ""
    message = str(case.get("message") or "")
    # The harness's own wording (conformance/harness.py, verdict*.py) says which check failed.
    if "shape mismatch" in message or message.startswith("device returned"):
        return FailureKind.SHAPE, ""
    if "modified input" in message:
        return FailureKind.INPUTS_WRITTEN, ""
    if "device memory check failed" in message:
        return FailureKind.DEVICE_MEMORY, ""
    metrics = case.get("metrics")
    if isinstance(metrics, dict):
        nonfinite = as_float(metrics.get("nonfinite_mismatch"))
        if nonfinite is not None and nonfinite > 0:
            return FailureKind.NONFINITE, ""
        n_bad = as_float(metrics.get("n_bad"))
        if n_bad == 0:  # no element over its bound, so the error is the NMSE rule's
            return FailureKind.NMSE, ""
    return FailureKind.MAGNITUDE, ""


def dtype_signature(dtypes: Any) -> str:
    """Every input's type in order, then the destination's: ``f16·f32→f32``."""
    if not isinstance(dtypes, dict) or not dtypes:
        return "?"
    sources = sorted((name for name in dtypes if name != "dst"), key=_source_order)
    text = "·".join(str(dtypes[name]) for name in sources)
    dst = dtypes.get("dst")
    return f"{text}→{dst}" if dst is not None else text


def _source_order(name: str) -> tuple[int, str]:
    digits = name[3:] if name.startswith("src") else ""
    return (int(digits), name) if digits.isdigit() else (1 << 30, name)


def input_elements(case: dict[str, Any]) -> int:
    """How big a case is: the elements of all its inputs (the output's count where none are listed)."""
    total = 0
    shapes = case.get("shapes")
    if isinstance(shapes, dict):
        for name, shape in shapes.items():
            if name == "dst" or not isinstance(shape, list):
                continue
            count = 1
            for size in shape:
                count *= size if isinstance(size, int) and size > 0 else 1
            total += count
    if total == 0:
        metrics = case.get("metrics")
        n = as_float(metrics.get("n")) if isinstance(metrics, dict) else None
        total = int(n) if n is not None and math.isfinite(n) else 0
    return total


@dataclass(frozen=True)
class ClusterKey:
    op: str
    column: str  # the device column (spec, or spec@host)
    signature: str
    kind: FailureKind
    detail: str = ""  # the crash signal; the id of the known bug for known failures
    known: str = ""  # "" for unexpected failures; else the known cause's id

    @property
    def label(self) -> str:
        kind = self.kind.value + (f" ({self.detail})" if self.detail else "")
        return f"{self.op} {self.signature} on {self.column}: {kind}"

    @property
    def kind_label(self) -> str:
        return self.kind.value + (f" {self.detail}" if self.detail else "")

    @property
    def device_spec(self) -> str:
        return self.column.split("@", 1)[0]

    @property
    def sort_key(self) -> tuple[str, str, str, int, str, str]:
        return (self.op, self.column, self.signature, _KIND_ORDER[self.kind], self.detail, self.known)

    @property
    def match_key(self) -> tuple[str, str, str, str, str]:
        """How a cluster is matched with a baseline's: by device spec, not host."""
        return (self.op, self.device_spec, self.signature, self.kind.name, self.detail)


@dataclass
class FailureItem:
    """One failing case as the report lists it."""

    case: dict[str, Any]
    column: str
    source: ResultsFile | None = field(default=None, repr=False)  # the file its artefact path is relative to
    artefact_href: str | None = None
    elements: int = 0

    @property
    def error_ratio(self) -> float | None:
        metrics = self.case.get("metrics")
        return as_float(metrics.get("error_ratio")) if isinstance(metrics, dict) else None

    @property
    def repro(self) -> tuple[str, str]:
        """The repro line to print, made to work from any directory where the results allow, and a note."""
        line = self.case.get("repro")
        if not isinstance(line, str):
            return "", ""
        header = self.source.header_for(self.case) if self.source is not None else None
        return pasteable_repro(line, self.case["device"], header, header_inventory(header, self.case["device"]))

    @property
    def severity(self) -> float:
        """Crashes (no ratio) and NaN ratios rank first, then the largest error ratio."""
        ratio = self.error_ratio
        return math.inf if ratio is None or math.isnan(ratio) else ratio


@dataclass
class FailureCluster:
    key: ClusterKey
    count: int = 0
    claimed: int = 0  # failures where supports_op had said yes
    worst_ratio: float | None = None
    smallest: FailureItem | None = None
    examples: list[FailureItem] = field(default_factory=list)  # the worst, after the smallest; capped
    known_cause: Any = None  # reports.analysis.KnownCause for known failures
    error_plot: str | None = None  # inline SVG markup (error against input), when artefacts allow
    _heap: list[tuple[float, int, FailureItem]] = field(default_factory=list, repr=False)
    _smallest_key: tuple[int, float, int] | None = field(default=None, repr=False)

    def add(self, item: FailureItem, order: int, max_examples: int) -> None:
        self.count += 1
        if item.case.get("supported") is True:
            self.claimed += 1
        ratio = item.error_ratio
        if ratio is not None:
            ratio = math.inf if math.isnan(ratio) else ratio
            if self.worst_ratio is None or ratio > self.worst_ratio:
                self.worst_ratio = ratio
        # smallest first; among equals the worse one (it shows the bug more plainly), then the first seen
        key = (item.elements, -item.severity, order)
        if self.smallest is None or self._smallest_key is None:
            self.smallest, self._smallest_key = item, key
            return
        if key < self._smallest_key:
            displaced, displaced_order = self.smallest, self._smallest_key[2]
            self.smallest, self._smallest_key = item, key
            item, order = displaced, displaced_order  # the old smallest competes for the examples
        if max_examples <= 0:
            return
        entry = (item.severity, -order, item)  # a min-heap: the mildest (then latest) drops out
        if len(self._heap) < max_examples:
            heapq.heappush(self._heap, entry)
        else:
            heapq.heappushpop(self._heap, entry)

    def finish(self) -> None:
        self.examples = [item for _, _, item in sorted(self._heap, key=lambda e: (-e[0], -e[1]))]
        self._heap = []

    @property
    def shown(self) -> list[FailureItem]:
        return ([self.smallest] if self.smallest is not None else []) + self.examples

    @property
    def not_shown(self) -> int:
        return self.count - len(self.shown)

"""The support matrix's cells: op × type × device, and the mark each gets."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from results.outcome import Outcome

# Cell kinds of the support matrix, most alarming first (the legend and sort order follow this).
CLAIMED_FAIL = "claimed-fail"
NONE_PASS = "none-pass"
SOME_PASS = "some-pass"
KNOWN_ONLY = "known-only"
ALL_PASS = "all-pass"
NOT_CLAIMED = "not-claimed"
NOT_RUN = "not-run"
CELL_KINDS = (CLAIMED_FAIL, NONE_PASS, SOME_PASS, KNOWN_ONLY, ALL_PASS, NOT_CLAIMED, NOT_RUN)
CELL_MARKS = {
    CLAIMED_FAIL: "‼",
    NONE_PASS: "✗",
    SOME_PASS: "◐",
    KNOWN_ONLY: "k",
    ALL_PASS: "✓",
    NOT_CLAIMED: "–",
    NOT_RUN: "·",
}
CELL_LABELS = {
    CLAIMED_FAIL: "claimed supported, but fails",
    NONE_PASS: "no case passes",
    SOME_PASS: "some cases pass",
    KNOWN_ONLY: "fails only by known bugs",
    ALL_PASS: "every case passes",
    NOT_CLAIMED: "not claimed (backend declines)",
    NOT_RUN: "not run",
}
CELL_EXPLANATIONS = {
    CLAIMED_FAIL: "The backend's supports_op said yes, yet at least one case failed, crashed, timed out "
    "or errored. A program using ggml would run this op on the device and get wrong results.",
    NONE_PASS: "Cases ran and none passed (the device could not say beforehand whether it supports them).",
    SOME_PASS: "Some cases passed; others failed or were declined by the backend.",
    KNOWN_ONLY: "Cases failed, and a known bug (or an expectations entry) explains every one, whether or not "
    "the backend claims support: listed under Known failures, not news for a release.",
    ALL_PASS: "Every case ran and passed.",
    NOT_CLAIMED: "The backend declined every case (supports_op said no); ggml falls back to another device.",
    NOT_RUN: "No case of this op and type ran on this device.",
}

DTYPE_ORDER = ("f32", "f16", "bf16", "i32", "i16", "i8")


def device_name(spec: str) -> str:
    """``ggml:CANN0`` -> ``CANN0``; a spec without a colon is its own name."""
    return spec.split(":", 1)[1] if ":" in spec else spec


def dtype_key(dtypes: Any) -> str:
    """A compact type label for the matrix: the first input's type, plus the output's when it differs."""
    if not isinstance(dtypes, dict) or not dtypes:
        return "?"
    dst = dtypes.get("dst")
    src0 = dtypes.get("src0")
    if src0 is None:
        src0 = next((value for key, value in dtypes.items() if key != "dst"), None)
    if src0 is None:
        return str(dst)
    if dst is None or dst == src0:
        return str(src0)
    return f"{src0}→{dst}"


def dtype_sort_key(key: str) -> tuple[int, str]:
    first = key.split("→", 1)[0]
    return (DTYPE_ORDER.index(first) if first in DTYPE_ORDER else len(DTYPE_ORDER), key)


@dataclass
class CellStats:
    """Counts for one support-matrix cell (op x type x device)."""

    total: int = 0
    passed: int = 0
    failed: int = 0  # fail, crash, timeout or error
    unsupported: int = 0
    claimed_failing: int = 0  # failed although supports_op said yes
    known: int = 0  # failures an expectation explains
    claimed_failing_known: int = 0  # of the claimed-supported failures, those a known bug explains

    def add(self, case: dict[str, Any], known: bool) -> None:
        self.total += 1
        outcome = case["outcome"]
        if outcome == Outcome.PASS:
            self.passed += 1
        elif outcome == Outcome.UNSUPPORTED:
            self.unsupported += 1
        else:
            self.failed += 1
            if case.get("supported") is True:
                self.claimed_failing += 1
                self.claimed_failing_known += known
            if known:
                self.known += 1

    @property
    def needs_attention(self) -> bool:
        """Some failure here is not explained by a known bug (what a release manager must look at)."""
        return self.failed > self.known

    @property
    def only_known_failures(self) -> bool:
        """Cases failed, and known bugs explain every one: shown in the calm colour of known failures."""
        return self.failed > 0 and self.failed == self.known

    @property
    def claimed_failing_unexpected(self) -> bool:
        """Claimed supported, failing, and not all of it explained by known bugs: news for a release."""
        return self.claimed_failing > self.claimed_failing_known

    @property
    def ran(self) -> int:
        return self.total - self.unsupported

    @property
    def kind(self) -> str:
        return classify_cell(self)

    def describe(self) -> str:
        parts = [f"{self.passed} pass", f"{self.failed} fail"]
        if self.unsupported:
            parts.append(f"{self.unsupported} not claimed")
        if self.claimed_failing:
            parts.append(f"{self.claimed_failing} claimed-supported failures")
        if self.known:
            parts.append(f"{self.known} known")
        return ", ".join(parts)


def classify_cell(stats: CellStats | None) -> str:
    """The support-matrix mark for a cell; ``None`` (no records) is "not run". A cell whose every
    failure a known bug explains is "known only", never "claimed supported, but fails": that mark is
    for failures nobody has explained."""
    if stats is None or stats.total == 0:
        return NOT_RUN
    if stats.failed and stats.failed == stats.known:
        return KNOWN_ONLY
    if stats.claimed_failing > stats.claimed_failing_known:
        return CLAIMED_FAIL
    if stats.ran == 0:
        return NOT_CLAIMED
    if stats.passed == stats.total:
        return ALL_PASS
    if stats.passed == 0 and stats.failed:
        return NONE_PASS
    return SOME_PASS


GRAPH_FAMILY = "graph"
MODEL_BLOCK_FAMILY = "model block"
# Records of the harness' own tiers that are neither a catalogue op nor a graph pattern: the set/get
# round trip (conformance/set_get.py's OP; reports does not import conformance).
TIER_FAMILIES = {"SET_GET": "transfer"}


@functools.cache
def op_family(op: str) -> str:
    """The golden catalogue's family of an op (``unary``, ``binary``, ``norm``...); a graph pattern's
    record (its ``op`` is the pattern in upper case) is ``graph``, or ``model block`` for the patterns
    that are whole model blocks (golden/graphs/patterns/blocks.py); a set/get round trip ``transfer``;
    ``other`` for a name none of them knows
    (results of another harness version)."""
    from golden import catalogue

    try:
        return catalogue.get(op).family or "other"
    except KeyError:
        pass
    from golden.graphs.patterns import blocks
    from golden.graphs.registry import patterns

    if op in TIER_FAMILIES:
        return TIER_FAMILIES[op]
    name = op.lower()
    if name in {pattern.name for pattern in blocks.PATTERNS}:
        return MODEL_BLOCK_FAMILY
    return GRAPH_FAMILY if name in patterns() else "other"

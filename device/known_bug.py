"""One known kernel bug of a real backend: the type the bug lists (``device/ggml/known_bugs_*.py``)
are made of, and that ``device/known_bugs.py`` collects. See there for what an expectation means."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field

from device.build_tag import in_range
from golden.case import OpCase
from golden.graphs.case import GraphCase
from golden.tolerance import Tolerance


@dataclass(frozen=True)
class KnownBug:
    """One backend defect, precise enough to match the cases it breaks and nothing else."""

    id: str  # short, stable: "cpu-clamp-row-stride"
    devices: str  # fnmatch over the ggml device name: "CPU", "Vulkan*"
    op: str
    applies: Callable[[OpCase], bool]
    reason: str  # what the kernel does wrong, with the evidence
    repro: str  # a minimal case id that shows it
    releases: tuple[str, ...] = ()  # ggml versions that have it; empty: every release we know
    outcomes: tuple[str, ...] = ("fail",)  # what it gives: fail, crash, timeout, error
    # the kernel corrupts process memory (a write past a buffer): the worker is restarted after the case,
    # and the case gets the user's --known-bug-timeout where one was given (it may hang)
    corrupts_process: bool = False
    # a corrupting case may also hang, so --known-bug-timeout applies to it; False where the kernel's first
    # use legitimately takes long (lavapipe compiles a matmul pipeline for a minute in a fresh process)
    may_hang: bool = True
    tags: tuple[str, ...] = field(default=())
    # a documented deviation rather than a wrong answer (ggml's CPU evaluates GELU of F32 through an
    # F16 table): the case is judged against this row instead, so the backend stays checked against its
    # own documented shortcut while the catalogue's row stays what any correct implementation meets
    tolerance: Tolerance | None = None
    # an inclusive range of releases ("" for an open end), as an expectations file may give it
    release_range: tuple[str, str] | None = None
    # where the entry is written: the module of a Python list, or the TOML file (device/expectation_file.py)
    source: str = ""
    # state an earlier case left in the process (not the case's own kernel): the entry covers only a crash
    # the case does not give when replayed alone in a fresh worker, so it never matches a case by itself
    # (:meth:`matches` is False) and ``op`` may be "*" (every op)
    after_history: bool = False
    # the llama.cpp builds that have it (device/build_tag.py: b8179, v0.5.0), for what one ggml version cannot
    # say (b8095 ... b8390 all report 0.9.7): exact builds and/or an inclusive range ("" for an open end). An
    # entry with either matches only where the device's build is known and is one of them
    builds: tuple[str, ...] = ()
    build_range: tuple[str, str] | None = None

    def matches(self, case: OpCase, device_name: str, release: str, build: str | None = None) -> bool:
        """Whether the bug covers ``case`` itself (an after-history entry never does)."""
        return not self.after_history and self._covers(case, device_name, release, build)

    def matches_after_history(self, case: OpCase, device_name: str, release: str,
                              build: str | None = None) -> bool:
        """Whether an after-history entry explains a crash of ``case`` that the case alone does not give."""
        return self.after_history and self._covers(case, device_name, release, build)

    def _covers(self, case: OpCase, device_name: str, release: str, build: str | None) -> bool:
        if self.op not in ("*", case.op) or not fnmatch.fnmatchcase(device_name, self.devices):
            return False
        if not self.covers_release(release, build):
            return False
        return bool(self.applies(case))

    def covers_release(self, release: str, build: str | None = None) -> bool:
        """The exact releases, and the inclusive range; neither: every release. Then the builds, where the
        entry names any (an unknown build is in none)."""
        if self.releases and release not in self.releases:
            return False
        if self.release_range is not None:
            low, high = self.release_range
            key = release_key(release)
            if (low and key < release_key(low)) or (high and key > release_key(high)):
                return False
        return covers_build(self.builds, self.build_range, build)

    @property
    def names_builds(self) -> bool:
        return bool(self.builds) or self.build_range is not None


def release_key(release: str) -> tuple[int, ...]:
    """``"0.25.1"`` as (0, 25, 1); a part that is not a number counts as 0."""
    return tuple(int(p) if p.isdigit() else 0 for p in release.split("."))

@dataclass(frozen=True)
class GraphKnownBug:
    """A backend defect that shows in graph cases (``golden/graphs``): a predicate over the whole graph,
    for what no single node's op-tier bug describes (a fused kernel, state left between graphs)."""

    id: str
    devices: str  # fnmatch over the ggml device name
    applies: Callable[[GraphCase], bool]
    reason: str
    repro: str  # a graph case id, or the standalone program that shows it
    releases: tuple[str, ...] = ()
    outcomes: tuple[str, ...] = ("fail",)
    # the case may leave the process corrupted even when its own results are right: the worker is
    # restarted after it, so the damage cannot land on a later, innocent case
    corrupts_process: bool = False
    # the damage can come from any earlier graph of the process: each such case also starts in a fresh
    # worker, so a crash it gives is its own (and unexpected unless an entry names it)
    isolated: bool = False
    source: str = ""  # where the entry is written (device/known_bugs.py fills it in)
    builds: tuple[str, ...] = ()  # as KnownBug's: an entry with either matches only a known build among them
    build_range: tuple[str, str] | None = None

    def matches(self, case: GraphCase, device_name: str, release: str, build: str | None = None) -> bool:
        if not fnmatch.fnmatchcase(device_name, self.devices):
            return False
        return (release_in(release, self.releases) and covers_build(self.builds, self.build_range, build)
                and bool(self.applies(case)))

    @property
    def names_builds(self) -> bool:
        return bool(self.builds) or self.build_range is not None


def covers_build(builds: tuple[str, ...], build_range: tuple[str, str] | None, build: str | None) -> bool:
    """Whether ``build`` is one of ``builds`` or in ``build_range``; neither named: every build, known or not.
    An entry that names builds never matches an unknown build (None): it would otherwise call a failure of a
    build nobody tried "known", where an unmatched failure only asks to be looked at."""
    if not builds and build_range is None:
        return True
    if build is None:
        return False
    if builds and build not in builds:
        return False
    return build_range is None or in_range(build, *build_range)


def release_in(release: str, releases: tuple[str, ...]) -> bool:
    """Whether ``releases`` (empty: every release) has ``release``."""
    return not releases or release in releases

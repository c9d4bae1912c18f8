"""Known kernel bugs of real backends: expectations that belong to one device and release.

A backend's defect never narrows what is drawn for every device. Each :class:`KnownBug` names the
backend devices and ggml releases that have it and a predicate over the case; a failing (or
crashing) case it matches is recorded with the bug attached (``expected``) and does not fail the
test, and the report lists it as a known failure. A matching case that passes is recorded too, so a
fixed bug shows up as stale.

Bug lists live next to the device layer that knows them (``device/ggml/known_bugs_*.py``) and are
collected here.
"""

from __future__ import annotations

import fnmatch
import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from golden.case import OpCase
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

    def matches(self, case: OpCase, device_name: str, release: str) -> bool:
        if case.op != self.op or not fnmatch.fnmatchcase(device_name, self.devices):
            return False
        if not self.covers_release(release):
            return False
        return bool(self.applies(case))

    def covers_release(self, release: str) -> bool:
        """The exact releases, and the inclusive range; neither: every release."""
        if self.releases and release not in self.releases:
            return False
        if self.release_range is not None:
            low, high = self.release_range
            key = release_key(release)
            if (low and key < release_key(low)) or (high and key > release_key(high)):
                return False
        return True


def release_key(release: str) -> tuple[int, ...]:
    """``"0.25.1"`` as (0, 25, 1); a part that is not a number counts as 0."""
    return tuple(int(p) if p.isdigit() else 0 for p in release.split("."))


IN_REPO_FILES = ("known_bugs_cpu.toml", "known_bugs_vulkan.toml")  # in device/ggml/, read after the Python lists


def all_known_bugs(extra: Iterable[str] = ()) -> list[KnownBug]:
    """The in-repo lists (Python, then TOML), then the expectations files and folders in ``extra``."""
    from pathlib import Path

    from device import expectation_file
    from device.ggml import known_bugs_cpu

    bugs: list[KnownBug] = [_sourced(b, "device/ggml/known_bugs_cpu.py") for b in known_bugs_cpu.BUGS]
    try:  # a list that may not exist yet: imported by name
        known_bugs_vulkan = importlib.import_module("device.ggml.known_bugs_vulkan")
    except ModuleNotFoundError:
        pass
    else:
        bugs += [_sourced(b, "device/ggml/known_bugs_vulkan.py") for b in known_bugs_vulkan.BUGS]
    folder = Path(__file__).parent / "ggml"
    for name in IN_REPO_FILES:  # named as the Python lists are: relative to the repository
        if (folder / name).exists():
            bugs += [replace(b, source=f"device/ggml/{name}") for b in expectation_file.load([folder / name])]
    return bugs + expectation_file.load(extra)


def _sourced(bug: KnownBug, source: str) -> KnownBug:
    return bug if bug.source else replace(bug, source=source)


def find(case: OpCase, device_name: str, release: str, bugs: Iterable[KnownBug] | None = None) -> KnownBug | None:
    """The first known bug of ``device_name`` at ``release`` that covers ``case``, or None."""
    for bug in all_known_bugs() if bugs is None else bugs:
        if bug.matches(case, device_name, release):
            return bug
    return None

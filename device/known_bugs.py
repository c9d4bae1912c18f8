"""Known kernel bugs of real backends: expectations that belong to one device and release.

A backend's defect never narrows what is drawn for every device. Each :class:`KnownBug` names the
backend devices and ggml releases that have it and a predicate over the case; a failing (or
crashing) case it matches is recorded with the bug attached (``expected``) and does not fail the
test, and the report lists it as a known failure. A matching case that passes is recorded too, so a
fixed bug shows up as stale.

Bug lists live next to the device layer that knows them (``device/ggml/known_bugs_*.toml``, with the
Python modules their ``[backend]`` tables name), or in a plug-in's (``conform.known_bugs`` entry points),
and are collected here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from device.build_tag import build_key
from device.known_bug import GraphKnownBug, KnownBug, release_key
from golden.case import OpCase
from golden.graphs.case import GraphCase


def all_known_bugs(extra: Iterable[str] = ()) -> list[KnownBug]:
    """Every backend's lists (:func:`device.expectation_file.backends`: the Python ones, then the TOML
    ones), then the expectations files and folders in ``extra``."""
    from device import expectation_file

    found = expectation_file.backends()
    bugs: list[KnownBug] = []
    for backend in found:
        module = backend.python_module()
        if module is not None:
            source = (f"{backend.module.replace('.', '/')}.py" if backend.source.startswith("device/")
                      else str(getattr(module, "__file__", backend.module)))
            bugs += [_sourced(b, source) for b in getattr(module, "BUGS", [])]
    for backend in found:
        bugs += [replace(b, source=backend.source) for b in expectation_file.load_file(backend.path)]
    return bugs + expectation_file.load(extra)


def _sourced(bug: KnownBug, source: str) -> KnownBug:
    return bug if bug.source else replace(bug, source=source)


def find(case: OpCase, device_name: str, release: str, bugs: Iterable[KnownBug] | None = None, *,
         build: str | None = None) -> KnownBug | None:
    """The first known bug of ``device_name`` at ``release`` (and llama.cpp ``build``, None: unknown) that covers
    ``case``, or None."""
    for bug in all_known_bugs() if bugs is None else bugs:
        if bug.matches(case, device_name, release, build):
            return bug
    return None


def find_all(case: OpCase, device_name: str, release: str,
             bugs: Iterable[KnownBug] | None = None, *, build: str | None = None) -> list[KnownBug]:
    """Every known bug of ``device_name`` at ``release`` (and ``build``) that covers ``case``, in list order."""
    return [bug for bug in (all_known_bugs() if bugs is None else bugs)
            if bug.matches(case, device_name, release, build)]


def find_after_history(case: OpCase, device_name: str, release: str,
                       bugs: Iterable[KnownBug] | None = None, *, build: str | None = None) -> KnownBug | None:
    """The first after-history entry (state left by earlier cases of the process) of ``device_name`` at
    ``release`` that can explain a crash of ``case``, or None."""
    for bug in all_known_bugs() if bugs is None else bugs:
        if bug.matches_after_history(case, device_name, release, build):
            return bug
    return None


def all_graph_bugs(extra: Iterable[str] = ()) -> list[GraphKnownBug]:
    """The graph-level bugs (``[[graph_bug]]`` entries of the same files, then of ``extra``); a node's own op
    bug stays a ``[[bug]]``."""
    from device import expectation_file

    bugs: list[GraphKnownBug] = []
    for backend in expectation_file.backends():
        bugs += [replace(b, source=backend.source) for b in expectation_file.load_graph_file(backend.path)]
    return bugs + expectation_file.load_graph(extra)


def find_all_graph(case: GraphCase, device_name: str, release: str,
                   bugs: Iterable[GraphKnownBug] | None = None, *, build: str | None = None) -> list[GraphKnownBug]:
    """Every graph-level known bug of ``device_name`` at ``release`` (and ``build``) that covers ``case``, in
    list order."""
    return [bug for bug in (all_graph_bugs() if bugs is None else bugs)
            if bug.matches(case, device_name, release, build)]


def find_graph(case: GraphCase, device_name: str, release: str,
               bugs: Iterable[GraphKnownBug] | None = None, *, build: str | None = None) -> GraphKnownBug | None:
    """The first graph-level known bug of ``device_name`` at ``release`` (and ``build``) that covers ``case``."""
    for bug in all_graph_bugs() if bugs is None else bugs:
        if bug.matches(case, device_name, release, build):
            return bug
    return None


def example_device(devices: str) -> str:
    """A device name that a list's ``devices`` pattern matches (``Vulkan*`` -> ``Vulkan0``)."""
    from device import expectation_file

    return expectation_file.example_device(devices)


def example_build(bug: KnownBug | GraphKnownBug) -> str | None:
    """A build the entry holds for (its first exact build, else a range end), None where it names none."""
    if bug.builds:
        return bug.builds[0]
    low, high = bug.build_range or ("", "")
    return low or high or None


def targets(bugs: Iterable[KnownBug] | None = None,
            graph_bugs: Iterable[GraphKnownBug] | None = None) -> list[tuple[str, str]]:
    """Every (device name, release) the lists name: one example device per ``devices`` pattern, with each
    release an entry of that pattern names (what the snapshot and the self-consistency tests evaluate)."""
    releases: dict[str, dict[str, None]] = {}
    entries: list[KnownBug | GraphKnownBug] = [*(all_known_bugs() if bugs is None else bugs)]
    entries += all_graph_bugs() if graph_bugs is None else graph_bugs
    for bug in entries:
        named = releases.setdefault(example_device(bug.devices), {})
        named.update(dict.fromkeys(bug.releases))
        low, high = getattr(bug, "release_range", None) or ("", "")
        named.update(dict.fromkeys(r for r in (low, high) if r))
    return [(name, release) for name, named in releases.items() for release in sorted(named, key=release_key)]


def build_targets(bugs: Iterable[KnownBug] | None = None,
                  graph_bugs: Iterable[GraphKnownBug] | None = None) -> list[tuple[str, str, str | None]]:
    """:func:`targets` with the build unknown (None), then, for each devices pattern with an entry that names
    builds, known (release, build) pairs (:data:`device.build_tag.KNOWN_BUILDS`): each build an entry names and
    its known neighbours, and the newest known build of each release the pattern's entries name."""
    from device.build_tag import KNOWN_BUILDS, known_neighbours, release_of

    op_bugs = list(all_known_bugs() if bugs is None else bugs)
    g_bugs = list(all_graph_bugs() if graph_bugs is None else graph_bugs)
    plain = targets(op_bugs, g_bugs)
    out: list[tuple[str, str, str | None]] = [(name, release, None) for name, release in plain]
    entries: list[KnownBug | GraphKnownBug] = [*op_bugs, *g_bugs]
    for name in dict.fromkeys(name for name, _ in plain):
        mine = [b for b in entries if example_device(b.devices) == name]
        keyed = [b for b in mine if b.names_builds]
        if not keyed:
            continue
        named = {*(t for b in keyed for t in b.builds), *(t for b in keyed for t in (b.build_range or ()) if t)}
        pairs: set[tuple[str, str]] = set()
        for tag in named:
            pairs.update((r, t) for t in known_neighbours(tag) if (r := release_of(t)) is not None)
        for release in {r for n, r in plain if n == name}:
            if KNOWN_BUILDS.get(release):
                pairs.add((release, KNOWN_BUILDS[release][-1]))
        out += [(name, r, t) for r, t in sorted(pairs, key=lambda p: (release_key(p[0]), build_key(p[1])))]
    return out


def target_label(name: str, release: str, build: str | None) -> str:
    """``Vulkan0@0.9.7`` (build unknown), ``Vulkan0@0.9.7+b8179``."""
    return f"{name}@{release}" + (f"+{build}" if build else "")

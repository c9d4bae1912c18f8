"""Every backend's known-bug list (each devices pattern the lists name: ggml:CPU, ggml:Vulkan*, and any
added since, a plug-in's included) is well formed: each entry's repro is a case of its op that its own
predicate matches on an example device of its backend, at every release it names, and not on another
backend's device nor at a release it does not name; at each target the snapshot evaluates
(``known_bugs.build_targets()``) where it covers its repro, no earlier entry explains the same outcome (the
first covering entry with the outcome explains a case; the first documented deviation bounds it); a layout
entry does not cover the repro made contiguous. Backend-specific boundaries are in
tests/test_known_bugs_<backend>.py."""

from __future__ import annotations

import dataclasses

import pytest

from device import known_bugs
from golden.case import CONTIGUOUS, parse_case_id

ALL = known_bugs.all_known_bugs()
BUGS = [b for b in ALL if not b.after_history]
EXAMPLES = sorted({known_bugs.example_device(b.devices) for b in ALL})
TARGETS = known_bugs.build_targets()
IDS = [f"{b.id}/{b.op}" for b in BUGS]
# entries whose defect is a layout: the same case with every input contiguous is not theirs
LAYOUT_SUFFIXES = ("misaligned-view", "plane-gap", "offset", "row-stride", "not-contiguous", "ignores-nb1")
LAYOUT_BUGS = [b for b in BUGS if b.id.endswith(LAYOUT_SUFFIXES)]


def test_every_backend_has_entries() -> None:
    assert {"CPU", "Vulkan0"} <= set(EXAMPLES)
    assert {known_bugs.example_device(b.devices) for b in LAYOUT_BUGS} >= {"CPU", "Vulkan0"}


@pytest.mark.parametrize("bug", BUGS, ids=IDS)
def test_repro_is_a_case_of_its_op_that_its_own_entry_matches(bug: known_bugs.KnownBug) -> None:
    case = parse_case_id(bug.repro)
    assert case.op == bug.op, f"{bug.source}: {bug.id}: the repro is a {case.op} case, the entry names {bug.op}"
    device = known_bugs.example_device(bug.devices)
    build = known_bugs.example_build(bug)
    for release in bug.releases or ("0.25.1",):
        assert bug.matches(case, device, release, build), (
            f"{bug.source}: {bug.id}: its own predicate does not match its repro on {device} {release} {build}")
    if build is not None:  # an entry keyed on builds holds for no build it does not know
        assert not bug.matches(case, device, (bug.releases or ("0.25.1",))[0], None), f"{bug.id}: build unknown"
    if bug.releases:  # only the releases it was measured on
        assert not bug.matches(case, device, "0.0.0", build), f"{bug.id} matches a release it does not name"
    for other in EXAMPLES:
        if other != device:
            assert not bug.matches(case, other, (bug.releases or ("0.25.1",))[0], build), f"{bug.id} matches {other}"


@pytest.mark.parametrize("bug", BUGS, ids=IDS)
def test_no_earlier_entry_explains_its_repro(bug: known_bugs.KnownBug) -> None:
    case = parse_case_id(bug.repro)
    device = known_bugs.example_device(bug.devices)
    reached = [(r, b) for name, r, b in TARGETS if name == device and bug.matches(case, name, r, b)]
    assert reached, f"{bug.source}: {bug.id}: no target of the lists ({device}) covers its repro"
    for release, build in reached:
        covering = known_bugs.find_all(case, device, release, ALL, build=build)
        where = f"{bug.source}: {bug.id} on {known_bugs.target_label(device, release, build)}"
        if bug.tolerance is not None:  # the first documented deviation bounds the case
            first = next(b for b in covering if b.tolerance is not None)
            assert first is bug, f"{where}: {first.id} comes first and bounds its repro"
        else:  # no earlier defect explains the same outcome (a deviation only bounds a result)
            for outcome in bug.outcomes:
                first = next(b for b in covering if b.tolerance is None and outcome in b.outcomes)
                assert first is bug, f"{where}: {first.id} comes first and explains its repro's {outcome}"


@pytest.mark.parametrize("bug", LAYOUT_BUGS, ids=[f"{b.id}/{b.op}" for b in LAYOUT_BUGS])
def test_a_layout_entry_does_not_cover_its_repro_made_contiguous(bug: known_bugs.KnownBug) -> None:
    case = parse_case_id(bug.repro)
    plain = dataclasses.replace(case, inputs=tuple(dataclasses.replace(t, layout=CONTIGUOUS) for t in case.inputs))
    device = known_bugs.example_device(bug.devices)
    for release in bug.releases or ("0.25.1",):
        assert not bug.matches(plain, device, release, known_bugs.example_build(bug)), bug.id


@pytest.mark.parametrize("device", EXAMPLES)
def test_ids_are_unique_per_op(device: str) -> None:
    keys = [(b.id, b.op) for b in BUGS if known_bugs.example_device(b.devices) == device]
    assert len(keys) == len(set(keys))

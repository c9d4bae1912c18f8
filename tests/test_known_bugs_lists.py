"""Every backend's known-bug list (each devices pattern the lists name: ggml:CPU, ggml:Vulkan*, and any
added since) is well formed: each entry's repro is a case of its op that its own predicate matches on an
example device of its backend, at every release it names, and not on another backend's device."""

from __future__ import annotations

import pytest

from device import known_bugs
from golden.case import parse_case_id

BUGS = [b for b in known_bugs.all_known_bugs() if not b.after_history]
EXAMPLES = sorted({known_bugs.example_device(b.devices) for b in known_bugs.all_known_bugs()})


def test_every_backend_has_entries() -> None:
    assert {"CPU", "Vulkan0"} <= set(EXAMPLES)


@pytest.mark.parametrize("bug", BUGS, ids=[f"{b.id}/{b.op}" for b in BUGS])
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
    for other in EXAMPLES:
        if other != device:
            assert not bug.matches(case, other, (bug.releases or ("0.25.1",))[0], build), f"{bug.id} matches {other}"


@pytest.mark.parametrize("device", EXAMPLES)
def test_ids_are_unique_per_op(device: str) -> None:
    keys = [(b.id, b.op) for b in BUGS if known_bugs.example_device(b.devices) == device]
    assert len(keys) == len(set(keys))

"""The Vulkan known-bug lists (known_bugs_vulkan.py and known_bugs_vulkan.toml) are well formed: each
entry's repro is a case of its op that its own
predicate matches, only on Vulkan devices of the releases it names; a contiguous case of the same op
is not matched. (Whether the repro really fails is shown on a Vulkan device: docs/findings-vulkan.md.)"""

from __future__ import annotations

import dataclasses

import pytest

from device import known_bugs
from golden.case import CONTIGUOUS, parse_case_id

BUGS = [b for b in known_bugs.all_known_bugs() if b.devices == "Vulkan*"]
IN_TOML = [b for b in BUGS if b.source.endswith("known_bugs_vulkan.toml")]


def test_both_lists_are_read() -> None:
    assert len(IN_TOML) >= 40 and len(BUGS) - len(IN_TOML) >= 15


@pytest.mark.parametrize("bug", BUGS, ids=[b.id for b in BUGS])
def test_repro_is_matched_by_its_own_entry(bug: known_bugs.KnownBug) -> None:
    case = parse_case_id(bug.repro)
    assert case.op == bug.op
    assert bug.matches(case, "Vulkan0", "0.25.1")
    assert known_bugs.find(case, "Vulkan0", "0.25.1", BUGS) is bug  # no earlier entry shadows it
    assert not bug.matches(case, "CPU", "0.25.1")  # a Vulkan defect, not the CPU's
    assert not bug.matches(case, "Vulkan0", "0.20.2")  # only the releases it was measured on


_LAYOUT_BUGS = [b for b in BUGS if b.id.endswith(("misaligned-view", "plane-gap", "offset", "row-stride"))]


@pytest.mark.parametrize("bug", _LAYOUT_BUGS, ids=lambda b: b.id)
def test_a_contiguous_case_is_not_matched(bug: known_bugs.KnownBug) -> None:
    case = parse_case_id(bug.repro)
    plain = dataclasses.replace(case, inputs=tuple(dataclasses.replace(t, layout=CONTIGUOUS) for t in case.inputs))
    assert not bug.matches(plain, "Vulkan0", "0.25.1")


def test_ids_are_unique() -> None:
    assert len({b.id for b in BUGS}) == len(BUGS)

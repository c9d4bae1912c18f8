"""The Vulkan known-bug lists (known_bugs_vulkan.py and known_bugs_vulkan.toml): their measured boundaries,
the build-keyed and after-history entries, and each repro matched at the release and build the lists were
measured on. What every backend's list meets (its repro matched by its own entry first, not on another
backend, a layout entry not on the contiguous case, ids unique per op) is tests/test_known_bugs_lists.py.
(Whether the repro really fails is shown on a Vulkan device: docs/findings-vulkan.md.)"""

from __future__ import annotations

import dataclasses

import pytest

from device import known_bugs
from device.build_tag import release_of
from golden.case import parse_case_id

BUGS = [b for b in known_bugs.all_known_bugs() if b.devices == "Vulkan*"]
IN_TOML = [b for b in BUGS if b.source.endswith("known_bugs_vulkan.toml")]


def test_both_lists_are_read() -> None:
    assert len(IN_TOML) >= 40 and len(BUGS) - len(IN_TOML) >= 15


OWN_CASE_BUGS = [b for b in BUGS if not b.after_history]
CURRENT_BUILD = "v0.5.0"  # the llama.cpp build of the ggml 0.25.1 these lists were measured on (node-llama-cpp 3.22.1)


def _measured_on(bug: known_bugs.KnownBug) -> tuple[str, str]:
    """The release and build an entry's repro is checked at: 0.25.1 (v0.5.0), or for an entry that names exact
    builds without v0.5.0 (the b8121 block: node-llama-cpp 3.16.2), its first build and that build's release."""
    if bug.builds and CURRENT_BUILD not in bug.builds:
        return release_of(bug.builds[0]) or "0.25.1", bug.builds[0]
    return "0.25.1", CURRENT_BUILD


@pytest.mark.parametrize("bug", OWN_CASE_BUGS, ids=[f"{b.id}/{b.op}" for b in OWN_CASE_BUGS])
def test_repro_is_matched_at_the_releases_and_builds_it_names(bug: known_bugs.KnownBug) -> None:
    """What every backend's entries meet (tests/test_known_bugs_lists.py), at this list's own release and build."""
    case = parse_case_id(bug.repro)
    release, build = _measured_on(bug)
    assert bug.matches(case, "Vulkan0", release, build)
    if build != CURRENT_BUILD:  # keyed on one older build: not at 0.25.1's, nor with the build unknown
        assert not bug.matches(case, "Vulkan0", "0.25.1", CURRENT_BUILD)
        assert not bug.matches(case, "Vulkan0", release, None)
    elif bug.releases:  # only the releases it was measured on; an entry without any holds for every release
        assert not bug.matches(case, "Vulkan0", "0.20.2", CURRENT_BUILD)
    elif bug.names_builds:  # keyed on builds: every ggml version, only at a build it names, never at an unknown one
        assert bug.matches(case, "Vulkan0", "0.9.7", known_bugs.example_build(bug))
        assert not bug.matches(case, "Vulkan0", "0.25.1", None)
    else:
        assert bug.matches(case, "Vulkan0", "0.9.7") and bug.matches(case, "Vulkan0", "0.23.0")


def test_the_masked_row_regression_is_keyed_on_the_build_it_came_in() -> None:
    """conform bisect: b8121 good, b8179 bad, both ggml 0.9.7 (docs/findings-vulkan.md); later builds bad."""
    bug = next(b for b in BUGS if b.id == "vulkan-flash-attn-ext-f16-kv-masked-row")
    case = parse_case_id(bug.repro)
    bad = [("0.9.7", "b8179"), ("0.9.7", "b8390"), ("0.19.0", "b10361"), ("0.23.0", "v0.4.0"), ("0.25.1", "v0.5.0")]
    good = [("0.9.7", "b8095"), ("0.9.7", "b8121"), ("0.9.4", "b7347")]
    assert all(bug.matches(case, "Vulkan0", release, build) for release, build in bad)
    assert not any(bug.matches(case, "Vulkan0", release, build) for release, build in good)
    assert not bug.matches(case, "Vulkan0", "0.9.7", None)  # the build unknown: 0.9.7 alone cannot say


def test_the_after_history_entry_explains_only_crashes_left_by_earlier_cases() -> None:
    """vulkan-op-sequence-heap-corruption names every op but matches no case by itself: the harness asks
    it only for a crash the case does not give alone in a fresh worker (conformance/harness.py)."""
    bug, b8121 = (b for b in BUGS if b.after_history)  # 0.25.1's, then its copy for llama.cpp b8121 (0.9.7)
    assert (bug.id, b8121.id) == ("vulkan-op-sequence-heap-corruption", "vulkan-b8121-op-sequence-heap-corruption")
    assert bug.op == b8121.op == "*" and bug.outcomes == b8121.outcomes == ("crash",)
    case = parse_case_id(bug.repro)
    assert not bug.matches(case, "Vulkan0", "0.25.1", CURRENT_BUILD)
    assert known_bugs.find_after_history(case, "Vulkan0", "0.25.1", BUGS) is bug
    assert known_bugs.find_after_history(case, "Vulkan0", "0.20.2", BUGS) is None
    assert known_bugs.find_after_history(case, "CPU", "0.25.1", BUGS) is None
    assert known_bugs.find_after_history(case, "Vulkan0", "0.9.7", BUGS, build="b8121") is b8121
    for build in ("b8095", "b8179", None):  # not measured there: a crash stays unexpected
        assert known_bugs.find_after_history(case, "Vulkan0", "0.9.7", BUGS, build=build) is None


# V as a view of K (DeepSeek's MLA, Layout.alias) with K's cache layout and a mask: passes on Vulkan0 0.25.1
# (347 s on lavapipe; docs/findings-vulkan.md, "Aliasing on Vulkan0")
MLA_PASSES = ("FLASH_ATTN_EXT(type0=f32,ne0=[576,1,1,2],lay0=perm[0,2,1,3],type1=f32,ne1=[576,99,1,2],"
              "lay1=perm[0,2,1,3]/pad[0,0,1,0],type2=f32,ne2=[512,99,1,2],lay2=alias[1]/perm[0,2,1,3]/pad[64,0,1,0],"
              "type3=f16,ne3=[99,2,1,2],dst=f32,scale=1.100000023841858,max_bias=0.5,logit_softcap=1.0,prec=f32,"
              "mask=True,sinks=False,data=dense:351)")


def test_v_as_a_view_of_k_is_not_padded_rows() -> None:
    """vulkan-flash-attn-ext-kv-rows-padded: K's values between an aliased V's rows are not padding;
    the same V in an allocation of its own, or a padded K beside it, is still covered."""
    bug = next(b for b in BUGS if b.id == "vulkan-flash-attn-ext-kv-rows-padded")
    mla = parse_case_id(MLA_PASSES)
    q, k, v, *rest = mla.inputs
    assert not bug.matches(mla, "Vulkan0", "0.25.1", CURRENT_BUILD)
    own_v = dataclasses.replace(v, layout=dataclasses.replace(v.layout, alias=None))
    assert bug.matches(dataclasses.replace(mla, inputs=(q, k, own_v, *rest)), "Vulkan0", "0.25.1", CURRENT_BUILD)
    padded_k = dataclasses.replace(k, layout=dataclasses.replace(k.layout, pad=(2, 0, 1, 0)))
    assert bug.matches(dataclasses.replace(mla, inputs=(q, padded_k, v, *rest)), "Vulkan0", "0.25.1", CURRENT_BUILD)


def _bug(bug_id: str) -> known_bugs.KnownBug:
    return next(b for b in BUGS if b.id == bug_id)


# src1 layouts replayed alone on Vulkan0 0.25.1 (docs/findings-vulkan.md, "Settling round 3's unlisted
# clusters"): read in place with the packed batch stride (NaN) or copied to a packed buffer first (pass)
_MM = "MUL_MAT(type0={t0},ne0={ne0},type1=f32,ne1={ne1},lay1={lay},dst=f32,data=uniform:0)"
SRC1_GAP_FAILS = [
    _MM.format(t0="f16", ne0="[1,1,2,1]", ne1="[1,1,2,1]", lay="perm[0,1,3,2]/pad[0,2,3,3]"),
    _MM.format(t0="q4_0", ne0="[32,8,2,1]", ne1="[32,4,2,1]", lay="perm[0,1,3,2]/pad[0,2,3,3]"),
    _MM.format(t0="f32", ne0="[64,8,2,1]", ne1="[64,16,2,1]", lay="perm[0,1,3,2]/pad[0,0,1,0]"),
    _MM.format(t0="f32", ne0="[64,8,1,2]", ne1="[64,4,1,2]", lay="pad[0,1,0,0]"),
]
SRC1_COPIED_PASSES = [
    _MM.format(t0="f16", ne0="[1,1,2,2]", ne1="[1,1,2,2]", lay="perm[0,1,3,2]/pad[0,2,3,3]"),
    _MM.format(t0="f16", ne0="[1,1,1,2]", ne1="[1,1,1,2]", lay="perm[0,1,3,2]/pad[0,2,3,3]"),
    _MM.format(t0="f32", ne0="[64,8,2,2]", ne1="[64,4,2,2]", lay="pad[0,0,1,0]"),
    _MM.format(t0="f32", ne0="[64,8,2,1]", ne1="[64,4,2,1]", lay="pad[1,1,0,0]"),
    _MM.format(t0="f32", ne0="[64,8,2,1]", ne1="[64,4,2,1]", lay="perm[0,2,1,3]/pad[0,1,1,0]"),
]


_FA = ("FLASH_ATTN_EXT(type0=f32,ne0=[128,{nq},{hq},1],type1={kv},ne1=[128,{nkv},{hk},1],type2={kv},"
       "ne2=[128,{nkv},{hk},1],type3=f16,ne3=[{nkv},{nq},{mh},1],dst=f32,scale=0.0883883461356163,max_bias=0.0,"
       "logit_softcap=0.0,prec={prec},mask=True,sinks=False,data=uniform:0)")


def _fa(nq: int = 1, hq: int = 8, hk: int = 2, nkv: int = 64, mh: int = 1, kv: str = "f16",
        prec: str = "default") -> str:
    return _FA.format(nq=nq, hq=hq, hk=hk, nkv=nkv, mh=mh, kv=kv, prec=prec)


# shapes whose fully masked rows gave -FLT_MAX on Vulkan0 0.25.1, and shapes where they gave 0
MASKED_ROW_FAILS = [_fa(), _fa(hq=6, nkv=33), _fa(hq=2, hk=1), _fa(nq=4), _fa(nq=8, hq=16), _fa(nkv=256)]
MASKED_ROW_PASSES = [_fa(nkv=32), _fa(hq=2, hk=2), _fa(mh=8), _fa(prec="f32"), _fa(nq=16)]


# measured boundaries: each entry covers the shapes that failed and leaves out those that passed
BOUNDARIES = ([("vulkan-mul-mat-src1-plane-gap", c, True) for c in SRC1_GAP_FAILS]
              + [("vulkan-mul-mat-src1-plane-gap", c, False) for c in SRC1_COPIED_PASSES]
              + [("vulkan-flash-attn-ext-f16-kv-masked-row", c, True) for c in MASKED_ROW_FAILS]
              + [("vulkan-flash-attn-ext-f16-kv-masked-row", c, False) for c in MASKED_ROW_PASSES])


@pytest.mark.parametrize(("bug_id", "case_id", "covered"), BOUNDARIES)
def test_entries_follow_their_measured_boundary(bug_id: str, case_id: str, covered: bool) -> None:
    assert _bug(bug_id).matches(parse_case_id(case_id), "Vulkan0", "0.25.1", CURRENT_BUILD) is covered

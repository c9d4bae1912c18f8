"""``conform bisect``: builds ordered by (ggml version, build number) from what their folders hold, a binary
search that names the right boundary and goes round builds it must skip, bad input in one line, the exit
codes ``git bisect run`` reads, and one real bisection over node-llama-cpp's Vulkan releases."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from conformance.cli import bisect
from conformance.cli.bisect import BAD, GOOD, SKIP, Build, Replay, Verdict, bisect_builds, order_builds, report
from conformance.cli.common import UsageError

ROOT = Path(__file__).parent.parent
CPU_PASSES = "SQRT(type=f32,ne=[4,3,2,1],dst=f32,data=uniform:1)"
# ggml's CPU aborts on a source with dim 0 permuted away (known bug cpu-sqrt-row-stride, 0.17.0 … 0.25.1)
CPU_ABORTS = "SQRT(type=f32,ne=[4,3,2,1],lay=perm[1,0,2,3],dst=f32,data=uniform:1)"


def conform(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.pop("GGML_LIB_DIR", None)
    return subprocess.run([sys.executable, "-m", "conformance.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].strip(), done.stderr
    return lines[0]


# ---- fake build folders: a libggml-base that reports a version, library names that carry a build ------

def fake_build(where: Path, version: str | None, names: tuple[str, ...] = ("libggml.so",)) -> Path:
    """A folder with a compiled libggml-base.so whose ggml_version() says ``version`` (None: no such symbol)
    and empty files named ``names`` (the registry library, libllama …: only their names are read)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a stand-in libggml-base")
    where.mkdir(parents=True)
    body = f'const char *ggml_version(void) {{ return "{version}"; }}\n' if version else "int no_version;\n"
    (where / "base.c").write_text(body)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(where / "libggml-base.so"), str(where / "base.c")],
                   check=True, capture_output=True)
    for name in names:
        (where / name).write_bytes(b"")
    return where


def test_builds_are_ordered_by_ggml_version_then_build_number(tmp_path: Path) -> None:
    # three releases report 0.9.7; only the build number in the file names tells them apart
    folders = {
        "3.17.1": fake_build(tmp_path / "3.17.1", "0.9.7", ("libggml.vulkan.b8179.so", "libllama.vulkan.b8179.so")),
        "0.25.1": fake_build(tmp_path / "0.25.1", "0.25.1", ("libggml.vulkan.v0.5.0.so",)),
        "3.16.0": fake_build(tmp_path / "3.16.0", "0.9.7", ("libggml.vulkan.b8095.so",)),
        "3.10.0": fake_build(tmp_path / "3.10.0", None),  # older than ggml_version() itself
        "3.15.1": fake_build(tmp_path / "3.15.1", "0.9.5", ("libggml.vulkan.b7836.so",)),
        "3.16.2": fake_build(tmp_path / "3.16.2", "0.9.7", ("libggml.vulkan.b8121.so",)),
        "3.19.1": fake_build(tmp_path / "3.19.1", "0.17.0", ("libggml.vulkan.b10068.so",)),
    }
    builds = order_builds([bisect.identify(str(f)) for f in folders.values()])
    assert [b.name for b in builds] == ["3.10.0", "3.15.1", "3.16.0", "3.16.2", "3.17.1", "3.19.1", "0.25.1"]
    assert [(b.version, b.build) for b in builds[1:4]] == [("0.9.5", "b7836"), ("0.9.7", "b8095"),
                                                           ("0.9.7", "b8121")]
    assert builds[0].version == "" and builds[0].build == ""
    # a build the user names (DIR=BUILD) is placed by that build
    named = bisect.identify(f"{folders['3.10.0']}=b5640")
    assert named.build == "b5640"


def test_two_builds_of_one_version_without_a_build_number_are_refused(tmp_path: Path) -> None:
    tagged = fake_build(tmp_path / "tagged", "0.9.7", ("libggml.vulkan.b8095.so",))
    untagged = fake_build(tmp_path / "untagged", "0.9.7")
    with pytest.raises(UsageError, match=r"both report ggml 0\.9\.7 .*untagged=bNNNN"):
        order_builds([bisect.identify(str(tagged)), bisect.identify(str(untagged))])
    # given as DIR=BUILD, the same two are ordered
    ordered = order_builds([bisect.identify(str(tagged)), bisect.identify(f"{untagged}=b8121")])
    assert [b.name for b in ordered] == ["tagged", "untagged"]


def test_libraries_that_name_two_builds_are_refused(tmp_path: Path) -> None:
    mixed = fake_build(tmp_path / "mixed", "0.9.7", ("libggml.vulkan.b8095.so", "libllama.vulkan.b8121.so"))
    with pytest.raises(UsageError, match="more than one build"):
        bisect.identify(str(mixed))


# ---- the search, on fake builds with a stand-in probe ----------------------------------------------------

def _builds(n: int) -> list[Build]:
    return [Build(Path(f"/builds/r{i:02d}"), f"0.{i}.0", f"b{1000 + i}") for i in range(n)]


def _probe(verdicts: dict[str, str], calls: list[str]) -> Callable[[Build], Verdict]:
    def probe(build: Build) -> Verdict:
        calls.append(build.name)
        return Verdict(verdicts[build.name], "stand-in")
    return probe


@pytest.mark.parametrize("first_bad", [1, 2, 7, 14, 15])
def test_the_search_names_the_first_bad_build_in_few_probes(first_bad: int) -> None:
    builds = _builds(16)
    kinds = {b.name: GOOD if i < first_bad else BAD for i, b in enumerate(builds)}
    calls: list[str] = []
    search = bisect_builds(builds, _probe(kinds, calls))
    assert (search.older, search.newer) == (first_bad - 1, first_bad)
    assert search.regression
    assert len(calls) <= 2 + 4  # both ends, then log2(14) rounded up
    assert len(set(calls)) == len(calls)  # no build is replayed twice
    lines: list[str] = []
    assert report(search, lines.append) == 0
    assert lines[-1] == f"last good: {builds[first_bad - 1].label}, first bad: {builds[first_bad].label}"
    assert sum(1 for ln in lines if "not probed" in ln) == 16 - len(calls)


def test_a_fix_is_named_as_last_bad_and_first_good() -> None:
    builds = _builds(6)
    kinds = {b.name: BAD if i < 4 else GOOD for i, b in enumerate(builds)}
    search = bisect_builds(builds, _probe(kinds, []))
    lines: list[str] = []
    assert report(search, lines.append) == 0
    assert lines[-1] == f"last bad: {builds[3].label}, first good: {builds[4].label}  (the fix)"


def test_skipped_builds_are_gone_round_and_a_skipped_end_moves_inward() -> None:
    builds = _builds(10)
    kinds = {b.name: GOOD if i < 6 else BAD for i, b in enumerate(builds)}
    kinds["r00"] = SKIP  # the oldest does not load: the next one is the good end
    kinds["r04"] = kinds["r05"] = SKIP  # the middle and the build just before the boundary
    search = bisect_builds(builds, _probe(kinds, []))
    # r03 good, r04 r05 skipped, r06 bad: the boundary is one of r04, r05, r06
    assert (search.older, search.newer) == (3, 6)
    assert search.skipped_between() == [4, 5]
    lines: list[str] = []
    assert report(search, lines.append) == 1
    assert lines[-1].startswith(f"last good: {builds[3].label}; first bad: one of {builds[4].label}, "
                                f"{builds[5].label}, {builds[6].label}")
    assert any(ln.strip().startswith(builds[0].label) and "skip (stand-in)" in ln for ln in lines)


def test_a_skip_next_to_the_boundary_does_not_hide_it() -> None:
    builds = _builds(8)
    kinds = {b.name: GOOD if i < 3 else BAD for i, b in enumerate(builds)}
    kinds["r05"] = SKIP
    search = bisect_builds(builds, _probe(kinds, []))
    assert (search.older, search.newer) == (2, 3)
    assert report(search, [].append) == 0


@pytest.mark.parametrize(("kinds", "said"), [
    ([GOOD, GOOD, GOOD, GOOD], "both ends are good"),
    ([BAD, SKIP, BAD], "both ends are bad"),
    ([SKIP, SKIP, SKIP], "only 0 of 3 build(s) could be judged"),
    ([SKIP, GOOD, SKIP], "only 1 of 3 build(s) could be judged"),
])
def test_no_boundary_is_one_line_and_exit_2(kinds: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    builds = _builds(len(kinds))
    search = bisect_builds(builds, _probe({b.name: k for b, k in zip(builds, kinds, strict=True)}, []))
    assert report(search, [].append) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and said in err[0]


# ---- reading a replay's output as a verdict --------------------------------------------------------------

CASE = Replay(case_id=CPU_PASSES)
SEQUENCE = Replay(sequence=("a.txt",))
MODEL = Replay(model="m.gguf")


@pytest.mark.parametrize(("replay", "code", "out", "err", "kind", "says"), [
    (CASE, 0, f"PASS  {CPU_PASSES}  on ggml:CPU\n  error_ratio 0.25  max_abs 1e-08\n", "", GOOD, "error_ratio 0.25"),
    (CASE, 1, f"FAIL  {CPU_PASSES}  on ggml:CPU\n  error_ratio 41  max_abs 0.6\n", "", BAD, "FAIL  error_ratio 41"),
    (CASE, 1, f"CRASH  {CPU_PASSES}  on ggml:CPU\n  the device process died (signal 6)\n", "", BAD, "CRASH"),
    (CASE, 1, f"CRASH  {CPU_PASSES}  on ggml:Vulkan0\n  device worker died (signal SIGABRT): /x/ggml/src/ggml-vulkan/"
     "ggml-vulkan.cpp:5496: GGML_ASSERT(misalign_bytes == 0) failed\n", "", BAD, "CRASH"),  # the backend aborts
    (CASE, 1, f"CRASH  {CPU_PASSES}  on ggml:Vulkan0\n  device worker died (signal SIGABRT): /x/llama.cpp/ggml/src/"
     "ggml.c:4996: GGML_ASSERT(mask->ne[1] >= GGML_PAD(q->ne[1], GGML_KQ_MASK_PAD)) failed\n", "", SKIP,
     "op constructor refuses the case: ggml/src/ggml.c:4996"),  # the release's constructor: not the backend
    (CASE, 0, f"KNOWN  {CPU_PASSES}  on ggml:CPU\n  known bug x\n", "", BAD, "KNOWN"),  # a listed defect is there
    (CASE, 0, f"UNSUPPORTED  {CPU_PASSES}  on ggml:CPU\n  ggml 0.9.4 has no ggml_argsort_top_k()\n", "", SKIP,
     "declines the case: ggml 0.9.4 has no ggml_argsort_top_k()"),
    (CASE, 2, "", "load_backend: loaded CPU\nconform: /x: ggml lacks 2 core symbol(s)\n", SKIP,
     "/x: ggml lacks 2 core symbol(s)"),
    (CASE, -11, "", "Segmentation fault\n", SKIP, "the replay itself died (signal 11)"),
    (CASE, 0, "nothing useful\n", "", SKIP, "printed no verdict"),
    (SEQUENCE, 0, "replaying 2\n  1/2 PASS        A\n  2/2 PASS        B\nevery case passed: ...\n", "", GOOD,
     "every case passed"),
    (SEQUENCE, 1, "replaying 2\n  1/2 PASS        A\n  2/2 CRASH       B\nCRASH at case 2/2: the sequence "
     "reproduces it\n", "", BAD, "CRASH at case 2/2"),
    (SEQUENCE, 0, "  1/2 PASS        A\n  2/2 UNSUPPORTED B\nevery case passed\n", "", SKIP, "2/2 UNSUPPORTED"),
    # a failure a listed entry explains: conform repro exits 0 as the suite counts it; the defect is there
    (SEQUENCE, 0, "  1/2 PASS        A\n  2/2 KNOWN       B  (known bug x)\nFAIL at case 2/2: the sequence reproduces "
     "it\nKNOWN: known bug x gives FAIL here: why\n", "", BAD, "FAIL at case 2/2"),
    (MODEL, 1, "model m on ggml:Vulkan0\nfirst failing node: 7 attn (MUL_MAT, step 0): 3x\nverdict: FAIL\n", "", BAD,
     "first failing node: 7"),
    (MODEL, 0, "model m on ggml:Vulkan0\nverdict: pass  (results in /tmp/x)\n", "", GOOD, "verdict: pass"),
    (MODEL, 2, "", "conform model: llama_model_default_params() writes 72 bytes\n", SKIP, "writes 72 bytes"),
])
def test_a_replays_output_is_read_as_a_verdict(replay: Replay, code: int, out: str, err: str, kind: str,
                                               says: str) -> None:
    verdict = replay.judge(code, out, err)
    assert verdict.kind == kind
    assert says in verdict.detail, verdict.detail


def test_an_interrupted_replay_stops_the_bisection() -> None:
    with pytest.raises(KeyboardInterrupt):
        CASE.judge(130, "", "")


# ---- the command: bad input, and the exit codes git bisect run reads ------------------------------------

@pytest.mark.parametrize(("args", "said"), [
    (["bisect", CPU_PASSES], "needs --builds"),
    (["bisect", CPU_PASSES, "--builds", "/no/such/build"], "no such folder"),
    (["bisect", CPU_PASSES, "--builds", f"{ROOT}=8095"], "must look like b7836"),
    (["bisect", CPU_PASSES, "--builds", str(ROOT / "docs")], "not a ggml build directory"),
    (["bisect", "SQRT(type=f32,ne=[4,3", "--builds", str(ROOT)], "SQRT"),
    (["bisect", "--builds", str(ROOT)], "exactly one of"),
    (["bisect", CPU_PASSES, "--run"], "--run needs --ggml-lib"),
    (["bisect", CPU_PASSES, "--model", "/no/such.gguf", "--builds", str(ROOT)], "exactly one of"),
    (["bisect", "--model", "/no/such.gguf", "--builds", str(ROOT)], "no such file"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], said: str) -> None:
    assert said in one_line(conform(*args))


def test_one_build_is_not_a_range(tmp_path: Path) -> None:
    build = fake_build(tmp_path / "one", "0.9.7", ("libggml.vulkan.b8095.so",))
    assert "a bisection needs two or more" in one_line(conform("bisect", CPU_PASSES, "--builds", str(build),
                                                               str(build)))


@pytest.mark.slow
def test_run_exits_as_git_bisect_run_wants(tmp_path: Path) -> None:
    """0 good, 1 bad, 125 skip (a build that does not load, or a build command that fails); --invert swaps
    0 and 1 for git bisect's broken/fixed terms. The build here is the default libggml-python wheel."""
    pytest.importorskip("libggml", reason="the libggml-python wheel (the default ggml:CPU) is not installed")
    wheel = str(Path(__import__("libggml").__file__).parent / "lib64")
    assert conform("bisect", "--run", CPU_PASSES, "--ggml-lib", wheel).returncode == 0
    assert conform("bisect", "--run", CPU_ABORTS, "--ggml-lib", wheel).returncode == 1
    assert conform("bisect", "--run", "--invert", CPU_ABORTS, "--ggml-lib", wheel).returncode == 0
    assert conform("bisect", "--run", "--invert", CPU_PASSES, "--ggml-lib", wheel).returncode == 1
    unloadable = fake_build(tmp_path / "old", None)  # no ggml_version: the binding refuses it
    refused = conform("bisect", "--run", CPU_PASSES, "--ggml-lib", str(unloadable))
    assert refused.returncode == bisect.GIT_BISECT_SKIP, refused.stdout + refused.stderr
    assert "skip (" in refused.stdout
    missing = conform("bisect", "--run", CPU_PASSES, "--ggml-lib", str(tmp_path / "build" / "bin"))
    assert missing.returncode == bisect.GIT_BISECT_SKIP  # the build wrote no libraries there
    failed_build = conform("bisect", "--run", CPU_PASSES, "--ggml-lib", wheel, "--build-cmd", "exit 3")
    assert failed_build.returncode == bisect.GIT_BISECT_SKIP
    assert "the build command exited 3" in failed_build.stdout


# ---- real bisections: node-llama-cpp's Vulkan releases on lavapipe -----------------------------------------

ROPE_INPLACE_VIEW = ("GRAPH[rope_inplace_view](type=f16,head_dim=64,n_head=2,n_kv=7,n_rot=32,mode=2,"
                     "freq_base=10000.0,data=uniform:1)")
# a query row masked throughout, 6 query heads on 2 K/V heads (known bug vulkan-flash-attn-ext-f16-kv-masked-row)
FLASH_ATTN_MASKED_ROW = (
    "FLASH_ATTN_EXT(type0=f32,ne0=[128,1,6,1],type1=f16,ne1=[128,33,2,1],type2=f16,ne2=[128,33,2,1],"
    "type3=f16,ne3=[33,1,1,1],dst=f32,scale=0.0883883461356163,max_bias=0.0,logit_softcap=0.0,prec=default,"
    "mask=True,sinks=False,data=uniform:0)")
REAL_DEFECTS = [
    # ggml-vulkan rotated an in-place ROPE on a strided view of the K cache wrong (llama.cpp #19292) up to b7836
    pytest.param(ROPE_INPLACE_VIEW, ("3.14.5", "3.15.1", "3.16.0", "3.17.1"),
                 "last bad: vulkan-3.15.1 (ggml 0.9.5, b7836), first good: vulkan-3.16.0 (ggml 0.9.7, b8095)"
                 "  (the fix)",
                 id="rope-inplace-view-fixed"),
    # and gives -FLT_MAX for a fully masked query row under GQA from b8179 on; three of these report ggml 0.9.7
    pytest.param(FLASH_ATTN_MASKED_ROW, ("3.16.0", "3.16.2", "3.17.1"),
                 "last good: vulkan-3.16.2 (ggml 0.9.7, b8121), first bad: vulkan-3.17.1 (ggml 0.9.7, b8179)",
                 id="flash-attn-masked-row-regressed"),
]


def _release_folders(versions: tuple[str, ...]) -> list[Path]:
    """Older releases as vulkan-<V>/ under $CONFORM_RELEASES (default .backends: scripts/setup-vulkan.sh V)."""
    where = Path(os.environ.get("CONFORM_RELEASES", ROOT / ".backends"))
    return [where / f"vulkan-{v}" for v in versions if (where / f"vulkan-{v}" / "libggml-vulkan.so").exists()]


@pytest.mark.slow
@pytest.mark.parametrize(("case_id", "versions", "boundary"), REAL_DEFECTS)
def test_a_real_defect_is_bisected_to_its_release(case_id: str, versions: tuple[str, ...], boundary: str) -> None:
    folders = _release_folders(versions)
    current = ROOT / ".backends" / "ggml-0.25.1-vulkan"
    if len(folders) < len(versions) or not (current / "libggml-vulkan.so").exists():
        pytest.skip(f"needs node-llama-cpp Vulkan {', '.join(versions)} as $CONFORM_RELEASES/vulkan-<V> "
                    "(bash scripts/setup-vulkan.sh V) and .backends/ggml-0.25.1-vulkan (scripts/setup-vulkan.sh)")
    done = conform("bisect", case_id, "--device", "ggml:Vulkan0", "--case-timeout", "600",
                   "--builds", str(current), *map(str, folders))  # in any order: bisect orders them
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == boundary, done.stdout
    table = lines[lines.index("builds, oldest first:") + 1:-1]
    assert [ln.split()[0] for ln in table] == [f"vulkan-{v}" for v in versions] + ["ggml-0.25.1-vulkan"]
    verdicts = [re.search(r"\)\s+(good|bad|skip|not probed)", ln).group(1) for ln in table]  # type: ignore[union-attr]
    # both ends were judged and disagree (0.25.1's FLASH_ATTN_EXT failure is a listed known bug: still bad)
    assert (verdicts[0], verdicts[-1]) == ((GOOD, BAD) if boundary.startswith("last good") else (BAD, GOOD))


def test_every_option_of_bisect_has_help_and_the_exit_codes_are_said() -> None:
    import argparse

    from conformance.cli import build_parser

    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    sub = action.choices["bisect"]
    for option in sub._actions:
        assert option.help, f"conform bisect: {option.option_strings or option.dest} has no help text"
    text = " ".join(sub.format_help().split())
    for said in ("0 the boundary is named", "1 it lies among skipped builds", "2 bad input", "125 skip"):
        assert said in text, said


@pytest.mark.slow
def test_git_bisect_run_finds_the_commit_that_fixed_the_rope(tmp_path: Path) -> None:
    """``git bisect run conform bisect --run ...`` over a git tree whose commits "build" one release each (the
    build command links the release the commit names): git names the commit of 3.16.0 as the first fixed one,
    and a commit whose build does not load is skipped (125), not judged."""
    versions = ("3.14.5", "3.15.1", "3.16.0", "3.17.1")
    folders = _release_folders(versions)
    if len(folders) < len(versions) or shutil.which("git") is None:
        pytest.skip(f"needs git and node-llama-cpp Vulkan {', '.join(versions)} as $CONFORM_RELEASES/vulkan-<V>")
    tree = tmp_path / "tree"
    tree.mkdir()
    unloadable = fake_build(tmp_path / "no-version", None)
    # the unloadable build in the middle (git tries it first), not next to the boundary (c3 -> c4)
    order = [folders[0], folders[1], unloadable, folders[1], folders[2], folders[3]]

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=tree, capture_output=True, text=True, timeout=600,
                              env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                                   "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
                                   "PYTHONPATH": str(ROOT)})
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    git("init", "-q")
    commits = []
    for folder in order:
        (tree / "which").write_text(str(folder))
        git("add", "which")
        git("commit", "-q", "-m", folder.name)
        commits.append(git("rev-parse", "HEAD").strip())
    git("bisect", "start", "--term-old=broken", "--term-new=fixed")
    git("bisect", "fixed", commits[-1])
    git("bisect", "broken", commits[0])
    out = git("bisect", "run", sys.executable, "-m", "conformance.cli", "bisect", "--run", "--invert",
              ROPE_INPLACE_VIEW, "--device", "ggml:Vulkan0", "--case-timeout", "600", "--ggml-lib", "build",
              "--build-cmd", 'ln -sfn "$(cat which)" build')
    assert f"{commits[4]} is the first fixed commit" in out, out
    assert "no-version (no ggml_version, build ?)  skip (" in out  # its commit was tried and skipped (125)

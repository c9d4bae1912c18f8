"""``conform bisect``: which build broke a case (or fixed it).

Given a case id, a sequence or a model and a set of ggml builds (``--builds DIR...``), it orders the builds
by ggml version and llama.cpp build number, replays the case on each build it probes and names the last
build that behaves like the oldest and the first that behaves like the newest: ``last good: X, first bad:
Y`` for a regression, ``last bad: X, first good: Y`` for a fix.

Every replay runs in a subprocess (``conform repro`` for a case id or ``--sequence``, ``conform model`` for
``--model``) with ``--ggml-lib`` set to the build: a build that crashes the replay, refuses to load or
declines the case gets the verdict ``skip (reason)`` -- ``git bisect``'s 125 -- and the search goes round
it. A crash *of the case* (the device worker aborting) is a verdict of its own: bad.

``--run`` judges one build and exits as ``git bisect run`` wants (0 good, 1 bad, 125 skip), optionally
after ``--build-cmd`` (a failed build is 125), so a git tree of llama.cpp can be bisected commit by commit.

Exit status of the range mode: 0 the boundary is named; 1 it lies among builds that could only be
skipped (the candidates are listed); 2 bad input, including a range whose two ends agree (both good or
both bad: the builds given hold no change) or fewer than two builds that could be judged.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.cli.common import UsageError, add_parser, limits
from device import build_tag
from device.build_tag import build_key

GOOD, BAD, SKIP = "good", "bad", "skip"
GIT_BISECT_SKIP = 125  # git bisect run: "this commit cannot be tested"

_GENERIC_FOLDERS = {"bin", "lib", "lib64", "build", "Release"}
# the verdict line of conform repro: OUTCOME  case-id  on device
_OUTCOME_LINE = re.compile(r"^(PASS|FAIL|CRASH|TIMEOUT|ERROR|UNSUPPORTED|KNOWN)\b\s*(.*)$")
# a step line of conform repro --sequence:   3/7 OUTCOME  case-id  message
# an abort in ggml.c itself (the op constructors and graph building), not in a backend
_CONSTRUCTOR_ABORT = re.compile(r"ggml/src/ggml\.c:\d+: GGML_ASSERT\([^\n]{0,120}")
_SEQUENCE_FAILED = re.compile(r"^(FAIL|CRASH|TIMEOUT|ERROR) at case \d+/\d+")
_STEP_LINE = re.compile(r"^\s+(\d+)/(\d+) ([A-Z]+)\s")

# run in a fresh interpreter: two builds' libggml-base cannot share one process
_VERSION_PROBE = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
try:
    fn = lib.ggml_version
except AttributeError:
    print("")
else:
    fn.restype, fn.argtypes = ctypes.c_char_p, []
    print((fn() or b"").decode(errors="replace"))
"""


# ---- the builds ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Build:
    """One ggml build folder and what orders it: ``ggml_version()`` and the llama.cpp build tag."""

    folder: Path
    version: str  # what ggml_version() reports; "" when the library has no ggml_version (older than 0.0.1)
    build: str  # b7836 / v0.5.0, from the file names or the user; "" when neither says
    unreadable: str = ""  # why the version could not be read (the build is then skipped when probed)

    @property
    def name(self) -> str:
        if self.folder.name in _GENERIC_FOLDERS:  # build/bin, libggml/lib64: the folder above says which build
            return f"{self.folder.parent.name}/{self.folder.name}"
        return self.folder.name

    @property
    def label(self) -> str:
        version = f"ggml {self.version}" if self.version else "no ggml_version"
        return f"{self.name} ({version}, {self.build or 'build ?'})"

    def order_key(self) -> tuple[tuple[int, ...], tuple[int, tuple[int, ...]]]:
        from device.ggml.lib import parse_version

        return parse_version(self.version), build_key(self.build)


def build_tag_in(folder: Path) -> str:
    """The build the folder says (device/build_tag.py: the libraries' file names, libggml.vulkan.b7836.so, or
    node-llama-cpp's _nlcBuildMetadata.json), or ""; refused where they disagree. The environment's
    CONFORM_LLAMA_BUILD is not read here: one word for every build of a bisection would be wrong for all but one."""
    found = build_tag.read_build(folder, declared="")
    if found.conflict:
        raise UsageError(f"{folder}: its libraries name more than one build ({found.conflict}); "
                         "pass the build as DIR=BUILD")
    return found.tag or ""


def read_version(base: Path) -> tuple[str, str]:
    """(ggml_version() of the libggml-base at ``base``, why it could not be read or "")."""
    try:
        done = subprocess.run([sys.executable, "-c", _VERSION_PROBE, str(base)], capture_output=True, text=True,
                              timeout=120)
    except subprocess.TimeoutExpired:
        return "", "loading its libggml-base took over 120 s"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return "", f"its libggml-base does not load: {last[:200]}"
    return done.stdout.strip(), ""


def identify(given: str) -> Build:
    """``DIR`` or ``DIR=BUILD`` as the user gave it: the folder checked, its version and build read."""
    from device.ggml.lib import GgmlLibraryError, find_libraries

    folder_text, tag = given, ""
    before, equals, after = given.rpartition("=")
    if equals and not Path(given).expanduser().is_dir():  # DIR=BUILD (a folder's own name may hold '=')
        folder_text, tag = before, after
        if not build_tag.is_build_tag(tag):
            raise UsageError(f"--builds {given}: the build after '=' must look like b7836 or v0.5.0")
    folder = Path(folder_text).expanduser()
    if not folder.is_dir():
        raise UsageError(f"--builds {folder_text}: no such folder")
    try:
        files = find_libraries(folder)
    except GgmlLibraryError as exc:
        raise UsageError(f"--builds {folder_text}: {exc}") from None
    version, unreadable = read_version(files.base)
    return Build(folder.resolve(), version, tag or build_tag_in(folder), unreadable)


def order_builds(builds: Sequence[Build]) -> list[Build]:
    """Oldest first, by (ggml version, build). Several releases report one ggml version (0.9.7 for
    b8095 … b8390), so two builds that only a missing build tag could tell apart are refused."""
    if not builds:
        raise UsageError("--builds names no build folders")
    seen: dict[Path, Build] = {}
    for build in builds:
        seen.setdefault(build.folder, build)
    ordered = sorted(seen.values(), key=Build.order_key)
    for older, newer in zip(ordered, ordered[1:], strict=False):
        if older.order_key()[0] != newer.order_key()[0]:
            continue
        if older.build and newer.build and older.build != newer.build:
            continue
        untagged = older if not older.build else newer
        raise UsageError(
            f"{older.name} and {newer.name} both report "
            f"{'ggml ' + older.version if older.version else 'no ggml_version'} and "
            + (f"the same build {older.build}" if older.build == newer.build and older.build
               else "neither names its build" if not older.build and not newer.build
               else "only one of them names its build")
            + f": name the build as {untagged.folder}=bNNNN (llama.cpp's build number)")
    return ordered


# ---- one probe: a replay in a subprocess -----------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    kind: str  # good, bad or skip
    detail: str

    def line(self) -> str:
        return f"{self.kind} ({self.detail})" if self.kind == SKIP else f"{self.kind:<4}  {self.detail}"


@dataclass(frozen=True)
class Replay:
    """What is replayed on each build, and how the replay's output is read as a verdict."""

    case_id: str | None = None
    sequence: tuple[str, ...] = ()
    sequence_cases: int = 0  # how many case ids the sequence's arguments hold
    model: str | None = None
    device: str = "ggml:CPU"
    case_timeout: float = 120.0
    threads: int = 1
    extra: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        if self.model:
            return f"model {self.model}"
        if self.sequence:
            return f"a sequence of {self.sequence_cases} case(s)"
        return f"case {self.case_id}"

    def command(self, folder: Path, out: Path) -> list[str]:
        cli = [sys.executable, "-m", "conformance.cli"]
        lib = ["--ggml-lib", str(folder), "--device", self.device, "--threads", str(self.threads)]
        if self.model:
            return [*cli, "model", self.model, *lib, "--out", str(out), "--no-cpu"]
        limit = ["--case-timeout", repr(self.case_timeout)]
        if self.sequence:
            return [*cli, "repro", "--sequence", *self.sequence, *lib, *limit]
        assert self.case_id is not None
        return [*cli, "repro", self.case_id, *lib, *limit]

    def wall_limit(self) -> float:
        """A replay that runs far past its cases' limits is stuck outside any case: skip the build."""
        cases = max(1, self.sequence_cases)
        return 600.0 if self.model else 60.0 + 2 * self.case_timeout * cases

    def judge(self, returncode: int, stdout: str, stderr: str) -> Verdict:
        if returncode == 130:
            raise KeyboardInterrupt("the replay was interrupted")
        lines = stdout.splitlines()
        if returncode == 2:  # bad input to the replay: for one build, the library refused (or lacks the op)
            return Verdict(SKIP, _last_line(stderr) or "the replay exited 2")
        if returncode not in (0, 1):
            how = f"signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
            return Verdict(SKIP, f"the replay itself died ({how}): {_last_line(stderr)}"[:240])
        if self.model:
            summary = next((ln for ln in lines if ln.startswith(("first failing node:", "model ")) and
                            ("CRASH" in ln or ln.startswith("first failing"))), "")
            verdict = next((ln for ln in reversed(lines) if ln.startswith("verdict:")), "")
            verdict = re.sub(r"\s*\(results in [^)]*\)", "", verdict)  # a temporary folder, gone after the probe
            return Verdict(GOOD if returncode == 0 else BAD, (summary or verdict or f"exit {returncode}")[:240])
        if self.sequence:
            steps = [m for ln in lines if (m := _STEP_LINE.match(ln))]
            if steps and steps[-1].group(3) == "UNSUPPORTED":
                return Verdict(SKIP, f"the build declines the sequence's last case ({steps[-1].group(1)}/"
                                     f"{steps[-1].group(2)} UNSUPPORTED)")
            # by what the replay says, not its exit status: a failure a listed entry explains exits 0 (as the
            # suite counts it) and is still the defect
            failed = next((ln for ln in lines if _SEQUENCE_FAILED.match(ln)), "")
            if failed:
                return Verdict(BAD, failed[:240])
            passed = next((ln for ln in lines if ln.startswith("every case passed")), "")
            return Verdict(GOOD if returncode == 0 else BAD, (passed or f"exit {returncode}")[:240])
        found = next((m for ln in lines if (m := _OUTCOME_LINE.match(ln))), None)
        if found is None:
            return Verdict(SKIP, f"the replay printed no verdict (exit {returncode}): {_last_line(stderr)}"[:240])
        outcome = found.group(1)
        detail = _detail(lines, outcome)
        if outcome == "UNSUPPORTED":
            return Verdict(SKIP, f"the build declines the case{': ' + detail if detail else ''}"[:240])
        if outcome == "PASS":
            return Verdict(GOOD, f"PASS  {detail}"[:240])
        constructor_abort = _CONSTRUCTOR_ABORT.search(stdout) if outcome == "CRASH" else None
        if constructor_abort:
            # the release's op constructor (shared by every backend) refuses the case as drawn, e.g. FLASH_ATTN_EXT's
            # mask padding that releases before 0.20 assert: that build cannot run it, which says nothing of the defect
            return Verdict(SKIP, f"the release's op constructor refuses the case: {constructor_abort.group(0)}"[:240])
        # FAIL, CRASH, TIMEOUT, ERROR, and KNOWN (a listed defect is still the defect): the case shows it
        return Verdict(BAD, f"{outcome}  {detail}"[:240])


def _last_line(text: str) -> str:
    """The last line of a replay's stderr that is not one of ggml's load banners."""
    kept = [ln.strip() for ln in text.splitlines()
            if ln.strip() and not ln.startswith(("ggml_vulkan:", "load_backend:", "register_backend:"))]
    last = kept[-1] if kept else ""
    return last.removeprefix("conform: ").removeprefix("conform model: ")[:200]


def _detail(lines: list[str], outcome: str) -> str:
    """The replay's figures after its verdict line: error_ratio … for an op case, the worst run of a graph."""
    start = next(i for i, ln in enumerate(lines) if ln.startswith(outcome))
    rest = [ln.strip() for ln in lines[start + 1:start + 8] if ln.strip()]
    figures = next((ln for ln in rest if ln.startswith("error_ratio")), "")
    if figures:
        return figures
    graph = [ln for ln in rest if "error_ratio" in ln]
    if graph:
        def ratio(text: str) -> float:
            match = re.search(r"error_ratio (\S+)", text)
            try:
                return float(match.group(1)) if match else 0.0
            except ValueError:
                return 0.0
        worst = max(graph, key=ratio)
        return " ".join(worst.split())
    return rest[0] if rest else ""


def probe_with(replay: Replay) -> Callable[[Build], Verdict]:
    """The probe of the range mode: ``replay`` on a build, in a subprocess, as a verdict."""

    def probe(build: Build) -> Verdict:
        if build.unreadable:
            return Verdict(SKIP, build.unreadable)
        with tempfile.TemporaryDirectory(prefix="conform-bisect-") as out:
            return run_replay(replay, build.folder, Path(out))

    return probe


def run_replay(replay: Replay, folder: Path, out: Path) -> Verdict:
    env = dict(os.environ)
    env.pop("GGML_LIB_DIR", None)  # --ggml-lib names the build; nothing else may
    try:
        done = subprocess.run(replay.command(folder, out), capture_output=True, text=True, env=env,
                              timeout=replay.wall_limit(), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Verdict(SKIP, f"the replay ran past {replay.wall_limit():.0f} s outside any case's limit")
    return replay.judge(done.returncode, done.stdout, done.stderr)


# ---- the search --------------------------------------------------------------------------------------

@dataclass
class Search:
    """The outcome of a bisection over ordered builds: every probed build's verdict and the boundary."""

    builds: list[Build]
    verdicts: dict[int, Verdict]
    older: int | None = None  # index of the last build that behaves like the oldest judged one
    newer: int | None = None  # index of the first that behaves like the newest
    problem: str = ""  # why no boundary could be named

    @property
    def regression(self) -> bool:
        return self.older is not None and self.verdicts[self.older].kind == GOOD

    def skipped_between(self) -> list[int]:
        if self.older is None or self.newer is None:
            return []
        return [i for i in range(self.older + 1, self.newer) if i in self.verdicts]

    def untested_between(self) -> list[int]:
        if self.older is None or self.newer is None:
            return []
        return [i for i in range(self.older + 1, self.newer) if i not in self.verdicts]


def bisect_builds(builds: list[Build], probe: Callable[[Build], Verdict],
                  show: Callable[[Build, Verdict], None] = lambda b, v: None) -> Search:
    """Binary search for the build where the verdict changes, going round skipped builds.

    Both ends are judged first (the first build from each end that is not skipped); the oldest may be good
    and the newest bad (a regression) or the other way (a fix): the search keeps whatever the ends say."""
    verdicts: dict[int, Verdict] = {}

    def judge(index: int) -> Verdict:
        verdict = probe(builds[index])
        verdicts[index] = verdict
        show(builds[index], verdict)
        return verdict

    search = Search(builds, verdicts)
    low = next((i for i in range(len(builds)) if judge(i).kind != SKIP), None)
    high = None
    if low is not None:
        high = next((i for i in range(len(builds) - 1, low, -1) if judge(i).kind != SKIP), None)
    if low is None or high is None:
        judged = 0 if low is None else 1
        search.problem = (f"only {judged} of {len(builds)} build(s) could be judged (the others were skipped): "
                          "a bisection needs a judged build at each end")
        return search
    if verdicts[low].kind == verdicts[high].kind:
        search.problem = (f"both ends are {verdicts[low].kind}: {builds[low].label} and {builds[high].label}; "
                          "the builds given hold no change (add an older or newer build)")
        return search
    old_kind = verdicts[low].kind
    while True:
        open_indices = [i for i in range(low + 1, high) if i not in verdicts]
        if not open_indices:
            break
        middle = (low + high) // 2
        pick = min(open_indices, key=lambda i: (abs(i - middle), i))  # the middle, or its nearest unprobed
        verdict = judge(pick)
        if verdict.kind == SKIP:
            continue
        if verdict.kind == old_kind:
            low = pick
        else:
            high = pick
    search.older, search.newer = low, high
    return search


def report(search: Search, out: Callable[[str], None] = print) -> int:
    """The table of every build's verdict and the boundary line; the exit status."""
    out("")
    out("builds, oldest first:")
    width = max(len(b.label) for b in search.builds)
    for i, build in enumerate(search.builds):
        verdict = search.verdicts.get(i)
        out(f"  {build.label:<{width}}  {verdict.line() if verdict else 'not probed'}")
    if search.problem:
        print(f"conform bisect: {search.problem}", file=sys.stderr)
        return 2
    assert search.older is not None and search.newer is not None
    older, newer = search.builds[search.older], search.builds[search.newer]
    first_word, second_word = (GOOD, BAD) if search.regression else (BAD, GOOD)
    skipped = search.skipped_between()
    if skipped:
        candidates = ", ".join(search.builds[i].label for i in [*skipped, search.newer])
        out(f"last {first_word}: {older.label}; first {second_word}: one of {candidates} "
            "(the builds between were skipped)")
        return 1
    what = "" if search.regression else "  (the fix)"
    out(f"last {first_word}: {older.label}, first {second_word}: {newer.label}{what}")
    return 0


# ---- the subcommand ------------------------------------------------------------------------------------

def _replay_of(args: argparse.Namespace) -> Replay:
    from conformance.cli.common import check_numbers

    check_numbers(args)
    given = [bool(args.case_id), bool(args.sequence), bool(args.model)]
    if sum(given) != 1:
        raise UsageError("bisect needs exactly one of: a case id, --sequence FILE|ID..., --model GGUF")
    if args.case_id:
        from conformance.cli.repro import check_case

        check_case(args.case_id)  # a malformed id is the user's, not a build's: exit 2 before any replay
    sequence_cases = 0
    if args.sequence:
        from conformance.cli.repro import _sequence_case, _sequence_ids

        ids = _sequence_ids(args.sequence)
        for case_id in ids:
            _sequence_case(case_id)
        sequence_cases = len(ids)
    if args.model and not Path(args.model).is_file():
        raise UsageError(f"--model {args.model}: no such file")
    sequence = tuple(str(Path(s).resolve()) if Path(s).is_file() else s for s in args.sequence or ())
    model = str(Path(args.model).resolve()) if args.model else None
    return Replay(case_id=args.case_id, sequence=sequence, sequence_cases=sequence_cases, model=model,
                  device=args.device, case_timeout=args.case_timeout, threads=args.threads)


def _run_one(args: argparse.Namespace, replay: Replay) -> int:
    """``--run``: judge the build at --ggml-lib once, exit as git bisect run wants (0 good, 1 bad, 125 skip)."""
    if args.builds:
        raise UsageError("give --run with --ggml-lib DIR (one build), or --builds DIR... without --run")
    if not args.ggml_lib:
        raise UsageError("--run needs --ggml-lib DIR: the folder the build command writes the libraries to")
    if args.build_cmd:
        print(f"building: {args.build_cmd}", flush=True)
        built = subprocess.run(args.build_cmd, shell=True)
        if built.returncode != 0:
            print(f"skip (the build command exited {built.returncode})")
            return GIT_BISECT_SKIP
    folder = Path(args.ggml_lib).expanduser()
    try:
        build = identify(str(folder))
    except UsageError as exc:  # no libraries where the build should have put them: this commit cannot be tested
        print(f"skip ({exc})")
        return GIT_BISECT_SKIP
    verdict = probe_with(replay)(build)
    print(f"{build.label}  {verdict.line()}")
    if verdict.kind == SKIP:
        return GIT_BISECT_SKIP
    bad = verdict.kind == BAD
    if args.invert:
        bad = not bad
    return 1 if bad else 0


def cmd_bisect(args: argparse.Namespace) -> int:
    replay = _replay_of(args)
    if args.run:
        return _run_one(args, replay)
    if args.build_cmd or args.invert:
        raise UsageError("--build-cmd and --invert go with --run (one build at a time, for git bisect run)")
    if args.ggml_lib:
        raise UsageError("with --builds, each build is its own --ggml-lib; give --ggml-lib only with --run")
    if not args.builds:
        raise UsageError("bisect needs --builds DIR... (two or more ggml build folders), or --run --ggml-lib DIR")
    builds = order_builds([identify(given) for given in args.builds])
    if len(builds) < 2:
        raise UsageError(f"--builds names {len(builds)} distinct build folder(s); a bisection needs two or more")
    print(f"bisecting {replay.describe()} on {replay.device} over {len(builds)} builds "
          f"({builds[0].label} … {builds[-1].label})", flush=True)
    search = bisect_builds(builds, probe_with(replay),
                           show=lambda b, v: print(f"  probed {b.label}: {v.line()}", flush=True))
    return report(search)


def declare_parser(sub: Any) -> None:
    """This subcommand's arguments on ``conform``'s parser."""
    p = add_parser(sub, "bisect", help="find the build that broke (or fixed) a case, a sequence or a model",
                   description="Replay a case id, a sequence (--sequence) or a model (--model) on ggml builds "
                               "ordered by ggml version and llama.cpp build number (--builds), each in a "
                               "subprocess, and name the last good and the first bad build (or the last bad and "
                               "the first good one: a fix), with every probed build's verdict. A build that "
                               "will not load or declines the case is skipped. Exit status: 0 the boundary is "
                               "named, 1 it lies among skipped builds, 2 bad input (also: both ends agree, or "
                               "fewer than two builds could be judged). With --run: judge the build at "
                               "--ggml-lib once and exit 0 good, 1 bad, 125 skip, as git bisect run wants.")
    p.add_argument("case_id", nargs="?", default=None, help="the case id to replay (op or graph case)")
    p.add_argument("--sequence", nargs="+", default=None, metavar="FILE|ID",
                   help="replay these cases in order (as conform repro --sequence) instead of one case")
    p.add_argument("--model", default=None, metavar="GGUF",
                   help="judge this model's forward pass (as conform model) instead of a case")
    p.add_argument("--builds", nargs="+", default=None, metavar="DIR[=BUILD]",
                   help="ggml build folders (libggml-base, libggml; libllama for --model), in any order; the "
                        "build number is read from the file names (libggml.vulkan.b7836.so) or given as "
                        "DIR=b7836 where they do not carry it")
    p.add_argument("--device", default="ggml:CPU", metavar="SPEC", help="the device to replay on")
    p.add_argument("--run", action="store_true",
                   help="judge the one build at --ggml-lib and exit 0 good, 1 bad, 125 skip (git bisect run)")
    p.add_argument("--ggml-lib", default=None, metavar="DIR", help="with --run: the build folder to judge")
    p.add_argument("--build-cmd", default=None, metavar="CMD",
                   help="with --run: a shell command that builds the checked-out tree first; if it fails, 125")
    p.add_argument("--invert", action="store_true",
                   help="with --run: exit 0 when the case fails and 1 when it passes, to find a fix with "
                        "git bisect start --term-old=broken --term-new=fixed")
    limits(p)

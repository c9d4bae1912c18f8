"""``conform triage`` finds planted boundaries, and what it writes turns those failures into known ones.

The plug-in ``tests.plugins.faulty_triage:boundaries`` is wrong exactly for ADD with src0 at a byte offset
not a multiple of 16, SILU rows longer than 1024, and CONV_TRANSPOSE_1D at stride 3 (and nowhere else)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from device.expectation_file import load
from golden.case import parse_case_id

ROOT = Path(__file__).resolve().parent.parent
PLANTED = "tests.plugins.faulty_triage:boundaries"
CASES = {
    "ADD": ("ADD(type0=f32,ne0=[8,3,1,1],lay0=offs[1],type1=f32,ne1=[8,3,1,1],dst=f32,data=uniform:1)",
            [{"input": 0, "offset_misaligned": 16}]),
    "SILU": ("SILU(type=f32,ne=[2048,2,1,1],dst=f32,data=uniform:1)", [{"input": 0, "dim": 0, "min": 1025}]),
    "CONV_TRANSPOSE_1D": ("CONV_TRANSPOSE_1D(type0=f32,ne0=[3,2,2,1],type1=f32,ne1=[5,2,1,1],dst=f32,s0=3,"
                          "data=uniform:1)", [{"param": "s0", "equals": 3}]),
}


def _conform(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "conformance.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def triaged(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], Path]:
    tmp = tmp_path_factory.mktemp("triage")
    written = tmp / "vendor.toml"
    args = ["triage", "--device", PLANTED, "--budget", "300", "--out", str(tmp / "out"), "--json",
            "--write", str(written)]
    for case_id, _ in CASES.values():
        args += ["--case", case_id]
    done = _conform(*args)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads((tmp / "out" / "triage.json").read_text()), written


@pytest.mark.parametrize("op", sorted(CASES))
def test_triage_finds_the_planted_boundary_and_nothing_else(triaged: tuple[list[dict], Path], op: str) -> None:
    findings = {f["cluster"]["op"]: f for f in triaged[0]}
    finding = findings[op]
    assert finding["replay"]["alone, fresh process"] == "fail" and finding["replay"]["golden"] == "pass"
    assert finding["when"] == CASES[op][1]
    assert finding["accepted"] and finding["entry"]["devices"] == PLANTED
    assert any(not t["keeps_failure"] for t in finding["trials"])  # it did find passing variants


def test_the_written_entries_load_and_match_their_cases(triaged: tuple[list[dict], Path]) -> None:
    bugs = {b.op: b for b in load([triaged[1]])}
    assert set(bugs) == set(CASES)
    for op, (case_id, _) in CASES.items():
        assert bugs[op].matches(parse_case_id(case_id), PLANTED, "")
        assert bugs[op].source == str(triaged[1])
    moved = parse_case_id(CASES["ADD"][0].replace("offs[1]", "offs[4]"))  # 16 bytes: the planted fault is gone
    assert not bugs["ADD"].matches(moved, PLANTED, "")


VENDOR_TOML = """
[[bug]]
id = "planted-add-misaligned-src0"
devices = "tests.plugins.faulty_triage:boundaries"
op = "ADD"
reason = "planted: src0 at a byte offset not a multiple of 16 is off by one"
repro = "ADD(type0=f32,ne0=[8,3,1,1],lay0=offs[1],type1=f32,ne1=[8,3,1,1],dst=f32,data=uniform:1)"
[[bug.when]]
input = 0
offset_misaligned = 16

[[bug]]
id = "planted-silu-never-run"
devices = "tests.plugins.faulty_triage:boundaries"
op = "SILU"
reason = "planted: SILU rows longer than 1024 (not run here: stale)"
repro = "SILU(type=f32,ne=[2048,2,1,1],dst=f32,data=uniform:1)"
[[bug.when]]
input = 0
dim = 0
min = 1025
"""


def test_an_outside_expectations_file_turns_planted_failures_into_known_ones(tmp_path: Path) -> None:
    vendor = tmp_path / "vendor-repo" / "expectations"
    vendor.mkdir(parents=True)
    (vendor / "planted.toml").write_text(VENDOR_TOML)
    out = tmp_path / "run"
    done = _conform("run", "--device", PLANTED, "--op", "ADD", "--profile", "dev", "--hypothesis-seed", "7",
                    "--expectations", str(vendor), "--out", str(out), "--hypothesis-db", str(tmp_path / "db"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    cases = [r for r in records if r["type"] == "case"]
    known = [r for r in cases if r["outcome"] == "fail"]
    assert known, "the dev draws should include misaligned src0 views"
    source = str(vendor / "planted.toml")
    assert all(r["expected"]["id"] == "planted-add-misaligned-src0" and r["expected"]["source"] == source
               for r in known)
    header = next(r for r in records if r["type"] == "header")
    assert {e["id"] for e in header["expectations"]} == {"planted-add-misaligned-src0", "planted-silu-never-run"}
    html = (out / "report.html").read_text()
    assert "planted-add-misaligned-src0" in html and source in html
    assert "matches no case of the run" in html  # the SILU entry: stale


def test_the_environment_variable_loads_the_file_for_pytest(tmp_path: Path) -> None:
    (tmp_path / "planted.toml").write_text(VENDOR_TOML)
    results = tmp_path / "results.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "--device", PLANTED,
         "--op", "ADD", "--conform-profile", "dev", "--hypothesis-seed", "7", "--results", str(results),
         "--hypothesis-db", str(tmp_path / "db")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "CONFORM_EXPECTATIONS": str(tmp_path)})
    assert done.returncode == 0, done.stdout[-3000:]
    records = [json.loads(line) for line in results.read_text().splitlines()]
    failing = [r for r in records if r["type"] == "case" and r["outcome"] == "fail"]
    assert failing and all(r["expected"]["id"] == "planted-add-misaligned-src0" for r in failing)


@pytest.mark.parametrize(("text", "says"), [
    ("[[bug]]\nid = 'x'\n", "devices"),
    (VENDOR_TOML.replace("offset_misaligned", "offset_misalinged"), "unknown key"),
    (VENDOR_TOML.replace('input = 0\ndim = 0', 'input = 0\nlayout = "sideways"\ndim = 0'), "unknown layout kind"),
    ("[[bug]\n", "not valid TOML"),
])
def test_a_bad_expectations_file_is_one_line_and_exit_2(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    done = _conform("run", "--device", "golden", "--op", "ADD", "--expectations", str(path), "--out",
                    str(tmp_path / "out"), timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in done.stderr


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler here to build the generated program")
@pytest.mark.parametrize("case_id", [
    "SSM_CONV(type0=f32,ne0=[6,5,2,1],lay0=pad[0,2,0,0]/offs[4],type1=f32,ne1=[3,5,1,1],dst=f32,data=dense:3)",
    "CONV_TRANSPOSE_1D(type0=f32,ne0=[3,2,2,1],type1=f32,ne1=[5,2,1,1],lay1=perm[0,2,1,3],dst=f32,s0=2,"
    "data=uniform:1)",
    "SILU(type=f16,ne=[33,2,3,1],lay=perm[0,2,1,3],dst=f16,data=wide:2)",
])
def test_the_generated_c_program_builds_and_agrees_on_a_correct_backend(tmp_path: Path, case_id: str) -> None:
    """The C program against ggml's public API, built against the wheel's ggml (its CPU backend passes these)."""
    import libggml

    from conformance.data import as_stored
    from conformance.inputs import make_inputs
    from conformance.triage import build_line, c_program
    from golden import catalogue

    case = parse_case_id(case_id)
    inputs = [as_stored(x, t.dtype) for x, t in zip(make_inputs(case), case.inputs, strict=True)]
    exact = catalogue.golden_inputs(case, inputs)
    golden = catalogue.evaluate(case, exact)
    allowed = catalogue.tolerance_of(case).allowed(case, exact, golden, case.dst)
    source = c_program(case, "CPU", inputs, golden, allowed)
    assert source is not None
    path = tmp_path / "repro.c"
    path.write_text(source)
    root = Path(libggml.__file__).parent
    lib = str(root / "lib64")
    built = subprocess.run(build_line(lib, str(root / "include"), str(path)), shell=True, capture_output=True,
                           text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    ran = subprocess.run([str(tmp_path / "repro"), lib], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr[-2000:]
    assert f"0 of {int(np.prod(np.shape(golden)))} elements wrong on CPU" in ran.stdout


def test_a_spent_budget_is_said_and_nothing_is_proposed_as_accepted(tmp_path: Path) -> None:
    entries = tmp_path / "entries.toml"
    done = _conform("triage", "--device", PLANTED, "--case", CASES["ADD"][0], "--budget", "0.001", "--out",
                    str(tmp_path / "out"), "--json", "--write", str(entries))
    assert done.returncode == 0, done.stderr[-2000:]
    (finding,) = json.loads((tmp_path / "out" / "triage.json").read_text())
    assert any("time budget" in line for line in finding["undecided"])
    assert not finding["accepted"] and not entries.read_text().strip()
    assert "not decided:" in done.stdout


def test_clusters_are_unexpected_failures_by_device_op_outcome_and_dtypes() -> None:
    from conformance.triage import clusters_of

    def record(case_id: str, outcome: str, dtype: str = "f32", expected: bool = False) -> dict:
        r = {"device": "ggml:Vulkan0", "op": "SILU", "case_id": case_id, "outcome": outcome,
             "dtypes": {"src0": dtype, "dst": dtype}, "metrics": {"error_ratio": 3.0}}
        return r | ({"expected": {"id": "x"}} if expected else {})

    found = clusters_of([record("A", "fail"), record("B", "fail"), record("C", "crash"), record("D", "fail", "f16"),
                         record("E", "fail", expected=True), record("F", "pass")])
    assert sorted((c.outcome, c.signature, tuple(c.case_ids)) for c in found) == [
        ("crash", "dst=f32,src0=f32", ("C",)), ("fail", "dst=f16,src0=f16", ("D",)),
        ("fail", "dst=f32,src0=f32", ("A", "B"))]


def test_params_are_varied_where_an_optional_input_is_outside_the_signatures() -> None:
    """FLASH_ATTN_EXT with sinks has an F32 fourth input that no catalogue signature lists: its params are
    still learned from the signature its first sources match (on Vulkan's sink case none were varied)."""
    from conformance.triage import param_domain
    from golden.case import parse_case_id

    case = parse_case_id("FLASH_ATTN_EXT(type0=f32,ne0=[128,8,3,1],type1=f16,ne1=[128,2,1,1],type2=f16,"
                         "ne2=[64,2,1,1],type3=f32,ne3=[3,1,1,1],dst=f32,scale=1.5,max_bias=0.0,logit_softcap=50.0,"
                         "prec=f32,mask=False,sinks=True,data=wide:1)")
    domain = param_domain(case, draws=60)
    assert len(domain["scale"]) > 1 and set(domain["prec"]) == {"default", "f32"}

"""``conform triage`` finds planted boundaries, and what it writes turns those failures into known ones.

The plug-in ``tests.plugins.faulty_triage:boundaries`` is wrong exactly for ADD with src0 at a byte offset
not a multiple of 16, SILU rows longer than 1024, CONV_TRANSPOSE_1D at stride 3, and SQR where a value of
src0 exceeds 0.99 in magnitude (a value fault that a fixed data seed shows as a size boundary)."""

from __future__ import annotations

import json
import os
import re
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
# triaged with CASES: the f16 form of the SILU case (a second cluster that ends in the same features), and a
# value fault whose fixed-seed size variants look like boundaries on every dim
SILU_F16 = "SILU(type=f16,ne=[2048,2,1,1],dst=f16,data=uniform:1)"
SQR_VALUES = "SQR(type=f32,ne=[2,2,3,3],dst=f32,data=uniform:3)"


def _conform(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "conformance.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def triaged(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], Path, str]:
    tmp = tmp_path_factory.mktemp("triage")
    written = tmp / "vendor.toml"
    args = ["triage", "--device", PLANTED, "--budget", "300", "--out", str(tmp / "out"), "--json",
            "--write", str(written)]
    for case_id in [case_id for case_id, _ in CASES.values()] + [SILU_F16, SQR_VALUES]:
        args += ["--case", case_id]
    done = _conform(*args)
    assert done.returncode == 0, done.stderr[-2000:]
    text = done.stdout + (tmp / "out" / "triage.md").read_text()
    return json.loads((tmp / "out" / "triage.json").read_text()), written, text


def _finding(triaged: tuple[list[dict], Path, str], case_id: str) -> dict:
    return next(f for f in triaged[0] if f["smallest"] == case_id)


def _signature_tables(case_id: str) -> list[dict]:
    """What each entry adds to keep to its own cluster: each input's dtype and dst."""
    case = parse_case_id(case_id)
    return [{"input": i, "dtype": t.dtype} for i, t in enumerate(case.inputs)] + [{"dst": case.dst}]


@pytest.mark.parametrize("op", sorted(CASES))
def test_triage_finds_the_planted_boundary_and_nothing_else(triaged: tuple[list[dict], Path, str], op: str) -> None:
    finding = _finding(triaged, CASES[op][0])
    assert finding["replay"]["alone, fresh process"] == "fail" and finding["replay"]["golden"] == "pass"
    assert finding["when"] == CASES[op][1] + _signature_tables(CASES[op][0])
    assert finding["accepted"] and finding["entry"]["devices"] == PLANTED
    assert any(not t["keeps_failure"] for t in finding["trials"])  # it did find passing variants


def test_the_written_entries_load_and_match_their_cases(triaged: tuple[list[dict], Path, str]) -> None:
    bugs = {b.repro: b for b in load([triaged[1]])}
    assert set(bugs) == {case_id for case_id, _ in CASES.values()} | {SILU_F16}  # SQR: nothing decided it
    for case_id, _ in CASES.values():
        assert bugs[case_id].matches(parse_case_id(case_id), PLANTED, "")
        assert bugs[case_id].source == str(triaged[1])
    moved = parse_case_id(CASES["ADD"][0].replace("offs[1]", "offs[4]"))  # 16 bytes: the planted fault is gone
    assert not bugs[CASES["ADD"][0]].matches(moved, PLANTED, "")


def test_two_clusters_of_two_dtypes_get_an_entry_each(triaged: tuple[list[dict], Path, str]) -> None:
    """SILU of F32 and of F16 end in the same features: each is written, under its own id, and covers its
    own cluster only (main wrote one entry, `plugin-silu-src0-dim-0`, and dropped the other silently)."""
    f32, f16 = CASES["SILU"][0], SILU_F16
    ids = [_finding(triaged, c)["entry"]["id"] for c in (f32, f16)]
    assert len(set(ids)) == 2, ids
    bugs = {b.repro: b for b in load([triaged[1]])}
    assert [bugs[f32].id, bugs[f16].id] == ids
    assert len({b.id for b in bugs.values()}) == len(bugs)
    assert bugs[f32].matches(parse_case_id(f32), PLANTED, "") and not bugs[f32].matches(parse_case_id(f16), PLANTED, "")
    assert bugs[f16].matches(parse_case_id(f16), PLANTED, "") and not bugs[f16].matches(parse_case_id(f32), PLANTED, "")


def test_no_placeholder_survives_in_what_triage_prints(triaged: tuple[list[dict], Path, str]) -> None:
    """A plug-in has no ggml release: the prose names the device instead of saying `On ggml ?`."""
    text = triaged[2]
    lone_marks = re.findall(r".{0,30}(?<![\w?])\?(?![\w?]).{0,30}", text)
    assert not lone_marks, lone_marks[:5]
    for finding in triaged[0]:
        assert finding["paragraph"].startswith(f"On the device {PLANTED}, ")


def test_what_is_counted_is_said(triaged: tuple[list[dict], Path, str]) -> None:
    n = len(CASES) + 2
    assert f"{n} cluster(s) of unexpected failures: {n} distinct case(s) ({n} records; the report counts " \
           "records)" in triaged[2]
    assert "): 1 distinct case (1 record)" in triaged[2]
    for finding in triaged[0]:
        assert "1 distinct case (1 record)" in finding["paragraph"]


def test_a_value_fault_is_not_read_as_a_size_boundary(triaged: tuple[list[dict], Path, str]) -> None:
    """From data seed 3 every dim of the SQR case looks like a boundary (ne = 1 draws no value above 0.99);
    fresh data on each side breaks each, so no size is proposed and the entry is the cluster's signature."""
    finding = _finding(triaged, SQR_VALUES)
    assert not any("dim" in table for table in finding["when"]), finding["when"]
    assert finding["when"] == _signature_tables(SQR_VALUES) and not finding["accepted"]
    redrawn = [u for u in finding["undecided"] if "did not hold when the data was re-drawn" in u]
    assert {u.split(":")[0] for u in redrawn} == {f"src0 dim {d}" for d in range(4)}
    assert any(t["feature"].endswith("re-drawn") and t["passed"] for t in finding["trials"])


def test_a_real_size_boundary_holds_on_fresh_data(triaged: tuple[list[dict], Path, str]) -> None:
    finding = _finding(triaged, CASES["SILU"][0])
    (decision,) = [d for d in finding["decisions"] if d["feature"] == "src0 dim 0"]
    assert "held with 3 fresh data seeds on each side (ne[0] = 2048, 1025, 1024)" in decision["summary"]
    redrawn = [t for t in finding["trials"] if t["feature"] == "src0 dim 0 re-drawn"]
    assert len(redrawn) == 9 and len({parse_case_id(t["case_id"]).data_seed for t in redrawn}) == 3


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


def test_a_cluster_counts_distinct_cases_and_records_apart() -> None:
    """The report counts records (a case drawn twice, or replayed by the shrinker, is two); triage's
    clusters are of distinct cases: each says both."""
    from conformance.triage import clusters_of

    records = [{"device": "ggml:Vulkan0", "op": "SILU", "case_id": case_id, "outcome": "fail",
                "dtypes": {"src0": "f32", "dst": "f32"}} for case_id in ("A", "B", "A")]
    (cluster,) = clusters_of(records)
    assert (cluster.case_ids, cluster.records) == (["A", "B"], 3)
    assert cluster.counted() == "2 distinct cases (3 records)"


def _check_valid(case: object) -> None:
    """Raises where ggml would refuse the case (the op's validator) or the golden model cannot evaluate it."""
    from conformance.inputs import make_inputs
    from golden import catalogue

    spec = catalogue.get(case.op)  # type: ignore[attr-defined]
    inputs = make_inputs(case)  # type: ignore[arg-type]
    if spec.validate is not None:
        spec.validate(case, inputs)  # type: ignore[arg-type]
    catalogue.evaluate(case, catalogue.golden_inputs(case, inputs))  # type: ignore[arg-type]


class _SinksFault:
    """A bench wrong exactly when FLASH_ATTN_EXT has sinks; a case the golden validator refuses is a harness
    error, as on a real device (a sinks param off with the sinks input still there is one)."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def run(self, case: object) -> object:
        from types import SimpleNamespace

        self.ran.append(case.case_id)  # type: ignore[attr-defined]
        outcome, message = "fail", "wrong"
        try:
            _check_valid(case)
            if not case.param("sinks"):  # type: ignore[attr-defined]
                outcome, message = "pass", ""
        except ValueError as exc:
            outcome, message = "error", f"harness error: {exc}"
        return SimpleNamespace(outcome=SimpleNamespace(value=outcome), message=message, expected=None, metrics={})


def test_a_param_that_implies_an_input_adds_or_drops_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Turning FLASH_ATTN_EXT's sinks off drops the sinks input (main kept it: every such variant was refused,
    so sinks were never found to decide); turning the mask on adds an [n_kv, n_q] F16 mask before the sinks."""
    import conformance.triage as triage

    case = parse_case_id("FLASH_ATTN_EXT(type0=f32,ne0=[64,2,2,1],type1=f16,ne1=[64,4,1,1],type2=f16,"
                         "ne2=[64,4,1,1],type3=f32,ne3=[2,1,1,1],dst=f32,scale=0.125,max_bias=0.0,"
                         "logit_softcap=0.0,prec=f32,mask=False,sinks=True,data=uniform:1)")
    monkeypatch.setattr(triage, "param_domain", lambda c: {"sinks": [True, False], "mask": [False, True]})
    bench = _SinksFault()
    finding = triage.Finding(triage.Cluster("x", case.op, "fail", "", [case.case_id]), case.case_id)
    triage._param_step(case, triage.Triage(bench, "fail", 600), finding)  # type: ignore[arg-type]
    assert [d.predicate for d in finding.decisions] == [{"param": "sinks", "equals": True}]
    by_value = {(t.feature, t.value): parse_case_id(t.case_id) for t in finding.trials}
    no_sinks = by_value[("param sinks", "False")]
    assert len(no_sinks.inputs) == 3 and not no_sinks.param("sinks")
    masked = by_value[("param mask", "True")]
    assert [(t.dtype, t.ne) for t in masked.inputs[3:]] == [("f16", (4, 2, 1, 1)), ("f32", (2, 1, 1, 1))]
    for variant in (no_sinks, masked):
        _check_valid(variant)


@pytest.mark.parametrize("op_case", [
    "FLASH_ATTN_EXT(type0=f32,ne0=[64,2,2,1],type1=f16,ne1=[64,4,1,1],type2=f16,ne2=[64,4,1,1],type3=f16,"
    "ne3=[4,2,1,1],type4=f32,ne4=[2,1,1,1],dst=f32,scale=0.125,max_bias=0.0,logit_softcap=0.0,prec=f32,mask=True,"
    "sinks=True,data=uniform:1)",
    "SOFT_MAX(type0=f32,ne0=[16,3,2,1],type1=f32,ne1=[16,3,1,1],type2=f32,ne2=[2,1,1,1],dst=f32,scale=1.0,"
    "max_bias=0.0,mask=True,sinks=True,data=uniform:1)",
])
def test_size_variants_resize_the_inputs_a_param_implies(op_case: str) -> None:
    """q's heads (or the softmax input's planes) varied: the sinks follow, one per head, and the mask keeps
    n_kv and the rows (main left them: those variants were refused, never run)."""
    from conformance.triage import dim_variants

    case = parse_case_id(op_case)
    for _, variant in dim_variants(case, 0, 2)[:6]:
        variant = parse_case_id(variant.case_id)
        _check_valid(variant)
        assert variant.inputs[-1].ne == (variant.inputs[0].ne[2], 1, 1, 1)


def _proposal(build: str | None) -> dict:
    """_propose's entry for a one-case SILU cluster on Vulkan0 of ggml 0.9.7, with the device's build as given."""
    from conformance.triage import Cluster, Decision, Finding, _propose
    from results.outcome import Outcome

    case_id = "SILU(type=f32,ne=[2048,2,1,1],dst=f32,data=uniform:1)"
    finding = Finding(Cluster("ggml:Vulkan0", "SILU", "fail", "f32->f32", [case_id], 2.0, 1), case_id)
    finding.decisions = [Decision("ne0", {"input": 0, "dim": 0, "min": 1025}, "ne0 above 1024")]
    record = type("Record", (), {"metrics": {"error_ratio": 2.0}, "outcome": Outcome.FAIL})()
    _propose(finding, parse_case_id(case_id), "Vulkan0", "0.9.7", record, "ggml 0.9.7 Vulkan0", build)
    return finding.entry


def test_a_known_llama_build_keys_the_proposed_entry_on_that_build(tmp_path: Path) -> None:
    """The run header's llama_build (b8121) goes into the draft as build_min = build_max, beside the release:
    0.9.7 alone spans b8095 ... b8390, and only b8121 ran; where the build is unknown the draft names none."""
    from device.expectation_file import to_toml

    entry = _proposal("b8121")
    assert (entry["releases"], entry["build_min"], entry["build_max"]) == (["0.9.7"], "b8121", "b8121")
    assert "measured on llama.cpp b8121 only" in entry["reason"]
    path = tmp_path / "drafted.toml"
    path.write_text(to_toml(entry, [{"input": 0, "dim": 0, "min": 1025}]))
    (bug,) = load([path])
    case = parse_case_id(entry["repro"])
    assert bug.matches(case, "Vulkan0", "0.9.7", "b8121")
    assert not bug.matches(case, "Vulkan0", "0.9.7", "b8179") and not bug.matches(case, "Vulkan0", "0.9.7", None)
    for unknown in (None, "", "not-a-tag"):
        assert not {"build_min", "build_max", "builds"} & set(_proposal(unknown))

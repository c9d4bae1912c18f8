"""Model-shaped op cases: ``--from-model RUN`` seeds the op tier with a model run's node signatures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import find

from conformance.model_cases import load_signatures, near, neighbours
from golden.case import parse_case_id

ROOT = Path(__file__).resolve().parent.parent
RMS = "RMS_NORM(type=f32,ne=[64,6,1,1],dst=f32,eps=9.999999747378752e-06,data=uniform:0)"
# attention's KQ product as the tiny llama runs it: 2 KV heads broadcast over 4 query heads
KQ = ("MUL_MAT(type0=f16,ne0=[16,256,2,1],lay0=perm[0,2,1,3],type1=f32,ne1=[16,6,4,1],lay1=perm[0,2,1,3],dst=f32,"
      "data=uniform:0)")
CONT = "CONT(type=f32,ne=[16,4,6,1],lay=perm[0,2,1,3],dst=f32,ne=[64,6,1,1],data=uniform:0)"
RELU = "RELU(type=f32,ne=[64,1,1,1],dst=f32,data=uniform:0)"  # its neighbours: 63, 65, 32, 96, 128 wide


def _run_folder(tmp_path: Path, ids: list[str]) -> Path:
    folder = tmp_path / "model-run"
    folder.mkdir()
    (folder / "node-cases.txt").write_text("".join(f"{i}\n" for i in ids))
    return folder


def test_signatures_from_each_kind_of_path(tmp_path: Path) -> None:
    # the same node with other data is one signature; the run's order is kept
    folder = _run_folder(tmp_path, [RMS, KQ, RMS.replace("uniform:0", "dense:7"), CONT])
    from_folder = load_signatures(folder)
    assert [s.case.case_id for s in from_folder] == [RMS, KQ, CONT]
    assert [s.test_id for s in from_folder] == ["rms_norm-0", "mul_mat-1", "cont-2"]
    assert load_signatures(folder / "node-cases.txt") == from_folder
    model_json = tmp_path / "model.json"
    model_json.write_text(json.dumps({"nodes": [{"case_id": RMS}, {"case_id": ""}, {"case_id": KQ}]}))
    assert [s.case.case_id for s in load_signatures(model_json)] == [RMS, KQ]


@pytest.mark.parametrize(("content", "expect"), [
    (None, "no such file or folder"),
    ("", "names no judged node case"),
    ("NOT_AN_OP(type=f32,ne=[1,1,1,1],dst=f32,data=uniform:0)\n", "unknown op 'NOT_AN_OP'"),
    ("RMS_NORM(type=f32\n", "malformed case id"),
])
def test_bad_runs_are_one_line(tmp_path: Path, content: str | None, expect: str) -> None:
    path = tmp_path / "node-cases.txt"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=expect):
        load_signatures(path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no node-cases.txt or model.json"):
        load_signatures(tmp_path / "empty")


def test_neighbours_move_coupled_sizes_together() -> None:
    kq = parse_case_id(KQ)
    moved = neighbours(kq)
    assert moved, "the KQ product has buildable neighbours"
    for case in moved:
        a, b = case.inputs
        assert a.ne[0] == b.ne[0], case.case_id  # the shared dimension moves in both
        assert b.ne[2] % a.ne[2] == 0, case.case_id  # the KV heads still divide the query heads
    assert {c.inputs[1].ne[1] for c in moved} >= {5, 7}  # the prefill length moves by one either way
    # CONT's target shape moves with its input
    cont = neighbours(parse_case_id(CONT))
    assert cont and all(c.inputs[0].ne[2] == c.param("ne")[1] for c in cont)


def test_the_signature_is_the_simplest_draw_and_variations_follow() -> None:
    kq = parse_case_id(KQ)
    strategy = near(kq)
    assert find(strategy, lambda c: True) == kq  # what Hypothesis tries first and shrinks to
    other_shape = find(strategy, lambda c: c.inputs != kq.inputs)
    assert other_shape in neighbours(kq)
    other_data = find(strategy, lambda c: c.data_seed != kq.data_seed)
    assert other_data.inputs == kq.inputs


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # the ci profile: derandomized, so whether a neighbour with odd rows is drawn does not depend on luck
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "pytest", "conformance/test_from_model.py", "-q", "-p",
                           "no:cacheprovider", "--conform-profile", "ci", "--results", str(tmp_path / "r.jsonl"),
                           *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


def test_from_model_runs_each_signature_first_and_finds_a_fault_only_a_neighbour_has(tmp_path: Path) -> None:
    run = _run_folder(tmp_path, [RMS, RELU])
    # the planted fault aborts on RELU rows of odd length: the model's own RELU (64 wide) passes, 63 or 65 do not
    proc = _pytest(tmp_path, "--from-model", str(run), "--device", "tests.plugins.faulty:aborts_on_odd_rows")
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "1 failed, 1 passed" in proc.stdout, proc.stdout[-2000:]
    records = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    cases = [r for r in records if r.get("case_id")]
    first = {}
    for r in cases:
        first.setdefault(r["test_id"].split("[")[1], r["case_id"])
    assert first == {"rms_norm-0]": RMS, "relu-1]": RELU}
    crashed = [r for r in cases if r["outcome"] == "crash"]
    assert crashed and all(r["op"] == "RELU" and parse_case_id(r["case_id"]).inputs[0].ne[0] % 2 for r in crashed)


def test_without_from_model_the_test_skips_with_its_reason(tmp_path: Path) -> None:
    proc = _pytest(tmp_path, "-rs", "--device", "golden")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "1 skipped" in proc.stdout and "no --from-model RUN given" in proc.stdout


def test_conform_run_refuses_a_bad_run_in_one_line(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--from-model", str(tmp_path / "nope"),
                           "--device", "golden", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--from-model" in lines[0] and "no such file or folder" in lines[0], proc.stderr
    assert not (tmp_path / "out" / "results.jsonl").exists()
    plain = _pytest(tmp_path, "--from-model", str(tmp_path / "nope"))
    assert plain.returncode == 4 and "no such file or folder" in plain.stderr


def test_from_model_clamp_to_infinity_raises_no_numpy_warning(tmp_path: Path) -> None:
    """A model's CLAMP(min, inf) (the MoE weight norm's) judged with warnings as errors: the golden's
    comparison of an infinite result with an infinite bound warned (inf - inf) and failed the test."""
    run = _run_folder(tmp_path, ["CLAMP(type=f32,ne=[8,4,1,1],dst=f32,min=6.103515625e-05,max=inf,data=uniform:0)"])
    proc = _pytest(tmp_path, "--from-model", str(run), "--device", "golden", "-W", "error::RuntimeWarning")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "1 passed" in proc.stdout and "Warning" not in proc.stdout + proc.stderr, proc.stdout[-2000:]

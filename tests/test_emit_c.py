"""``conform repro --emit-c DIR``: the ggml calls a worker made, replayed by a standalone C program.

The program is built against the library folder the worker loaded (the libggml-python wheel's here,
with its ``include/`` headers) and run: it must replay every case the worker ran, in order, and end."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from device.ggml.lib import wheel_lib_dir

CASES = [
    "ADD(type0=f32,ne0=[4,3,1,1],type1=f32,ne1=[4,3,1,1],dst=f32,data=uniform:1)",
    "GRAPH[rms_norm_mul](type=f32,ne=[64,1,1,1],w=row,order=xw,eps=1e-06,data=uniform:5)",
]


def _headers() -> Path | None:
    wheel = wheel_lib_dir()
    include = wheel.parent / "include" if wheel is not None else None
    return include if include is not None and (include / "ggml-backend.h").exists() else None


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc here to build the emitted program")
@pytest.mark.skipif(_headers() is None, reason="the libggml-python wheel's include/ (ggml.h) is not installed")
def test_emitted_program_builds_and_replays_every_case(tmp_path: Path) -> None:
    out = tmp_path / "emitted"
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", "repro", "--device", "ggml:CPU",
                           "--sequence", *CASES, "--emit-c", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    source = (out / "repro.c").read_text()
    assert "ggml_rms_norm(" in source and "ggml_backend_graph_compute(" in source
    assert re.search(r"ggml_rms_norm\(ctx\d+, t\d+, 0x1\.0c6f7a0000000p-20f\)", source), \
        "eps=1e-06 is not the float32 hex literal of 1e-06"
    assert len(list((out / "blobs").iterdir())) >= 2  # every tensor_set's bytes

    build = subprocess.run(["sh", str(out / "build.sh")], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(out / "repro")], cwd=out, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert [ln for ln in lines if ln.startswith("case ")] == ["case 1 done", "case 2 done"]
    assert lines[-1] == "end of the recorded calls"


def test_emit_c_refuses_a_folder_in_use(tmp_path: Path) -> None:
    (tmp_path / "old.txt").write_text("x")
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", "repro", CASES[0], "--emit-c", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "not an empty folder" in proc.stderr

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


def test_the_trace_writes_exact_c_for_each_call(tmp_path: Path) -> None:
    """Handles become variables, floats their float32 hex literal, arrays and init params C literals,
    uploaded bytes a blob; a handle used after its free is flagged in the program."""
    import ctypes as C

    from device.ggml.lib import TENSOR_POINTER, GgmlInitParams
    from device.ggml.trace import Tracer

    tracer = Tracer(tmp_path)
    tracer.call("ggml_init", C.c_void_p, (GgmlInitParams,), (GgmlInitParams(1024, None, True),), 0x1000)
    tracer.call("ggml_new_tensor", TENSOR_POINTER, (C.c_void_p, C.c_int, C.c_int, C.POINTER(C.c_int64)),
                (0x1000, 0, 2, (C.c_int64 * 2)(3, 4)), 0x2000)
    tracer.call("ggml_scale", TENSOR_POINTER, (C.c_void_p, TENSOR_POINTER, C.c_float), (0x1000, 0x2000, 0.1), 0x3000)
    data = C.create_string_buffer(b"abcd", 4)
    tracer.call("ggml_backend_tensor_set", None, (TENSOR_POINTER, C.c_void_p, C.c_size_t, C.c_size_t),
                (0x3000, C.addressof(data), 0, 4), None)
    tracer.call("ggml_free", None, (C.c_void_p,), (0x1000,), None)
    tracer.forget(0x1000)
    tracer.call("ggml_new_tensor", TENSOR_POINTER, (C.c_void_p, C.c_int, C.c_int, C.POINTER(C.c_int64)),
                (0x1000, 0, 1, (C.c_int64 * 1)(5)), 0x4000)
    text = next(tmp_path.glob("calls.*.c.part")).read_text()
    assert "void *ctx1 = ggml_init((struct ggml_init_params){.mem_size = 1024, .mem_buffer = NULL, " \
           ".no_alloc = true});" in text
    assert "struct ggml_tensor *t1 = ggml_new_tensor(ctx1, 0, 2, (int64_t[]){3, 4});" in text
    assert "ggml_scale(ctx1, t1, 0x1.99999a0000000p-4f)" in text  # 0.1 as float32, exactly
    assert "ggml_backend_tensor_set(t2, bytes1, 0, 4);" in text
    assert [p.read_bytes() for p in (tmp_path / "blobs").iterdir()] == [b"abcd"]
    assert "NOTE: ctx1 was freed above and is used again here" in text


def test_tracing_off_leaves_the_bound_ctypes_functions() -> None:
    """Zero cost when off: without the variable, GgmlApi attributes are ctypes' own function pointers."""
    import os

    from device.ggml import lib as ggml_lib
    from device.ggml.trace import TRACE_ENV

    assert TRACE_ENV not in os.environ
    lib = ggml_lib.load()
    assert type(lib.ggml_init).__name__ == "_FuncPtr"  # ctypes' own, not the tracing wrapper
    assert type(lib.ggml_backend_graph_compute).__name__ == "_FuncPtr"

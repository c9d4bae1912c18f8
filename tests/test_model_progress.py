"""``conform model`` as a person follows it: live progress on stderr (a bar on a terminal, plain lines in a
log), ``--expectations`` honoured as in ``conform run``, and a failed run that leaves no --out behind and
ends its stderr with the one-line error.

Runs ggml 0.25.1's libllama from ``.backends/ggml-0.25.1-vulkan`` on its CPU device, each run in a fresh
interpreter.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from tests.model_tier_support import LIB, ROOT, needs_libllama

pytestmark = [needs_libllama, pytest.mark.slow]  # each test loads libllama in a fresh interpreter: 3-10 s apiece

MODEL = ["-m", "conformance.cli", "model", "--arch", "llama", "--no-cpu", "--ggml-lib", str(LIB)]
# lines of a backend's start-up banner (ggml's and libllama's own log)
BANNER = re.compile(r"load_backend|ggml_vulkan|llama_model_load|llama_context|print_info|load_tensors")


def _env(*extra_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("CONFORM_EXPECTATIONS", None)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, extra_path), str(ROOT), env.get("PYTHONPATH", "")])
    return env


def test_plain_progress_lines_reach_stderr_while_the_run_goes(tmp_path: Path) -> None:
    """Not a terminal: a line per stage and node counts, each read as it comes, before any result exists."""
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, *MODEL, "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env())
    assert proc.stderr is not None
    seen: list[str] = []
    while_running: list[str] = []
    for line in proc.stderr:  # blocks until the next line: the display flushes each one
        seen.append(line.rstrip("\n"))
        if not (out / "model.json").exists():  # the parent writes it only after the model process ended
            while_running.append(line.rstrip("\n"))
    stdout, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, "\n".join(seen[-20:]) + stdout[-2000:]
    # the nodes are judged and replayed as they are captured (memory flat in the steps): no judging stage after
    assert "progress: stage: capture run on CPU (every node observed, judged and replayed as it goes)" in \
        while_running, seen
    assert not any(line.startswith(("progress: stage: judging", "progress: judging")) for line in seen), seen
    steps = [line for line in while_running if line.startswith("progress: capture: step ")]
    assert [line.split()[3].rstrip(",") for line in steps] == ["0", "1", "2"], steps  # prefill, 2 decode steps
    captured = [line for line in while_running if line.startswith("progress: captured ")]
    assert len(captured) == 1 and " in 3 step(s)" in captured[0], captured
    total = int(captured[0].split()[2])
    result = json.loads((out / "model.json").read_text())
    assert total > 200 and max(n["index"] for n in result["nodes"]) < total  # every node judged was captured
    assert "progress: stage: fused run on CPU (no callback)" in while_running, seen
    assert not any(BANNER.search(line) for line in seen), seen


def test_a_terminal_gets_a_progress_bar(tmp_path: Path) -> None:
    """stderr on a pseudo-terminal: tqdm's bar with the stage, node i/N, the step, nodes/s and the ETA."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))  # a 160-column terminal
    proc = subprocess.Popen([sys.executable, *MODEL, "--out", str(tmp_path / "out")], stdout=subprocess.PIPE,
                            stderr=slave, text=True, cwd=ROOT, env=_env())
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: every writer of the terminal has closed it
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    stdout, _ = proc.communicate(timeout=300)
    screen = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0, screen[-2000:] + stdout[-2000:]
    # the capture: a count (the total is not known ahead), its rate and the decode step
    assert re.search(r"capture run on CPU: \d+node \[[\d:]+, +[\d.]+node/s, step 2\]", screen), screen[-2000:]
    assert "progress: stage:" not in screen  # no plain lines on a terminal


def _tamper_hook(folder: Path) -> Path:
    """A sitecustomize that plants a fault in the capture run of every interpreter of the test's run (the
    model runs in a spawned child): one element of each decode step's MUL output [64,1] gets +0.25."""
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(
        "import numpy as np\n"
        "import device.llama.capture as capture\n"
        "original = capture.run_model\n"
        "def tamper(node, write):\n"
        "    if node.op == 'MUL' and node.out.ne == (64, 1, 1, 1):\n"
        "        values = node.out.values().astype(np.float32)\n"
        "        values.flat[5] += 0.25\n"
        "        write(values)\n"
        "def run_model(*args, **kwargs):\n"
        "    if kwargs.get('capture'):\n"
        "        kwargs['tamper'] = tamper\n"
        "    return original(*args, **kwargs)\n"
        "capture.run_model = run_model\n")
    return folder


ENTRY = """
[[bug]]
id = "{id}"
devices = "CPU"
op = "MUL"
outcomes = {outcomes}
reason = "the test's planted fault in the decode steps' [64,1] MUL"
repro = "MUL(type0=f32,ne0=[64,1,1,1],type1=f32,ne1=[64,1,1,1],dst=f32)"
[[bug.when]]
input = 0
dim = 1
max = 1
"""


def test_expectations_explain_a_failing_node_only_with_its_outcome(tmp_path: Path) -> None:
    """An --expectations entry that covers the faulty nodes and lists ``fail`` makes them expected (the run
    passes); one that lists only ``crash`` explains no wrong value: the first of them is the FAIL."""
    env = _env(_tamper_hook(tmp_path / "hook"))
    covering = tmp_path / "covering.toml"
    covering.write_text(ENTRY.format(id="planted-mul", outcomes='["fail"]'))
    crash_only = tmp_path / "crash-only.toml"
    crash_only.write_text(ENTRY.format(id="planted-mul-crash", outcomes='["crash"]'))

    def model(out: str, expectations: Path) -> tuple[subprocess.CompletedProcess[str], dict]:
        proc = subprocess.run([sys.executable, *MODEL, "--out", str(tmp_path / out), "--expectations",
                               str(expectations)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
        assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
        return proc, json.loads((tmp_path / out / "model.json").read_text())

    proc, result = model("known", covering)
    planted = [n for n in result["nodes"] if n["op"] == "MUL" and n["shapes"].endswith("-> f32[64,1,1,1]")]
    # 5 per decode step: the attention and FFN norms of 2 layers, and the output norm
    assert len(planted) == 10, [n["shapes"] for n in result["nodes"] if n["op"] == "MUL"]
    assert all(n["status"] == "expected" and n["detail"].startswith("known bug planted-mul: ") for n in planted)
    assert proc.returncode == 0 and result["first_failure"] is None, proc.stdout[-2000:]
    proc, result = model("crash-only", crash_only)
    assert proc.returncode == 1, proc.stdout[-2000:]
    planted = [n for n in result["nodes"] if n["op"] == "MUL" and n["shapes"].endswith("-> f32[64,1,1,1]")]
    assert {n["status"] for n in planted} == {"FAIL"}
    assert result["first_failure"]["index"] == planted[0]["index"]


def _last_line_is_the_error(stderr: str, error: str) -> None:
    lines = stderr.strip().splitlines()
    assert lines and lines[-1].startswith("conform model: ") and error in lines[-1], stderr[-2000:]
    assert not any(BANNER.search(line) for line in lines[:-1]), stderr[-2000:]  # the last may quote the log


def test_a_failed_run_leaves_no_out_and_ends_with_the_one_line_error(tmp_path: Path) -> None:
    """A GGUF libllama refuses once the run has begun, and a device that is not there after the synthetic
    model was written into --out: exit 2, the error is stderr's last line with no banner, no --out left."""
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"not a model" * 8)
    out = tmp_path / "runs" / "bad"
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", "model", str(bad), "--ggml-lib", str(LIB),
                           "--no-cpu", "--out", str(out)], capture_output=True, text=True, cwd=ROOT, env=_env(),
                          timeout=300)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    # libllama refuses it when the vocabulary is read for the prompt, before any weight loads
    _last_line_is_the_error(proc.stderr, "cannot read its vocabulary: llama_model_load: error loading model")
    assert not out.exists() and not out.parent.exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("the user's own file\n")
    proc = subprocess.run([sys.executable, *MODEL, "--device", "ggml:NoSuchDevice0", "--out", str(kept)],
                          capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=300)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    _last_line_is_the_error(proc.stderr, "no ggml device 'NoSuchDevice0'")
    # the synthetic model it wrote is gone; a folder that was there stays, with what it held
    assert sorted(p.name for p in kept.iterdir()) == ["notes.txt"]

"""The model tier (``conform model``): libllama binding, node-by-node verdicts, localisation, bad input.

Runs ggml 0.25.1's libllama from ``.backends/ggml-0.25.1-vulkan`` (``scripts/setup-vulkan.sh`` copies it
there) on its CPU device, each run in a fresh interpreter (one ggml release per process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.model_tier_support import LIB, ROOT, conform_model, needs_libllama, subprocess_env

pytestmark = [needs_libllama, pytest.mark.slow]  # each test loads libllama in a fresh interpreter: 3-10 s apiece


_env = subprocess_env


def run_python(code: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=ROOT,
                          env=_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_synthetic_gguf_on_disk_is_judged_node_by_node(tmp_path: Path) -> None:
    from conformance.model_synthetic import write_tiny_model

    path = write_tiny_model(tmp_path / "user-model.gguf", "llama", "q4_0", seed=11)
    proc = conform_model(str(path), "--out", str(tmp_path / "out"), "--no-cpu")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads((tmp_path / "out" / "model.json").read_text())
    assert result["verdict"] == "pass"
    statuses = {n["status"] for n in result["nodes"]}
    assert statuses <= {"pass", "expected"}, statuses
    judged_ops = {n["op"] for n in result["nodes"] if n["status"] == "pass"}
    assert {"MUL_MAT", "ROPE", "SOFT_MAX", "RMS_NORM", "SET_ROWS", "GET_ROWS", "SWIGLU"} <= judged_ops
    # the prefill and two decode steps that read the KV cache were all captured
    assert {n["step"] for n in result["nodes"]} == {0, 1, 2}
    rows = {f["device"]: f for f in result["logits"]}
    assert set(rows) == {"node by node", "CPU"} and rows["CPU"]["n_tokens"] == 8
    assert rows["CPU"]["nmse"] <= result["logits_nmse_bar"]
    assert "first failing node" not in proc.stdout


def test_a_fault_on_the_device_is_named_at_its_node_and_nowhere_earlier(tmp_path: Path) -> None:
    """The eval callback overwrites one element of every MUL output of one shape (the decode steps' [64,1])
    on the device; the nodes after it compute from the changed values, as from a wrong kernel's output."""
    result = run_python(f"""
        import json
        from pathlib import Path
        import numpy as np
        from conformance.model import check_model
        from conformance.model_synthetic import write_tiny_model

        path = write_tiny_model(Path({str(tmp_path)!r}) / "m.gguf", "llama", "q8_0", seed=3)
        tampered = []
        def tamper(node, write):
            if node.op == "MUL" and node.out.ne == (64, 1, 1, 1):
                values = node.out.values().astype(np.float32)
                values.flat[5] += 0.25
                write(values)
                tampered.append(node.index)
        verdict = check_model(path, "CPU", {str(LIB)!r}, [[1, 5, 9, 17, 33, 65], [7], [100]],
                              Path({str(tmp_path / "out")!r}), with_cpu=False, tamper=tamper)
        print(json.dumps({{"tampered": tampered, "verdict": verdict.as_dict()}}))
    """)
    tampered, verdict = result["tampered"], result["verdict"]
    assert tampered, "no node of that shape was computed"
    first = verdict["first_failure"]
    assert first is not None and first["index"] == tampered[0] and first["op"] == "MUL"
    assert verdict["verdict"].startswith(f"FAIL at node {tampered[0]}")
    by_index = {n["index"]: n for n in verdict["nodes"]}
    # nowhere earlier, and every later node is judged from the device's own (changed) inputs, so only the
    # tampered nodes fail
    assert all(n["status"] in ("pass", "expected") for n in verdict["nodes"] if n["index"] < tampered[0])
    failing = sorted(n["index"] for n in verdict["nodes"] if n["status"] == "FAIL")
    assert failing == sorted(tampered)
    assert first["case_id"].startswith("MUL(type0=f32,ne0=[64,1,1,1],type1=f32,ne1=[64,1,1,1],dst=f32")
    import numpy as np

    with np.load(first["artefact"]) as npz:
        assert str(npz["case_id"]) == first["case_id"]
        assert abs(float(npz["device"].ravel()[5]) - float(npz["golden"].ravel()[5])) >= 0.24
    assert by_index[tampered[0]]["error_ratio"] > 1


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    import gguf
    import numpy as np

    not_gguf = tmp_path / "weights.bin"
    not_gguf.write_bytes(b"PK\x03\x04 not a model")
    unknown = tmp_path / "unknown-arch.gguf"
    writer = gguf.GGUFWriter(str(unknown), "nosucharch")
    writer.add_tensor("x", np.zeros(4, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    huge = tmp_path / "huge.gguf"  # sparse: 2 TiB that take no disk
    with huge.open("wb") as f:
        f.write(b"GGUF")
        f.truncate(2**41)
    cases = {
        (str(not_gguf),): "not a GGUF file",
        (str(huge),): "of weights do not fit in CPU's",
        (str(unknown),): "unknown model architecture: 'nosucharch'",
        ("--arch", "llama", "--device", "ggml:NoSuchDevice"): "no ggml device 'NoSuchDevice'",
        ("--arch", "llama", "--tokens", "1,x"): "not a comma-separated list",
    }
    for args, message in cases.items():
        proc = conform_model(*args, "--out", str(tmp_path / "out"))
        assert proc.returncode == 2, (args, proc.stdout[-500:], proc.stderr[-1500:])
        lines = [line for line in proc.stderr.splitlines() if line.startswith("conform model:")]
        assert len(lines) == 1 and message in lines[0], (args, proc.stderr[-1500:])
        assert "Traceback" not in proc.stderr
        assert not (tmp_path / "out" / "model.json").exists()


def test_nodes_the_golden_cannot_judge_leave_the_run_incomplete_and_say_why(tmp_path: Path) -> None:
    """With MUL_MAT taken out of the model tier's translations (as a new op ggml adds would be), every product
    is not judged, summarised in one line per reason, the golden's forward pass does not take the device's
    values in their place (the logits are not judged), and the run exits 3 unless the gap is accepted.
    The golden reads every weight format now, so the gap is made in the interpreters of this run alone: a
    sitecustomize on PYTHONPATH (the model runs in a spawned child, which starts a fresh interpreter)."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text("import device.llama.nodes as nodes\nnodes.TRANSLATIONS.pop('MUL_MAT')\n")
    env = dict(_env(), PYTHONPATH=os.pathsep.join([str(hook), _env()["PYTHONPATH"]]))

    def model(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "conformance.cli", "model", "--arch", "llama", "--weights",
                               "q4_1", "--no-cpu", *args, "--ggml-lib", str(LIB)], capture_output=True, text=True,
                              cwd=ROOT, env=env, timeout=300)

    proc = model("--out", str(tmp_path / "strict"))
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    not_judged = [line for line in proc.stdout.splitlines() if line.startswith("  not judged:")]
    # 2 layers x 7 weight products (q, k, v, o, gate, up, down) x 3 steps, the KQ and KQV products of each
    # layer and step, and output.weight in each step
    assert len(not_judged) == 1 and "no translation of ggml's MUL_MAT node" in not_judged[0], proc.stdout[-2000:]
    count = int(not_judged[0].split("not judged: ")[1].split(" ")[0])
    assert count == 57, not_judged
    assert (f"logits vs the golden's own forward pass: not judged: the golden's forward pass cannot compute {count} "
            "node(s)" in proc.stdout)
    assert f"verdict: incomplete: {count} of 150 computed nodes not judged; logits not judged" in proc.stdout
    result = json.loads((tmp_path / "strict" / "model.json").read_text())
    assert result["logits"] == [] and result["not_judged"][0]["nodes"] == count
    accepted = model("--out", str(tmp_path / "accepted"), "--allow-unjudged")
    assert accepted.returncode == 0, accepted.stdout[-2000:] + accepted.stderr[-2000:]
    assert (f"{count} of 150 computed nodes not judged; logits not judged: accepted with --allow-unjudged"
            in accepted.stdout)


@pytest.mark.parametrize("arch", ["qwen2", "qwen3", "qwen3moe", "mixtral", "gemma2", "gemma3"])
def test_every_synthetic_architecture_is_judged_node_by_node_on_the_cpu(tmp_path: Path, arch: str) -> None:
    """Every computed node of each architecture translates to an op case the golden judges (none left
    'not judged'); gemma2's GEGLU is the CPU's known F16-table deviation."""
    proc = conform_model("--arch", arch, "--weights", "q4_0", "--seed", "5", "--out", str(tmp_path), "--no-cpu")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads((tmp_path / "model.json").read_text())
    assert result["verdict"] == "pass"
    assert set(result["counts"]) <= {"pass", "expected"}, result["counts"]
    expected = {n["op"] for n in result["nodes"] if n["status"] == "expected"}
    assert expected <= ({"GEGLU"} if arch.startswith("gemma") else set())
    if arch in ("qwen3moe", "mixtral"):  # mixtral: llama with routed experts (arch llama in the file)
        assert {"MUL_MAT_ID", "ARGSORT", "SOFT_MAX", "GET_ROWS"} <= {n["op"] for n in result["nodes"]}


def test_the_capture_holds_each_weight_once(tmp_path: Path) -> None:
    """A weight read by a node in every decode step is one read-only array, not a copy per use; the
    activations and the KV cache are still read per node (they change)."""
    result = run_python(f"""
        import json
        from conformance.model_synthetic import write_tiny_model
        from device.llama.capture import run_model
        path = write_tiny_model({str(tmp_path / "m.gguf")!r}, "llama", "q8_0", 0)
        run = run_model({str(LIB)!r}, path, "CPU", [[1, 5, 9, 17], [3], [4]], capture=True)
        uses, arrays, writable = {{}}, {{}}, []
        for node in run.nodes:
            for src in node.srcs:
                if src is not None and src.name.endswith(".weight"):
                    uses[src.name] = uses.get(src.name, 0) + 1
                    arrays.setdefault(src.name, set()).add(id(src.raw))
                    writable += [src.name] if src.raw.flags.writeable else []
        kv = [id(s.raw) for n in run.nodes for s in n.srcs if s is not None and s.name.startswith("cache_k_l0")]
        print(json.dumps({{"uses": uses, "arrays": {{k: len(v) for k, v in arrays.items()}}, "writable": writable,
                          "kv_reads": len(kv), "kv_arrays": len(set(kv))}}))
    """)
    assert result["uses"]["blk.0.attn_q.weight"] == 3  # once per step
    assert set(result["arrays"].values()) == {1} and not result["writable"]
    assert result["kv_reads"] >= 3 and result["kv_arrays"] == result["kv_reads"]


def test_nodes_judged_as_the_capture_goes_are_not_kept_and_judge_as_a_kept_capture(tmp_path: Path) -> None:
    """``run_model(on_node=...)``, as check_model runs it: each node is judged and replayed inside the eval
    callback and then dropped (none of its tensors outlives the run: memory flat in the steps), with the same
    verdicts and golden logits as judging a capture kept whole; an exception in ``on_node`` is raised from
    run_model, not lost in the C callback."""
    result = run_python(f"""
        import gc, json, weakref
        from conformance import model
        from conformance.model_synthetic import write_tiny_model
        from device import known_bugs
        from device.llama.capture import run_model
        from device.llama.lib import load
        lib = load({str(LIB)!r})
        path = write_tiny_model({str(tmp_path / "m.gguf")!r}, "llama", "q8_0", 0)
        steps = [[1, 5, 9, 17], [3], [4], [5]]
        kept = run_model({str(LIB)!r}, path, "CPU", steps, capture=True)
        whole = [v.as_dict() for v in model.judge_nodes(kept, "CPU", lib.ggml.version, None)]
        logits, _ = model.golden_replay(kept)
        judge = model.NodeJudge("CPU", lib.ggml.version, None, known_bugs.all_known_bugs())
        replay = model.GoldenReplay()
        refs = []
        def on_node(node):
            judge.judge(node)
            replay.feed(node)
            refs.append(weakref.ref(node))
            refs.extend(weakref.ref(t.raw) for t in (node.out, *node.srcs)
                        if t is not None and not t.name.endswith(".weight"))
        streamed = run_model({str(LIB)!r}, path, "CPU", steps, capture=True, on_node=on_node)
        gc.collect()
        def failing(node):
            if node.index == 40:
                raise RuntimeError("planted in on_node")
        try:
            run_model({str(LIB)!r}, path, "CPU", steps, capture=True, on_node=failing)
            raised = ""
        except RuntimeError as exc:
            raised = str(exc)
        print(json.dumps({{"kept": len(kept.nodes), "n_nodes": streamed.n_nodes, "held": len(streamed.nodes),
                          "alive": sum(r() is not None for r in refs), "refs": len(refs),
                          "same_verdicts": [v.as_dict() for v in judge.verdicts] == whole, "verdicts": len(whole),
                          "same_logits": all((a == replay.logits[s]).all() for s, a in enumerate(logits))
                                         and len(replay.logits) == len(logits) == 4,
                          "raised": raised}}))
    """)
    assert result["n_nodes"] == result["kept"] > 200 and result["held"] == 0
    assert result["refs"] > result["n_nodes"] and result["alive"] == 0
    assert result["same_verdicts"] and result["verdicts"] > 100 and result["same_logits"]
    assert result["raised"] == "planted in on_node"

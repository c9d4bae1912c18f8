"""Models stored in the formats users download: every node of a synthetic model in each llama-quantize mix
(Q4_K_M, Q5_K_M, Q3_K_M, Q2_K, IQ2_XXS, gpt-oss's MXFP4 experts) and in each single block format is judged by
the golden, and a fault in one quantized product is named at its node.

Runs ggml 0.25.1's libllama from ``.backends/ggml-0.25.1-vulkan`` (``scripts/setup-vulkan.sh``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conformance.model_synthetic import MIXES, SINGLE_TYPES, WEIGHT_TYPES
from golden import dtypes, formats
from golden.catalogue import get
from tests.model_tier_support import LIB, ROOT, needs_libllama, subprocess_env

_env = subprocess_env


def test_the_dtype_table_holds_every_format_the_golden_reads() -> None:
    for name, fmt in formats.FORMATS.items():
        d = dtypes.DTYPES[name]
        assert (d.ggml_type, d.block_size, d.type_size, d.kind) == (fmt.ggml_type, fmt.block_size, fmt.type_size,
                                                                     "quant"), name
    assert set(dtypes.QUANT_TYPES) == set(formats.FORMATS)


def test_every_weight_format_has_its_own_product_row() -> None:
    """A quantized product never falls back to the float γ_K row, which has no room for the activations'
    conversion to the weights' vec_dot_type (Q8_1, Q8_K...)."""
    from golden.matmul import WEIGHT_ACTIVATIONS

    weights = [name for name, fmt in formats.FORMATS.items() if fmt.has_to_float]
    assert set(weights) == set(WEIGHT_ACTIVATIONS) | {"q4_0", "q8_0"}
    mul_mat, mul_mat_id = get("MUL_MAT"), get("MUL_MAT_ID")
    for w in weights:
        for src1 in ("f32", "f16"):
            assert mul_mat.tolerance_key("f32", f"{w}_{src1}_to_f32") == f"{w}_{src1}_to_f32"
        assert mul_mat_id.tolerance_key("f32", f"{w}_f32_i32_to_f32") == f"{w}_f32_i32_to_f32"


def _conform_model(tmp_path: Path, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", "model", *args, "--no-cpu", "--out",
                           str(tmp_path), "--ggml-lib", str(LIB)], capture_output=True, text=True, cwd=ROOT,
                          env=_env(), timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads((tmp_path / "model.json").read_text())


def _weight_types(path: Path) -> set[str]:
    import gguf

    reader = gguf.GGUFReader(str(path))
    return {gguf.GGMLQuantizationType(t.tensor_type).name.lower() for t in reader.tensors}


# every --weights the synthetic writer offers (model_synthetic.WEIGHT_TYPES): each mix with the types its
# rules put in a two-layer model, one with its experts in a K mix, gpt-oss's MXFP4 experts with a MoE arch,
# and each single format on llama
_MIX_RUNS: list[tuple[str, str, set[str]]] = [
    ("llama", "q4_k_m", {"q4_k", "q6_k"}),
    ("llama", "q5_k_m", {"q5_k", "q6_k"}),
    ("llama", "q3_k_m", {"q3_k", "q4_k", "q5_k", "q6_k"}),
    ("llama", "q2_k", {"q2_k", "q3_k", "q6_k"}),
    ("llama", "iq2_xxs", {"iq2_xxs", "iq3_xxs", "q4_k", "q5_k"}),
    ("qwen3moe", "q4_k_m", {"q4_k", "q6_k"}),
    ("mixtral", "mxfp4", {"mxfp4", "q8_0"}),
]
_WEIGHT_RUNS = _MIX_RUNS + [("llama", w, {w}) for w in SINGLE_TYPES]
_MOE = {"mixtral", "qwen3moe"}


def test_every_weight_type_of_the_synthetic_writer_has_a_model_run() -> None:
    """A mix or format added to model_synthetic is judged node by node below, or this fails."""
    assert {w for _, w, _ in _WEIGHT_RUNS} == set(WEIGHT_TYPES)
    assert all(arch in _MOE for arch, w, _ in _WEIGHT_RUNS if w == "mxfp4")  # its weights are experts
    for arch, weights, holds in _MIX_RUNS:  # the types named are the ones the mix's rules give
        default, overrides = MIXES[weights]
        assert default in holds and holds <= {default, *overrides.values()}, (arch, weights)


def _src0_types(nodes: list[dict], op: str) -> set[str]:
    return {m.group(1) for n in nodes if n["op"] == op and (m := re.search(r"type0=(\w+)", n["case_id"] or ""))}


@needs_libllama
@pytest.mark.slow
@pytest.mark.parametrize(("arch", "weights", "holds"), _WEIGHT_RUNS, ids=[f"{a}-{w}" for a, w, _ in _WEIGHT_RUNS])
def test_every_node_of_a_quantized_mix_is_judged(tmp_path: Path, arch: str, weights: str, holds: set[str]) -> None:
    """Exit 0 (3 is incomplete: a node the golden could not judge), every node passes, none `not judged`, and
    every weight type in the file is the src0 of a judged product."""
    result = _conform_model(tmp_path, "--arch", arch, "--weights", weights, "--seed", "4")
    (model,) = tmp_path.glob("tiny-*.gguf")
    assert holds == _weight_types(model) - {"f32"}
    assert result["not_judged"] == [] and not result["logits_not_judged"], result["not_judged"]
    assert result["verdict"] == "pass" and set(result["counts"]) == {"pass"}, result["counts"]
    assert {n["status"] for n in result["nodes"]} == {"pass"}
    products = _src0_types(result["nodes"], "MUL_MAT") | _src0_types(result["nodes"], "MUL_MAT_ID")
    assert holds <= products, products
    if arch in _MOE:
        assert _src0_types(result["nodes"], "MUL_MAT_ID") & holds
    else:
        assert not _src0_types(result["nodes"], "MUL_MAT_ID")


@needs_libllama
@pytest.mark.slow
def test_a_fault_in_one_quantized_product_is_named_at_its_node(tmp_path: Path) -> None:
    """One element of each Q6_K product (attn_v, ffn_down of Q4_K_M) is off by half the output's largest value;
    the first such node is the first failure, and only those nodes fail."""
    code = textwrap.dedent(f"""
        import json
        from pathlib import Path
        from conformance.model import check_model
        from conformance.model_synthetic import write_tiny_model

        path = write_tiny_model(Path({str(tmp_path)!r}) / "m.gguf", "llama", "q4_k_m", seed=2)
        tampered = []
        def tamper(node, write):
            if node.op == "MUL_MAT" and node.srcs[0] is not None and node.srcs[0].dtype == "q6_k":
                values = node.out.values().copy()
                values.flat[3] += 0.5 * float(abs(values).max())
                write(values)
                tampered.append(node.index)
        verdict = check_model(path, "CPU", {str(LIB)!r}, [[1, 5, 9, 17], [7]], Path({str(tmp_path / "out")!r}),
                              with_cpu=False, tamper=tamper)
        print(json.dumps({{"tampered": tampered, "verdict": verdict.as_dict()}}))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=_env(),
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    tampered, verdict = result["tampered"], result["verdict"]
    assert tampered, "no Q6_K product was computed"
    assert verdict["first_failure"]["index"] == tampered[0]
    failing = sorted(n["index"] for n in verdict["nodes"] if n["status"] == "FAIL")
    assert failing == sorted(tampered)


@needs_libllama
@pytest.mark.slow
def test_repro_judges_the_device_on_a_failing_nodes_own_inputs(tmp_path: Path) -> None:
    """`conform repro --inputs NODE.npz` hands the device exactly the node's tensors (a quantized product,
    its weights as raw blocks); a bad file is one line and exit 2."""
    import numpy as np

    code = textwrap.dedent(f"""
        import json
        from pathlib import Path
        from conformance.model import check_model
        from conformance.model_synthetic import write_tiny_model

        path = write_tiny_model(Path({str(tmp_path)!r}) / "m.gguf", "llama", "q4_0", seed=2)
        def tamper(node, write):
            if node.op == "MUL_MAT" and node.srcs[0] is not None and node.srcs[0].dtype == "q4_0":
                values = node.out.values().copy()
                values.flat[0] += 0.5 * float(abs(values).max())
                write(values)
        verdict = check_model(path, "CPU", {str(LIB)!r}, [[1, 5, 9, 17]], Path({str(tmp_path / "out")!r}),
                              with_cpu=False, tamper=tamper)
        print(json.dumps(verdict.as_dict()["first_failure"]))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=_env(),
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = json.loads(proc.stdout.strip().splitlines()[-1])
    npz = first["artefact"]
    seen = tmp_path / "seen"
    replay = subprocess.run([sys.executable, "-m", "conformance.cli", "repro", "--inputs", npz, "--device",
                             "tests.plugins.records_inputs:records_inputs"], capture_output=True, text=True,
                            cwd=ROOT, env=dict(_env(), CONFORM_TEST_INPUTS_DIR=str(seen)), timeout=300)
    # the device is right on those inputs: the failure was the tampered output, not the kernel
    assert replay.returncode == 0 and replay.stdout.startswith("PASS"), replay.stdout + replay.stderr
    assert "on the node's own inputs" in replay.stdout and first["case_id"] in replay.stdout
    (handed,) = sorted(seen.iterdir())
    with np.load(npz) as node, np.load(handed) as got:
        assert str(node["case_id"]).startswith("MUL_MAT(type0=q4_0")
        for name in ("input0", "input1"):
            assert np.array_equal(np.asarray(node[name]).ravel().view(np.uint8),
                                  np.asarray(got[name]).ravel().view(np.uint8)), name

    bad = tmp_path / "bad.npz"
    np.savez(bad, something=np.zeros(3))
    refused = subprocess.run([sys.executable, "-m", "conformance.cli", "repro", "--inputs", str(bad)],
                             capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=120)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "Traceback" not in refused.stderr

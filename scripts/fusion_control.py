"""Does a fused kernel actually run? Each graph case's fused run on one device, computed twice in two
worker processes: once as is and once with the backend's fusion switched off by its environment variable
(ggml-vulkan: GGML_VK_DISABLE_FUSION=1). Outputs that differ in their bits show the fused kernel ran (a
fused kernel rounds differently, or keeps the intermediate in registers); bitwise-equal outputs mean
fusion did not fire there, or fired with the same arithmetic; ggml-vulkan's perf logger
(GGML_VK_PERF_LOGGER=1) names the fused run's kernels, which settles which. The blocked run (every node an output) is
compared too: with fusion off it must equal the fused run bit for bit, or the harness' own control is off.

Usage: python scripts/fusion_control.py --device ggml:Vulkan0 --ggml-lib DIR [--env VAR=VALUE] ID...
(default ids: one decode and one prefill case per pattern the Vulkan backend fuses)."""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import tempfile

import numpy as np

DEFAULT_IDS = [
    "GRAPH[rms_norm_mul](type=f32,ne=[4096,1,1,1],w=row,order=xw,eps=1e-06,data=uniform:1)",
    "GRAPH[rms_norm_mul](type=f32,ne=[512,7,1,1],w=row,order=xw,eps=1e-05,data=uniform:2)",
    "GRAPH[rms_norm_mul](type=f32,ne=[512,7,1,1],w=full,order=wx,eps=1e-05,data=uniform:3)",
    "GRAPH[rms_norm_mul_add](type=f32,ne=[512,7,1,1],w=row,order=xw,eps=1e-05,b=row,data=uniform:4)",
    "GRAPH[add_rms_norm](type=f32,ne=[512,1,1,1],b=full,eps=1e-05,data=uniform:5)",
    "GRAPH[add_rms_norm_mul](type=f32,ne=[512,1,1,1],b=full,eps=1e-05,w=row,order=xw,data=uniform:6)",
    "GRAPH[add_chain](type=f32,ne=[512,7,1,1],n=2,b=full,data=uniform:7)",
    "GRAPH[add_chain](type=f32,ne=[512,7,1,1],n=8,b=full,data=uniform:8)",
    "GRAPH[mul_chain](type=f32,ne=[512,7,1,1],n=4,b=full,data=uniform:9)",
    "GRAPH[mul_mat_add](type=f32,k=256,m=64,n=1,bias=vec,order=mb,data=uniform:10)",
    "GRAPH[mul_mat_add](type=f32,k=256,m=64,n=7,bias=vec,order=mb,data=uniform:11)",
    "GRAPH[softcap](type=f32,ne=[512,7,1,1],cap=30.0,data=uniform:12)",
    "GRAPH[gate_up_glu](type=f32,k=256,f=128,n=1,data=uniform:13)",
]


def child(out: str, device_name: str, lib: str | None, ids: list[str]) -> None:
    from conformance.graphs import make_graph_inputs
    from device.registry import open_device
    from golden.graphs.case import parse_graph_id

    device = open_device(device_name, {"ggml_lib": lib} if lib else {})
    results: dict[str, object] = {}
    for text in ids:
        case = parse_graph_id(text)
        try:
            r = device.run_graph(case, make_graph_inputs(case))  # type: ignore[attr-defined]
            results[text] = {run: {k: np.asarray(v) for k, v in nodes.items()} for run, nodes in r.nodes.items()}
        except Exception as exc:
            results[text] = f"{type(exc).__name__}: {exc}"
    with open(out, "wb") as f:
        pickle.dump(results, f)


def run_child(args: argparse.Namespace, env_extra: dict[str, str], out: str) -> dict[str, object]:
    """Each case in a process of its own: ggml-vulkan 0.25.1 corrupts the heap when fused RMS_NORM graphs of
    other shapes follow each other in one process (repro/vulkan_rms_norm_fusion_heap.c)."""
    loaded: dict[str, object] = {}
    for text in args.ids:
        cmd = [sys.executable, __file__, "--child", out, "--device", args.device,
               *(["--ggml-lib", args.ggml_lib] if args.ggml_lib else []), text]
        done = subprocess.run(cmd, env=os.environ | env_extra | {"GGML_VK_PERF_LOGGER": "1"}, capture_output=True,
                              text=True)
        if done.returncode != 0:
            loaded[text] = f"worker exited {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1]}"
            continue
        with open(out, "rb") as f:
            loaded |= pickle.load(f)
        loaded[DISPATCHES + text] = fused_run_dispatches(done.stdout + done.stderr)
    return loaded


DISPATCHES = "dispatches:"


def fused_run_dispatches(log: str) -> str:
    """The fused run's kernels as ggml-vulkan's perf logger names them (the first of the three runs'
    timing blocks): a fused kernel is listed under a joined name (RMS_NORM_MUL, MUL_MAT_ADD), each with its dispatch
    count ("ADD: 4" for four ADDs that were not fused)."""
    blocks = [b for b in log.split("----------------") if "Vulkan Timings" in b]
    if not blocks:
        return "(no perf-logger output: not ggml-vulkan)"
    lines = [ln.split(" x ")[0].strip() for ln in blocks[0].splitlines()
             if ":" in ln and not ln.startswith(("Vulkan Timings", "Total"))]
    return "; ".join(lines)


def differ(a: np.ndarray, b: np.ndarray) -> str:
    if a.shape != b.shape:
        return f"shapes {a.shape} vs {b.shape}"
    bits = a.view(np.uint32 if a.dtype == np.float32 else np.uint16).astype(np.int64)
    other = b.view(np.uint32 if b.dtype == np.float32 else np.uint16).astype(np.int64)
    n = int(np.count_nonzero(bits != other))
    return "bitwise equal" if n == 0 else f"{n}/{a.size} elements differ (max {int(np.abs(bits - other).max())} ulp)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="ggml:Vulkan0")
    ap.add_argument("--ggml-lib")
    ap.add_argument("--env", default="GGML_VK_DISABLE_FUSION=1", help="what switches the backend's fusion off")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("ids", nargs="*")
    args = ap.parse_args()
    args.ids = args.ids or DEFAULT_IDS
    if args.child:
        child(args.child, args.device, args.ggml_lib, args.ids)
        return 0
    var, eq, value = args.env.partition("=")
    if not eq:
        print(f"fusion_control: --env must be VAR=VALUE, not {args.env!r}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        on = run_child(args, {}, os.path.join(tmp, "on.pkl"))
        off = run_child(args, {var: value}, os.path.join(tmp, "off.pkl"))
    fired = 0
    for text in args.ids:
        a, b = on.get(text), off.get(text)
        if not isinstance(a, dict) or not isinstance(b, dict):
            print(f"{text}\n    not compared: fusion on: {a if isinstance(a, str) else 'ran'}; "
                  f"off: {b if isinstance(b, str) else 'ran'}")
            continue
        for name, got in a["fused"].items():
            verdict = differ(got, b["fused"][name])
            control = differ(b["fused"][name], b["blocked"][name])
            fired += verdict != "bitwise equal"
            print(f"{text}\n    fused run, {name}: fusion on vs {args.env}: {verdict}; "
                  f"with {args.env}, fused vs blocked: {control}\n    kernels of the fused run: "
                  f"{on.get(DISPATCHES + text)}")
    print(f"fusion_control: {fired} of {len(args.ids)} cases' outputs change when fusion is switched off")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Judging model-sized cases: golden and verdict time and peak memory, next to the device's time.

The cases: every perf-mode shape of ``conform perf --shapes llama-7b`` (decode and prefill) and
issue 27's two model-scale ids (a 512² bilinear UPSCALE, attention over 16k keys). Each case runs
in a fresh process through the harness (conformance/harness.py, with its stage clock), so the
peak resident memory printed is that case's alone: the judging process's ``ru_maxrss`` (inputs as
stored, their float64 copies, the golden, the verdict; the device computes in its worker process),
or that of the child process a large case's golden or verdict runs in (conformance/limits.py), the
larger of the two; the child's pages inherited from the judging process count in both.

Printed per case: the harness's golden stage (inputs' float64 values and the golden), the verdict
stage, both as wall seconds and with the judging process's CPU seconds (the figure a loaded machine
disturbs least), the device stage (ggml:CPU's round trip through its worker) and the outcome.
Run: python benchmarks/bench_model_scale.py [--device ggml:CPU] [--threads N] [-k SUBSTRING] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

UPSCALE_512 = ("UPSCALE(type=f32,ne=[512,512,3,2],dst=f32,sf=2,mode=bilinear,align_corners=False,antialias=False,"
               "data=uniform:14146)")
ATTENTION_16K = ("FLASH_ATTN_EXT(type0=f32,ne0=[256,512,24,1],type1=f16,ne1=[256,16384,4,1],lay1=pad[0,16384,0,0],"
                 "type2=f16,ne2=[256,16384,4,1],lay2=pad[0,16384,0,0],type3=f16,ne3=[16384,512,1,1],dst=f32,"
                 "scale=0.0625,max_bias=0.0,logit_softcap=0.0,prec=f32,mask=True,sinks=False,data=uniform:19426)")
# issue 27's model-sized ops: an SD-UNet-like 3×3 IM2COL (128 channels at 128²), RWKV-6-like gated
# linear attention (64 heads of 64, 4 sequences of 512 tokens), Mamba-2.8B's SSM_CONV (d_inner 5120,
# 4 sequences of 1024 tokens) and a Q8_0 embedding table of llama-7b's size (the Q4_0 one is a perf case)
IM2COL_UNET = ("IM2COL(type0=f16,ne0=[3,3,128,128],type1=f32,ne1=[128,128,128,1],dst=f16,s0=1,s1=1,p0=1,p1=1,"
               "d0=1,d1=1,is_2d=True,data=uniform:1)")
GLA_RWKV = ("GATED_LINEAR_ATTN(type0=f32,ne0=[64,64,2048,1],type1=f32,ne1=[64,64,2048,1],type2=f32,"
            "ne2=[64,64,2048,1],type3=f32,ne3=[64,64,2048,1],type4=f32,ne4=[262144,4,1,1],dst=f32,scale=0.125,"
            "data=uniform:1)")
SSM_CONV_MAMBA = "SSM_CONV(type0=f32,ne0=[1027,5120,4,1],type1=f32,ne1=[4,5120,1,1],dst=f32,data=uniform:1)"
EMBEDDING_Q8_0 = "GET_ROWS(type0=q8_0,ne0=[4096,32000,1,1],type1=i32,ne1=[512,1,1,1],dst=f32,data=uniform:1)"


def cases() -> list[tuple[str, str]]:
    """(label, case id) of every case measured."""
    from conformance.perf import LLAMA_7B, llama

    out = [(f"{c.model} {c.phase} {c.role}", c.case.case_id) for c in llama(LLAMA_7B)]
    out.append(("upscale 512² bilinear ×2", UPSCALE_512))
    out.append(("attention 16k keys, 512 queries", ATTENTION_16K))
    out.append(("IM2COL 3×3, 128 channels at 128²", IM2COL_UNET))
    out.append(("GATED_LINEAR_ATTN 64×64 heads, 4×512 tokens", GLA_RWKV))
    out.append(("SSM_CONV d_inner 5120, 4×1024 tokens", SSM_CONV_MAMBA))
    out.append(("embedding 32000×4096 Q8_0, 512 tokens", EMBEDDING_Q8_0))
    return out


def measure_one(case_id: str, device: str, threads: int, timeout: float) -> dict[str, object]:
    """One case through the harness in this process: stage seconds, CPU seconds, peak RSS."""
    from conformance.harness import Harness
    from conformance.stages import Stage, StageClock
    from golden.case import parse_case_id

    case = parse_case_id(case_id)
    with tempfile.TemporaryDirectory() as out_dir:
        harness = Harness(device, {"threads": threads}, out_dir=out_dir, timeout=timeout, keep_artefacts=False)
        try:
            clock = StageClock(keep_laps=True)
            harness.clock = clock
            start = _judging_cpu()
            record = harness.evaluate(case)
            cpu = _judging_cpu() - start
            # before the device worker (also a child) ends and counts: the stages' children only
            peak_kib = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF,
                                                                          resource.RUSAGE_CHILDREN))
        finally:
            harness.close()
    assert clock.laps is not None
    seconds = {stage.value: sum(clock.laps[stage]) for stage in (Stage.INPUTS, Stage.GOLDEN, Stage.DEVICE,
                                                                 Stage.VERDICT)}
    return {"seconds": seconds, "cpu_s": cpu, "outcome": record.outcome.value,
            "error_ratio": (record.metrics or {}).get("error_ratio"), "peak_rss_mib": peak_kib / 1024,
            "ran_out": (record.extra or {}).get("ran_out")}


def _judging_cpu() -> float:
    """CPU seconds of this process and of its ended children (the stages' child processes; the
    device worker still runs, so it is not among them)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="ggml:CPU")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--case-timeout", type=float, default=600.0)
    ap.add_argument("-k", default="", help="only cases whose label or id contains this")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown (README)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure_one(args.child, args.device, args.threads, args.case_timeout)))
        return
    rows = []
    for label, case_id in cases():
        if args.k and args.k not in label and args.k not in case_id:
            continue
        proc = subprocess.run([sys.executable, __file__, "--child", case_id, "--device", args.device,
                               "--threads", str(args.threads), "--case-timeout", str(args.case_timeout)],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            print(f"{label}: the measuring process failed (exit {proc.returncode}): "
                  f"{proc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            continue
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        s = got["seconds"]
        rows.append((label, s["inputs"] + s["golden"], s["verdict"], got["cpu_s"], got["peak_rss_mib"], s["device"],
                     got["outcome"], got["error_ratio"]))
        if not args.markdown:
            r = rows[-1]
            print(f"{label:42s} golden {r[1]:6.2f} s  verdict {r[2]:6.2f} s  (judging CPU {r[3]:6.2f} s)  "
                  f"peak {r[4]:6.0f} MiB  {args.device} {r[5]:6.2f} s  {r[6]}", flush=True)
    if args.markdown:
        print(f"| case | golden s | verdict s | judging CPU s | peak RSS MiB | {args.device} s | outcome |")
        print("|---|---:|---:|---:|---:|---:|---|")
        for label, golden, verdict, cpu_s, rss, dev, outcome, _ in rows:
            print(f"| {label} | {golden:.2f} | {verdict:.2f} | {cpu_s:.2f} | {rss:.0f} | {dev:.2f} | {outcome} |")


if __name__ == "__main__":
    main()

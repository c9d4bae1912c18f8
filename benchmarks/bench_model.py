"""Time the model tier on a tiny synthetic model: capture every node, judge each against the golden, replay
the golden's forward pass, run the fused graph (target: under 60 s on ggml:CPU).

    python benchmarks/bench_model.py [--arch llama] [--weights q8_0] [--device CPU] [--ggml-lib DIR]
                                     [--size tiny|135m|1b] [--decode N] [--scale [--scale-1b]] [--flatness]

Prints the time of each stage, the node counts, the per-node judging rate and the peak RSS. The run goes
as ``conform model`` runs it: each node is judged and replayed by the golden inside the eval callback, as it
is captured, and then dropped.

``--flatness``: the run at ``--decode`` 8, 32, 128 and 256, each in a fresh child process; prints each one's
peak RSS (``wait4``'s figure for the child: the largest process of its tree) and the ratio 256/8 (target,
issue 38: at most 1.25, memory flat in the number of steps).

``--scale``: the same run, in a child process, at a 135M-class llama's dimensions (``--size 135m``:
30 layers, n_embd 576, 9/3 heads, n_ff 1536, vocab 49152; synthetic Q8_0 weights) with the default
prefill and 8 decode steps; prints wall seconds, CPU seconds of the whole process tree
(``RUSAGE_CHILDREN`` around the child: the GGUF writer is its child too), peak RSS (the largest
process of the tree), nodes judged and nodes/s. ``--scale-1b`` then does the same at
Llama-3.2-1B's dimensions (16 layers, n_embd 2048, 32/8 heads, n_ff 8192, vocab 128256; heavy:
only when the 135M run took under 3 min). Targets (issue 38): 135M ≤ 60 s CPU and ≤ 2 GiB; 1B
≤ 10 min and ≤ 8 GiB.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, uninstalled

from threadpoolctl import threadpool_limits  # noqa: E402

from conformance import model  # noqa: E402
from conformance.heap import reused_heap  # noqa: E402
from conformance.limits import STAGE_BLAS_THREADS  # noqa: E402
from conformance.model_synthetic import ARCHITECTURES, SIZES, WEIGHT_TYPES, write_tiny_model  # noqa: E402
from device import known_bugs  # noqa: E402
from device.llama.capture import CapturedNode, run_model  # noqa: E402
from device.llama.lib import load  # noqa: E402

PREFILL = [1, 5, 9, 17, 33, 65]  # conform model's default prefill for a model without a tokenizer


def steps(decode: int) -> list[list[int]]:
    """The prefill, then ``decode`` single-token steps of fixed ids (the capture here does not pick the
    golden's greedy token; the node count per step is the same)."""
    out, last = [PREFILL], PREFILL[-1]
    for _ in range(decode):
        last = (last + 7) % 128  # 72, 79, ...: the ids this benchmark always fed
        out.append([last])
    return out


FLATNESS_DECODES = (8, 32, 128, 256)
FLATNESS_TARGET = 1.25  # issue 38: peak RSS at --decode 256 within 1.25x of --decode 8


def peak_rss_mib() -> float:
    """The peak RSS of this process, or of its largest child where that is larger (the GGUF writer), MiB."""
    return max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)) / 1024


def child_peak(argv: list[str]) -> tuple[float, float, int, str]:
    """(peak RSS MiB, wall s, exit status, stdout) of ``argv`` run as a child: the peak is the child's own
    (``wait4``'s rusage: the largest process of its tree), not the largest of every child this process ran."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_maxrss / 1024, time.perf_counter() - t0, proc.returncode, out


def flatness(args: argparse.Namespace) -> int:
    """Peak RSS of the whole tier (capture, judging, golden replay, fused run) at each of FLATNESS_DECODES
    decode steps, each in a fresh child, and the ratio of the last to the first."""
    load_avg = "/".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"flatness: {args.size} {args.arch} {args.weights} on {args.device}, load average {load_avg}")
    peaks: dict[int, float] = {}
    for decode in FLATNESS_DECODES:
        peak, wall, rc, out = child_peak([sys.executable, __file__, "--size", args.size, "--decode", str(decode),
                                          "--weights", args.weights, "--device", args.device, "--ggml-lib",
                                          args.ggml_lib, "--arch", args.arch])
        nodes = next((line.split(": ", 1)[1].split(" nodes", 1)[0] for line in out.splitlines()
                      if " nodes captured" in line), "?")
        print(f"  --decode {decode:>4}: peak RSS {peak:7.1f} MiB, {nodes} nodes captured, wall {wall:6.1f} s"
              + (f", exit {rc}" if rc else ""))
        if rc:
            return rc
        peaks[decode] = peak
    first, last = FLATNESS_DECODES[0], FLATNESS_DECODES[-1]
    ratio = peaks[last] / peaks[first]
    print(f"  ratio {last}/{first}: {ratio:.3f} (target <= {FLATNESS_TARGET})")
    return 0


def scale_run(size: str, args: argparse.Namespace) -> tuple[float, float, float, int, int]:
    """(wall s, CPU s of the process tree, peak RSS GiB, nodes judged, exit status) of one child run
    at ``size`` with 8 decode steps."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--size", size, "--decode", "8", "--weights", "q8_0",
                           "--device", args.device, "--ggml-lib", args.ggml_lib, "--arch", args.arch],
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    peak_gib = after.ru_maxrss / 1024 / 1024  # KiB on Linux: the largest child so far, not a sum
    judged = 0
    for line in proc.stdout.splitlines():
        if " computed (" in line:
            judged = int(line.split(" computed (")[0].rsplit(",", 1)[1].split()[0])
    sys.stdout.write(proc.stdout)
    if proc.returncode:
        sys.stderr.write(proc.stderr[-2000:])
    return wall, cpu, peak_gib, judged, proc.returncode


def scale(args: argparse.Namespace) -> int:
    status = 0
    sizes = ["135m"] + (["1b"] if args.scale_1b else [])
    for size in sizes:
        wall, cpu, peak, judged, rc = scale_run(size, args)
        print(f"SCALE {size} {args.arch} q8_0 on {args.device}, default prefill + 8 decode steps: wall {wall:.1f} s, "
              f"CPU {cpu:.1f} s (process tree), peak RSS {peak:.2f} GiB, {judged} nodes judged, "
              f"{judged / max(wall, 1e-9):.0f} nodes/s (wall), exit {rc}")
        status = status or rc
        if size == "135m" and wall >= 180 and args.scale_1b:
            print("SCALE 1b skipped: the 135M run took 3 min or more")
            break
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="llama", choices=ARCHITECTURES)
    parser.add_argument("--weights", default="q8_0", choices=WEIGHT_TYPES)
    parser.add_argument("--device", default="CPU", help="ggml device name (CPU, Vulkan0)")
    parser.add_argument("--ggml-lib", default=str(Path(__file__).resolve().parent.parent / ".backends"
                                                  / "ggml-0.25.1-vulkan"))
    parser.add_argument("--size", default="tiny", choices=sorted(SIZES),
                        help="model dimensions: tiny (the test model), 135m or 1b (published models' dimensions)")
    parser.add_argument("--decode", type=int, default=2, help="decode steps after the prefill (default 2)")
    parser.add_argument("--scale", action="store_true", help="measure the 135M-class run in a child process")
    parser.add_argument("--flatness", action="store_true",
                        help="peak RSS at --decode 8, 32, 128 and 256 (each in a child process) and the ratio 256/8")
    parser.add_argument("--scale-1b", action="store_true", help="with --scale: then the 1B-class run (heavy)")
    args = parser.parse_args(argv)
    if args.scale:
        return scale(args)
    if args.flatness:
        return flatness(args)
    run_steps = steps(args.decode)
    shape = None if args.size == "tiny" else SIZES[args.size]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path = write_tiny_model(Path(tmp) / "m.gguf", args.arch, args.weights, shape=shape)
        lib = load(args.ggml_lib)
        t1 = time.perf_counter()
        # as conform model runs it: each node judged and replayed by the golden as it is captured, then dropped
        judge = model.NodeJudge(args.device, lib.ggml.version, None, known_bugs.all_known_bugs(), lib.ggml.build)
        replay = model.GoldenReplay()
        spent = [0.0, 0.0]  # judging, the golden's forward pass

        def on_node(node: CapturedNode) -> None:
            a = time.perf_counter()
            judge.judge(node)
            b = time.perf_counter()
            replay.feed(node)
            spent[0] += b - a
            spent[1] += time.perf_counter() - b

        with threadpool_limits(STAGE_BLAS_THREADS, user_api="blas"), reused_heap():
            captured = run_model(args.ggml_lib, path, args.device, run_steps, capture=True, on_node=on_node)
        t4 = time.perf_counter()
        t2, t3 = t4 - sum(spent), t4 - spent[1]  # the stages' times as if one after the other
        golden = [replay.logits[s] for s in sorted(replay.logits)]
        verdicts = judge.verdicts
        fused = run_model(args.ggml_lib, path, args.device, run_steps)
        t5 = time.perf_counter()
    figures = model.logits_figures(args.device, golden, fused.logits)
    statuses: dict[str, int] = {}
    for v in verdicts:
        statuses[v.status] = statuses.get(v.status, 0) + 1
    print(f"{args.size} {args.arch} {args.weights} on {args.device}: {captured.n_nodes} nodes captured, "
          f"{len(verdicts)} computed ({', '.join(f'{n} {s}' for s, n in sorted(statuses.items()))})")
    print(f"  write GGUF + load libllama {t1 - t0:7.2f} s")
    print(f"  capture run (eval callback) {t2 - t1:7.2f} s  (the judging and the golden's pass run inside it:")
    print(f"  judge every node            {t3 - t2:7.2f} s  ({len(verdicts) / max(t3 - t2, 1e-9):.0f} nodes/s)")
    print(f"  golden forward pass         {t4 - t3:7.2f} s   each node as it is captured)")
    print(f"  fused run (no callback)     {t5 - t4:7.2f} s")
    print(f"  total                       {t5 - t0:7.2f} s  (target < 60 s on CPU)")
    print(f"  logits vs golden: NMSE {figures.nmse:.3g}, KL mean {figures.kl_mean:.3g}, "
          f"top-1 {figures.top1_agreement:.1%}")
    print(f"  peak RSS {peak_rss_mib():.1f} MiB (this process and its children)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

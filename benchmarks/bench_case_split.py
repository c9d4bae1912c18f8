"""Where one case's time goes, from input building to record, for small, medium and model-sized cases.

Runs fixed case ids (no Hypothesis: the draw's share is ``bench_throughput.py``'s "generation"
line) through the harness on --device, with the stage clock attached (``conformance/stages.py``),
and prints per case size the median milliseconds of each stage: inputs, golden, device round trip
(through the worker process, read-back included), verdict, record. The sizes:

  small    ADD of 4,096 F32 elements (the elementwise cases of a dev run)
  medium   ADD of 256 x 256 F32, src1 broadcast by rows
  large    ADD of 16,384 x 1,024 F32 with padded and permuted layouts: a case the nightly profile's
           Hypothesis draws on the selection ``test_binary and (add or mul) and f32_f32`` (its
           padded allocation is ~600 MB), the one that dominates that selection's time
  model    MUL_MAT of a 7B llama's F16 4,096 x 4,096 attention weight by one token (decode)

Each size runs --repeat times (the large ones fewer: --repeat-large); medians per stage, and the
case's total, are printed, with the load average the machine had.

Run: python benchmarks/bench_case_split.py [--repeat 30] [--repeat-large 3] [--device ggml:CPU] [--sizes small,medium]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CASES = {
    "small": "ADD(type0=f32,ne0=[4096,1,1,1],type1=f32,ne1=[4096,1,1,1],dst=f32,data=uniform:1)",
    "medium": "ADD(type0=f32,ne0=[256,256,1,1],type1=f32,ne1=[256,1,1,1],dst=f32,data=uniform:1)",
    "large": "ADD(type0=f32,ne0=[16384,1024,1,1],lay0=pad[2,3,2,2]/offs[4],type1=f32,ne1=[1,1024,1,1],"
             "lay1=perm[0,2,3,1]/pad[3,2,3,3]/offs[4],dst=f32,data=dense:1929235)",
    "model": "MUL_MAT(type0=f16,ne0=[4096,4096,1,1],type1=f32,ne1=[4096,1,1,1],dst=f32,data=uniform:1)",
}
LARGE = ("large", "model")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30, help="runs of each small and medium case (default 30)")
    ap.add_argument("--repeat-large", type=int, default=3, help="runs of each large and model case (default 3)")
    ap.add_argument("--device", default="ggml:CPU")
    ap.add_argument("--sizes", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    args = ap.parse_args()
    sizes = [s for s in args.sizes.split(",") if s]
    unknown = [s for s in sizes if s not in CASES]
    if unknown:
        print(f"bench_case_split: unknown size {unknown[0]!r} (one of {', '.join(CASES)})", file=sys.stderr)
        return 2

    from conformance.harness import Harness
    from conformance.stages import Stage, StageClock
    from golden.case import parse_case_id
    from results.schema import ResultsWriter

    out = tempfile.mkdtemp(prefix="bench-case-split-")
    writer = ResultsWriter(os.path.join(out, "results.jsonl"))
    harness = Harness(args.device, {"threads": 1}, writer=writer, out_dir=out, timeout=600.0, keep_artefacts=False)
    stages = [Stage.INPUTS, Stage.GOLDEN, Stage.DEVICE, Stage.VERDICT, Stage.RECORD]
    print(f"{args.device}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'size':<8}{'runs':>5}" + "".join(f"{s.value:>10}" for s in stages) + f"{'total ms':>10}  outcome")
    try:
        for size in sizes:
            case = parse_case_id(CASES[size])
            runs = args.repeat_large if size in LARGE else args.repeat
            harness.evaluate(case)  # warm: the worker's first graph, imports, caches
            clock = StageClock(keep_laps=True)
            harness.clock = clock
            outcome = ""
            for _ in range(runs):
                clock.lap(Stage.PYTEST)  # between runs: nothing of the case's
                outcome = harness.evaluate(case).outcome.value
            harness.clock = None
            laps = clock.laps or {}
            # a stage lapped twice per case (record: building it, then writing it) is summed per case
            medians = []
            for stage in stages:
                k = len(laps[stage]) // runs
                per_case = [sum(laps[stage][i * k:(i + 1) * k]) for i in range(runs)] if k else [0.0]
                medians.append(statistics.median(per_case) * 1e3)
            print(f"{size:<8}{runs:>5}" + "".join(f"{m:>10.2f}" for m in medians)
                  + f"{sum(medians):>10.2f}  {outcome}", flush=True)
    finally:
        harness.close()
        writer.close()
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: this process {own:.0f} MiB (the worker's is in the results footer)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

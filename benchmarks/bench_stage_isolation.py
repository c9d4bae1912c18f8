"""What running a case's golden in a child process costs (conformance/limits.py), by case size.

A large case's golden and verdict each run in a forked child, so that the wall-clock limit can stop
one long NumPy call and a memory cap applies; a small case runs them in the process under a timer.
This prints, per case, the golden in the process and in a child (median of --repeat runs, wall
milliseconds, and CPU milliseconds of this process and its children together), and the overhead as
a share of the in-process time; then the same for whole cases through the harness on --device
(inputs, golden, device call, verdict), the figure that matters: from the threshold
(ISOLATE_FROM_ELEMENTS) up, the two forks should be a small share of the case.

Run: python benchmarks/bench_stage_isolation.py [--repeat N] [--device ggml:CPU]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def cases() -> list[tuple[str, str]]:
    side = {10: (32, 32, 1, 1), 16: (256, 256, 1, 1), 20: (1024, 1024, 1, 1), 22: (2048, 2048, 1, 1)}
    out = [(f"ABS 2^{k} elements", f"ABS(type=f32,ne=[{','.join(map(str, ne))}],dst=f32,data=uniform:1)")
           for k, ne in side.items()]
    out.append(("SOFT_MAX 4096 x 256", "SOFT_MAX(type0=f32,ne0=[4096,256,1,1],dst=f32,scale=1.0,max_bias=0.0,"
                                        "mask=False,sinks=False,data=uniform:1)"))
    out.append(("MUL_MAT 1024 x 1024 x 64", "MUL_MAT(type0=f32,ne0=[1024,1024,1,1],type1=f32,ne1=[1024,64,1,1],"
                                             "dst=f32,data=uniform:1)"))
    return out


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _median(run: Callable[[], object], repeat: int) -> tuple[float, float]:
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), _cpu()
        run()
        walls.append(time.perf_counter() - wall)
        cpus.append(_cpu() - cpu)
    return statistics.median(walls) * 1e3, statistics.median(cpus) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--device", default="ggml:CPU")
    args = ap.parse_args()

    from conformance import cases as suite
    from conformance.data import as_stored
    from conformance.inputs import make_inputs
    from conformance.limits import ISOLATE_FROM_ELEMENTS, StageLimits, run_stage
    from golden import catalogue
    from golden.case import parse_case_id

    suite.load_all()
    in_process, in_child = StageLimits(600.0, isolate_from=1 << 62), StageLimits(600.0, isolate_from=0)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"threshold: {ISOLATE_FROM_ELEMENTS:,} input elements; this process' peak RSS {rss:.0f} MiB")
    print(f"{'case':28s} {'elements':>10s}  {'in process ms (CPU)':>20s}  {'in a child ms (CPU)':>20s}  overhead")
    for label, case_id in cases():
        case = parse_case_id(case_id)
        xs = catalogue.golden_inputs(case, [as_stored(x, t.dtype) for x, t in
                                            zip(make_inputs(case), case.inputs, strict=True)])
        size = sum(x.size for x in xs)
        golden = partial(catalogue.evaluate, case, xs)
        here = _median(partial(run_stage, golden, "golden", in_process, size), args.repeat)
        child = _median(partial(run_stage, golden, "golden", in_child, size), args.repeat)
        share = (child[0] - here[0]) / here[0] * 100
        print(f"{label:28s} {size:10,d}  {here[0]:9.1f} ({here[1]:7.1f})  {child[0]:9.1f} ({child[1]:7.1f})  "
              f"{child[0] - here[0]:+7.1f} ms ({share:+.0f}%)", flush=True)
    whole_cases(args.device, args.repeat)



def whole_cases(device: str, repeat: int) -> None:
    """Whole cases through the harness, with the stages in the process and in children."""
    from conformance.harness import Harness
    from golden.case import parse_case_id

    harness = Harness(device, {"threads": 1}, timeout=600.0, keep_artefacts=False)
    try:
        print(f"\nwhole cases on {device}: {'in process ms (CPU)':>20s}  {'in children ms (CPU)':>20s}  overhead")
        for label, case_id in cases():
            case = parse_case_id(case_id)
            harness.isolate_from = 1 << 62
            here = _median(partial(harness.evaluate, case), repeat)
            harness.isolate_from = 0
            child = _median(partial(harness.evaluate, case), repeat)
            share = (child[0] - here[0]) / here[0] * 100
            print(f"{label:28s} {here[0]:9.1f} ({here[1]:7.1f})  {child[0]:9.1f} ({child[1]:7.1f})  "
                  f"{child[0] - here[0]:+7.1f} ms ({share:+.0f}%)", flush=True)
    finally:
        harness.close()


if __name__ == "__main__":
    main()

"""Time the model tier on a tiny synthetic model: capture every node, judge each against the golden, replay
the golden's forward pass, run the fused graph (target: under 60 s on ggml:CPU).

    python benchmarks/bench_model.py [--arch llama] [--weights q8_0] [--device CPU] [--ggml-lib DIR]

Prints the time of each stage, the node counts and the per-node judging rate.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, uninstalled

from conformance import model  # noqa: E402
from conformance.model_synthetic import ARCHITECTURES, WEIGHT_TYPES, write_tiny_model  # noqa: E402
from device.llama.capture import run_model  # noqa: E402
from device.llama.lib import load  # noqa: E402

STEPS = [[1, 5, 9, 17, 33, 65], [72], [79]]  # conform model's default prefill and decode ids


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="llama", choices=ARCHITECTURES)
    parser.add_argument("--weights", default="q8_0", choices=WEIGHT_TYPES)
    parser.add_argument("--device", default="CPU", help="ggml device name (CPU, Vulkan0)")
    parser.add_argument("--ggml-lib", default=str(Path(__file__).resolve().parent.parent / ".backends"
                                                  / "ggml-0.25.1-vulkan"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path = write_tiny_model(Path(tmp) / "m.gguf", args.arch, args.weights)
        load(args.ggml_lib)
        t1 = time.perf_counter()
        captured = run_model(args.ggml_lib, path, args.device, STEPS, capture=True)
        t2 = time.perf_counter()
        verdicts = model.judge_nodes(captured, args.device, load(args.ggml_lib).ggml.version, None)
        t3 = time.perf_counter()
        golden, _ = model.golden_replay(captured)
        t4 = time.perf_counter()
        fused = run_model(args.ggml_lib, path, args.device, STEPS)
        t5 = time.perf_counter()
    figures = model.logits_figures(args.device, golden, fused.logits)
    statuses: dict[str, int] = {}
    for v in verdicts:
        statuses[v.status] = statuses.get(v.status, 0) + 1
    print(f"tiny {args.arch} {args.weights} on {args.device}: {len(captured.nodes)} nodes captured, "
          f"{len(verdicts)} computed ({', '.join(f'{n} {s}' for s, n in sorted(statuses.items()))})")
    print(f"  write GGUF + load libllama {t1 - t0:7.2f} s")
    print(f"  capture run (eval callback) {t2 - t1:7.2f} s")
    print(f"  judge every node            {t3 - t2:7.2f} s  ({len(verdicts) / max(t3 - t2, 1e-9):.0f} nodes/s)")
    print(f"  golden forward pass         {t4 - t3:7.2f} s")
    print(f"  fused run (no callback)     {t5 - t4:7.2f} s")
    print(f"  total                       {t5 - t0:7.2f} s  (target < 60 s on CPU)")
    print(f"  logits vs golden: NMSE {figures.nmse:.3g}, KL mean {figures.kl_mean:.3g}, "
          f"top-1 {figures.top1_agreement:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

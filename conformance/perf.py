"""Perf mode: model-shaped cases, judged as usual and timed on the device (``conform perf``).

Each perf case is an ordinary case at a fixed shape of a real model layer (a 7B llama's decode and
prefill: MUL_MAT 4096×4096 at n = 1 and n = 512, SOFT_MAX and ROPE over 32 heads, RMS_NORM 4096,
FLASH_ATTN_EXT, GET_ROWS of the embedding table). The harness judges it against the golden model
(both verdicts from one run), then the device times its compute warm, repeatedly and synchronised
(``time_case``, see ``device/ggml/perf.py``). The case record gets a ``perf`` block
(``results/RESULTS.md``): the timings, the bytes the op moves and the FLOPs it does, the achieved
bandwidth and FLOP rate, the device's roofline where this module knows its peaks, and the
``ggml:CPU`` time of the same case (measured first, as the reference).
"""

from __future__ import annotations

import math
import os
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from conformance.harness import Harness
from device.ggml.perf import PerfSettings
from device.spec import DeviceSpec
from golden import catalogue, dtypes
from golden.case import Layout, OpCase, TensorSpec
from results.record import CaseRecord, FooterRecord, HeaderRecord

REFERENCE = DeviceSpec.parse("ggml:CPU")
PERF_SEED = 20240601  # fixed data: perf cases are the same case ids every run, so runs compare by id
DEFAULT_SETTINGS = PerfSettings()


@dataclass(frozen=True)
class PerfCase:
    """One model-shaped case: which layer op it stands for, in which phase."""

    model: str  # "llama-7b"
    phase: str  # "decode" (one new token) or "prefill" (a 512-token prompt)
    role: str  # what the op computes in the layer: "attn_q", "scores", "embedding"...
    case: OpCase

    @property
    def label(self) -> str:
        return f"{self.model} {self.phase} {self.role}"


@dataclass(frozen=True)
class Roofline:
    """A device's peaks: memory bandwidth and dense FLOP rate (the dtype its matmuls use)."""

    peak_gbs: float
    peak_tflops: float
    source: str


# Published peaks by the start of the device description ggml reports. Only devices whose data
# sheets state both figures; pass --roofline GBS,TFLOPS for another device.
ROOFLINES: dict[str, Roofline] = {
    "NVIDIA H200": Roofline(4800.0, 989.0, "NVIDIA H200 SXM data sheet: HBM3e 4.8 TB/s, FP16 tensor 989 TFLOPS dense"),
    "NVIDIA H100 80GB HBM3": Roofline(3350.0, 989.0, "NVIDIA H100 SXM data sheet: 3.35 TB/s, FP16 989 TFLOPS dense"),
    "NVIDIA A100-SXM4-80GB": Roofline(2039.0, 312.0, "NVIDIA A100 data sheet: 2039 GB/s, FP16 tensor 312 TFLOPS"),
}


def roofline_for(description: str, override: Roofline | None = None) -> Roofline | None:
    if override is not None:
        return override
    for prefix, peaks in ROOFLINES.items():
        if description.startswith(prefix):
            return peaks
    return None


# ---- the shapes -------------------------------------------------------------------------------

@dataclass(frozen=True)
class LlamaShape:
    """The sizes of a llama-family layer that its ops' shapes follow."""

    name: str
    n_embd: int
    n_head: int
    n_vocab: int
    n_ctx: int
    prompt: int  # prefill: tokens in the prompt
    kv_decode: int  # decode: tokens already in the KV cache

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


LLAMA_7B = LlamaShape("llama-7b", n_embd=4096, n_head=32, n_vocab=32000, n_ctx=4096, prompt=512, kv_decode=512)
# the same ops at toy sizes: what the harness' own tests and a quick look run
LLAMA_TINY = LlamaShape("llama-tiny", n_embd=256, n_head=4, n_vocab=1000, n_ctx=512, prompt=32, kv_decode=32)


def _case(op: str, inputs: Sequence[TensorSpec], params: dict[str, Any] | None = None, out: str = "f32",
          seed: int = PERF_SEED) -> OpCase:
    """An OpCase with params in the catalogue's order, checked as ``conform repro`` checks a case id."""
    spec = catalogue.get(op)
    given = params or {}
    ordered = tuple((name, given[name]) for name in spec.params if name in given)
    case = OpCase(op, tuple(inputs), ordered, out, distribution="uniform", data_seed=seed)
    spec.check_params(case)
    if spec.validate is not None:
        spec.validate(case, [])
    return case


def _seed_where(case: OpCase, wanted: Callable[[list[np.ndarray]], bool], tries: int = 64) -> OpCase:
    """The case at the first data seed from its own whose inputs are ``wanted``: the inputs stay a
    function of the case id (``conform repro`` rebuilds them), and still look like a model's."""
    from dataclasses import replace

    from conformance.inputs import make_inputs

    for seed in range(case.data_seed, case.data_seed + tries):
        candidate = replace(case, data_seed=seed)
        if wanted(make_inputs(candidate)):
            return candidate
    raise RuntimeError(f"no data seed in {tries} from {case.data_seed} gives {case.op} model-like inputs")


def _mask_open(n_q: int) -> Callable[[list[np.ndarray]], bool]:
    """Every query row of the mask sees every key (no −inf): attention does its full work, as in a
    model's decode step, rather than skipping masked blocks (the drawn masks are often sparse)."""
    return lambda inputs: bool(np.isfinite(inputs[3][..., :n_q, :]).all())


def llama(shape: LlamaShape) -> list[PerfCase]:
    """A llama layer's ops, decode (1 token, ``kv_decode`` cached) and prefill (a ``prompt``-token prompt)."""
    d, heads, hd = shape.n_embd, shape.n_head, shape.head_dim
    scale = float(np.float32(1.0 / math.sqrt(hd)))
    heads_first = Layout(perm=(0, 2, 1, 3))  # llama.cpp's q/k/v: [head_dim, n_tokens, n_head] views
    out: list[PerfCase] = []
    for phase, n, n_kv in (("decode", 1, shape.kv_decode), ("prefill", shape.prompt, shape.prompt)):
        def add(role: str, case: OpCase, phase: str = phase) -> None:
            out.append(PerfCase(shape.name, phase, role, case))

        add("attn_norm", _case("RMS_NORM", [TensorSpec("f32", (d, n, 1, 1))], {"eps": float(np.float32(1e-5))}))
        for wtype in ("f16", "q4_0"):
            add(f"attn_q {wtype}", _case("MUL_MAT", [TensorSpec(wtype, (d, d, 1, 1), name="blk.0.attn_q.weight"),
                                                     TensorSpec("f32", (d, n, 1, 1))]))
        add("rope q", _case("ROPE", [TensorSpec("f32", (hd, heads, n, 1)), TensorSpec("i32", (n, 1, 1, 1))], {
            "n_dims": hd, "mode": 0, "n_ctx_orig": shape.n_ctx, "freq_base": 10000.0, "freq_scale": 1.0,
            "ext_factor": 0.0, "attn_factor": 1.0, "beta_fast": 32.0, "beta_slow": 1.0, "freq_factors": False}))
        mask_rows = -(-n // 64) * 64  # GGML_KQ_MASK_PAD
        add("scores softmax", _case("SOFT_MAX", [TensorSpec("f32", (n_kv, n, heads, 1)),
                                                 TensorSpec("f16", (n_kv, mask_rows, 1, 1))],
                                    {"scale": scale, "max_bias": 0.0, "mask": True, "sinks": False}))
        attention = _case("FLASH_ATTN_EXT", [
            TensorSpec("f32", (hd, n, heads, 1), heads_first), TensorSpec("f16", (hd, n_kv, heads, 1), heads_first),
            TensorSpec("f16", (hd, n_kv, heads, 1), heads_first), TensorSpec("f16", (n_kv, mask_rows, 1, 1))],
            {"scale": scale, "max_bias": 0.0, "logit_softcap": 0.0, "prec": "default", "mask": True, "sinks": False})
        add("attention", _seed_where(attention, _mask_open(n)))
        add("embedding", _case("GET_ROWS", [TensorSpec("q4_0", (d, shape.n_vocab, 1, 1), name="token_embd.weight"),
                                            TensorSpec("i32", (n, 1, 1, 1))]))
    return out


SHAPE_SETS: dict[str, Callable[[], list[PerfCase]]] = {
    LLAMA_7B.name: lambda: llama(LLAMA_7B), LLAMA_TINY.name: lambda: llama(LLAMA_TINY),
}


# ---- bytes and FLOPs --------------------------------------------------------------------------

def tensor_bytes(t: TensorSpec) -> int:
    return dtypes.row_size(t.dtype, t.ne[0]) * t.ne[1] * t.ne[2] * t.ne[3]


def bytes_moved(case: OpCase, out_bytes: int) -> int:
    """Bytes the op must read and write at least: its inputs and output, except that GET_ROWS reads
    only the rows it gathers (an embedding lookup touches a few rows of a large table)."""
    if case.op == "GET_ROWS":
        table, rows = case.inputs[:2]
        gathered = rows.ne[0] * rows.ne[1] * rows.ne[2] * dtypes.row_size(table.dtype, table.ne[0])
        return gathered + tensor_bytes(rows) + out_bytes
    return sum(tensor_bytes(t) for t in case.inputs) + out_bytes


def flops(case: OpCase, out_elements: int) -> int | None:
    """The op's arithmetic as conventionally counted (a multiply-add is two), None where no count is
    meaningful (data movement). Elementwise counts are per output element and approximate."""
    op = case.op
    if op in ("MUL_MAT", "MUL_MAT_ID"):
        return 2 * case.inputs[0].ne[0] * out_elements  # K multiply-adds per output
    if op == "FLASH_ATTN_EXT":
        q, k, v = case.inputs[:3]
        scores = q.ne[1] * k.ne[1] * q.ne[2] * q.ne[3]
        return 2 * scores * (q.ne[0] + v.ne[0]) + 5 * scores  # q·k and p·v, and the softmax
    per_element = {"SOFT_MAX": 5, "RMS_NORM": 3, "NORM": 5, "ROPE": 3, "ADD": 1, "MUL": 1, "DIV": 1,
                   "SCALE": 2, "SILU": 4, "GELU": 8, "GELU_QUICK": 4}
    if op in per_element:
        return per_element[op] * out_elements
    return None


def perf_block(case: OpCase, timing: dict[str, Any], description: str, roofline: Roofline | None,
               reference_s: float | None, role: str) -> dict[str, Any]:
    """The record's ``perf`` block from the device's timings (``time_case``) and what is known of the case."""
    median = float(timing["median_s"])
    out_bytes = int(timing.get("output_bytes") or 0)
    out_elements = int(timing.get("output_elements") or 0)
    moved = bytes_moved(case, out_bytes)
    work = flops(case, out_elements)
    block: dict[str, Any] = {
        "role": role, "median_s": median, "min_s": timing["min_s"], "max_s": timing["max_s"],
        "mean_s": timing["mean_s"], "repeats": timing["repeats"], "warmup": timing["warmup"],
        "bytes": moved, "flops": work,
        "gb_per_s": moved / median / 1e9 if median > 0 else None,
        "gflop_per_s": work / median / 1e9 if work is not None and median > 0 else None,
    }
    if roofline is not None:
        bound = max(moved / (roofline.peak_gbs * 1e9), (work or 0) / (roofline.peak_tflops * 1e12))
        block["roofline"] = {"peak_gb_per_s": roofline.peak_gbs, "peak_tflop_per_s": roofline.peak_tflops,
                             "bound_s": bound, "efficiency": bound / median if median > 0 else None,
                             "source": roofline.source}
    if reference_s is not None:
        block["cpu_median_s"] = reference_s
        block["speedup_vs_cpu"] = reference_s / median if median > 0 else None
    return block


# ---- running ----------------------------------------------------------------------------------

@dataclass
class PerfResult:
    records: list[CaseRecord]

    @property
    def failing(self) -> list[CaseRecord]:
        return [r for r in self.records if r.failing and r.expected is None]


def open_harnesses(devices: Sequence[DeviceSpec], options: dict[str, Any], out_dir: str, run_id: str,
                   timeout: float) -> list[Harness]:
    """A harness per device, ``ggml:CPU`` (the reference) first whether or not it was asked for."""
    order = [REFERENCE] + [d for d in devices if d != REFERENCE]
    opened: list[Harness] = []
    try:
        for spec in order:
            opened.append(Harness(spec, options, out_dir=out_dir, timeout=timeout, run_id=run_id, worker="perf"))
    except BaseException:
        for harness in opened:
            harness.close()
        raise
    return opened


def run_perf(harnesses: Sequence[Harness], cases: Sequence[PerfCase], settings: PerfSettings = DEFAULT_SETTINGS,
             roofline: Roofline | None = None, timeout: float = 600.0,
             progress: Callable[[str], None] | None = None) -> PerfResult:
    """Judge and time every case on each harness' device, the first harness' (``ggml:CPU``) times
    being the reference the others' records carry. Records go to each harness' writer as they finish."""
    reference: dict[str, float] = {}
    records: list[CaseRecord] = []
    for index, harness in enumerate(harnesses):
        description = str(harness.inventory.get("description") or harness.device_spec.text)
        peaks = roofline_for(description, roofline)
        for item in cases:
            harness.current_test_id = f"perf::{item.label}"
            record = harness.evaluate(item.case, perf=_timer(harness, item, settings, timeout, description, peaks,
                                                            None if index == 0 else reference))
            if index == 0 and record.perf and "median_s" in record.perf:
                reference[item.case.case_id] = float(record.perf["median_s"])
            records.append(record)
            if progress is not None:
                progress(_progress_line(harness.device_spec, item, record))
    return PerfResult(records)


def _timer(harness: Harness, item: PerfCase, settings: PerfSettings, timeout: float, description: str,
           peaks: Roofline | None, reference: dict[str, float] | None,
           ) -> Callable[[OpCase, list[np.ndarray]], dict[str, Any]]:
    """What the harness calls once the device has answered the case: the device's timings, as a perf block."""

    def timed(case: OpCase, inputs: list[np.ndarray]) -> dict[str, Any]:
        reply = harness.runner.call("time_case", (case, inputs, settings), timeout, label=case.case_id)
        if not reply.answered or not isinstance(reply.result, dict):
            return {"role": item.role, "error": f"not timed: {reply.outcome}: {reply.message}"[:300]}
        ref = None if reference is None else reference.get(case.case_id)
        return perf_block(case, reply.result, description, peaks, ref, item.role)

    return timed


def _progress_line(spec: DeviceSpec, item: PerfCase, record: CaseRecord) -> str:
    perf = record.perf or {}
    if "median_s" in perf:
        rate = perf.get("gflop_per_s")
        speed = f"{rate:8.1f} GFLOP/s" if rate else f"{perf.get('gb_per_s') or 0:8.2f} GB/s"
        timing = f"{perf['median_s'] * 1e3:10.3f} ms  {speed}"
    else:
        timing = f"{'—':>13}  {perf.get('error', 'not timed')}"
    return f"{spec.text:<14} {item.label:<34} {record.outcome.value:<11} {timing}"


def header_record(devices: list[dict[str, Any]], run_id: str, argv: list[str]) -> dict[str, Any]:
    """A results header for the perf process (the pytest plug-in writes one per process alike)."""
    from conformance.plugin import HARNESS_VERSION
    from device.inventory import acl_devices

    return HeaderRecord(run_id=run_id, worker="perf", harness_version=HARNESS_VERSION, profile="perf",
                        hypothesis_seed=None, hypothesis_db=None, devices=devices, acl_devices=acl_devices(),
                        argv=argv).to_json()


def footer_record(result: PerfResult, run_id: str) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for r in result.records:
        counts[r.outcome.value] = counts.get(r.outcome.value, 0) + 1
    failing = sorted({r.test_id for r in result.failing})
    return FooterRecord(run_id=run_id, worker="perf", counts=counts, exitstatus=1 if failing else 0,
                        pytest_failed=len(failing), pytest_errors=0,
                        pytest_failed_tests=[{"test_id": t, "when": "call", "message": "a perf case failed its verdict"}
                                             for t in failing[:50]],
                        devices_end=[]).to_json()


def perf_main(devices: Sequence[DeviceSpec], options: dict[str, Any], results_path: str,
              settings: PerfSettings = DEFAULT_SETTINGS, roofline: Roofline | None = None, shapes: str = LLAMA_7B.name,
              ops: Sequence[str] = (), timeout: float = 600.0, run_id: str | None = None,
              progress: Callable[[str], None] | None = None) -> int:
    """``conform perf``'s work, appended to ``results_path``: a header, the perf cases on ``ggml:CPU``
    and every device, a footer. 0, or 1 when a case failed its verdict."""
    from results.schema import ResultsWriter

    cases = [c for c in SHAPE_SETS[shapes]() if not ops or c.case.op in ops]
    run_id = run_id or os.environ.get("CONFORM_RUN_ID") or uuid.uuid4().hex[:12]
    out_dir = os.path.dirname(os.path.abspath(results_path))
    harnesses = open_harnesses(devices, options, out_dir, run_id, timeout)
    try:
        with ResultsWriter(results_path) as writer:
            writer.write(header_record([h.inventory for h in harnesses], run_id, sys.argv))
            for harness in harnesses:
                harness.writer = writer
            result = run_perf(harnesses, cases, settings, roofline, timeout, progress)
            writer.write(footer_record(result, run_id))
    finally:
        for harness in harnesses:
            harness.close()
    return 1 if result.failing else 0

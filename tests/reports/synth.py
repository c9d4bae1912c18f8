"""Synthetic results files for the report tests and the benchmark.

``make_case`` builds one schema-shaped case record; ``make_cases`` spreads N of them over ops,
types, devices and outcomes deterministically; ``write_results`` writes header/cases/footer lines
with the real writer so the tests read exactly what the suite writes.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from results.schema import SCHEMA, SCHEMA_VERSION, dumps_record

OPS = (
    ("ADD", {"broadcast": [1, 2]}),
    ("MUL_MAT", {"k": [32, 64, 4096], "transposed": [False, True]}),
    ("SOFT_MAX", {"scale": [1.0, 0.125], "max_bias": [0.0, 8.0]}),
    ("ROPE", {"mode": [0, 2, 8], "n_dims": [64, 128]}),
    ("GELU_QUICK", {}),
    ("CPY", {}),
    ("FLASH_ATTN_EXT", {"hsk": [64, 128], "logit_softcap": [0.0, 30.0]}),
    ("RMS_NORM", {"eps": [1e-6, 1e-5]}),
)
DTYPE_PAIRS = (("f32", "f32"), ("f16", "f16"), ("f16", "f32"), ("q4_0", "f32"))


def header(run_id: str = "run-1", worker: str = "main", host: str = "host-a",
           devices: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    devices = devices or ["ggml:CPU"]
    record: dict[str, Any] = {
        "type": "header",
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "worker": worker,
        "harness_version": "0.1.0",
        "started": "2026-11-30T01:00:00+00:00",
        "host": host,
        "profile": "nightly",
        "hypothesis_seed": 1234,
        "devices": [
            {
                "spec": spec,
                "name": spec.split(":", 1)[-1],
                "description": f"synthetic {spec}",
                "backend": spec.split(":", 1)[-1].rstrip("0123456789"),
                "memory_free": 1 << 30,
                "memory_total": 1 << 31,
                "ggml_version": "0.9.4",
                "ggml_commit": "abc1234",
            }
            for spec in devices
        ],
        "acl_devices": [],
        "env": {"GGML_CANN_ACL_GRAPH": "1"},
        "argv": ["pytest", "-p", "ggml_conformance"],
    }
    record.update(extra)
    return record


def footer(run_id: str = "run-1", worker: str = "main", counts: dict[str, int] | None = None,
           exitstatus: int | None = 0, **extra: Any) -> dict[str, Any]:
    """A footer as the plug-in writes it; ``exitstatus=None`` leaves the field out (an older writer)."""
    record: dict[str, Any] = {"type": "footer", "run_id": run_id, "worker": worker,
                              "ended": "2026-11-30T01:12:30+00:00", "counts": counts or {}}
    if exitstatus is not None:
        record["exitstatus"] = exitstatus
    record.update(extra)
    return record


def make_case(
    op: str = "ADD",
    device: str = "ggml:CPU",
    outcome: str = "pass",
    supported: bool | None = True,
    src0: str = "f32",
    dst: str = "f32",
    params: dict[str, Any] | None = None,
    error_ratio: float | None = 0.1,
    index: int = 0,
    run_id: str = "run-1",
    worker: str = "main",
    message: str = "",
    case_id: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    params = params if params is not None else {}
    ne = [64 + index % 7, 4, 1, 1]
    param_text = "".join(f",{key}={value}" for key, value in params.items())
    ne_text = ",".join(map(str, ne))
    case_id = case_id or f"{op}(type={src0},ne=[{ne_text}],dst={dst}{param_text},data=uniform:{index})"
    record: dict[str, Any] = {
        "type": "case",
        "run_id": run_id,
        "worker": worker,
        "test_id": f"tests/test_ops.py::test_{op.lower()}[{device}]",
        "case_id": case_id,
        "device": device,
        "op": op,
        "dtypes": {"src0": src0, "dst": dst},
        "shapes": {"src0": ne, "dst": ne},
        "params": params,
        "layout": {"src0": "contiguous"},
        "distribution": "uniform",
        "data_seed": index,
        "supported": supported,
        "outcome": outcome,
        "metrics": None,
        "tolerance": {"rule": "nmse", "max_nmse": 1e-7, "reason": "f32 accumulate"},
        "message": message,
        "crash": None,
        "duration_s": 0.004,
        "repro": f"conform run --device {device} -k '{case_id}'",
        "artefact": None,
    }
    if outcome in ("pass", "fail") and error_ratio is not None:
        record["metrics"] = {
            "n": ne[0] * ne[1], "max_abs": error_ratio * 1e-3, "max_rel": error_ratio * 1e-4, "max_ulp": 3,
            "nmse": error_ratio * 1e-7, "nonfinite_mismatch": 0, "n_bad": 0 if outcome == "pass" else 5,
            "worst_index": [3, 1, 0, 0], "error_ratio": error_ratio,
        }
    if outcome == "fail":
        record["message"] = message or f"nmse {error_ratio * 1e-7:.3g} > 1e-07"
        record["artefact"] = f"artefacts/{op.lower()}-{index}.npz"
    if outcome in ("crash", "timeout"):
        record["crash"] = {"signal": "SIGSEGV" if outcome == "crash" else "SIGKILL", "exitcode": -11,
                           "stderr_tail": "ggml_cann: aclnn error 561000\nAbort"}
        record["message"] = message or f"device process {outcome}"
    if outcome == "unsupported":
        record["message"] = message or "supports_op returned false"
    if outcome == "error":
        record["message"] = message or "harness error: could not build inputs"
    record.update(extra)
    return record


def make_cases(n: int, devices: tuple[str, ...] = ("ggml:CPU", "ggml:CANN0"), seed: int = 0,
               fail_rate: float = 0.03, run_id: str = "run-1", extra_ops: int = 0) -> list[dict[str, Any]]:
    """N case records over ops, dtype pairs and devices, shaped like a real nightly run.

    The first device is the clean reference (everything it claims passes); on the others
    MUL_MAT and FLASH_ATTN_EXT fail at ``3 * fail_rate`` although claimed supported, ROPE f16->f32
    cannot say whether it is supported and always fails, q4_0 inputs are declined by every op but
    MUL_MAT and CPY, and a few CPY and SOFT_MAX cases crash, time out or hit a harness error.
    ``extra_ops`` adds ops named ``SYNTH_NN`` (every third one failing like MUL_MAT) to reach a
    real run's op count.
    """
    rng = random.Random(seed)
    cases = []
    ops = OPS + tuple((f"SYNTH_{i:02d}", {"p": [1, 2, 3], "scale": [0.5, 2.0]}) for i in range(extra_ops))
    failing_ops = {"MUL_MAT", "FLASH_ATTN_EXT"} | {f"SYNTH_{i:02d}" for i in range(0, extra_ops, 3)}
    per_device = len(ops) * len(DTYPE_PAIRS)
    for index in range(n):
        op, param_space = ops[index % len(ops)]
        src0, dst = DTYPE_PAIRS[(index // len(ops)) % len(DTYPE_PAIRS)]
        device = devices[(index // per_device) % len(devices)]
        params = {name: rng.choice(values) for name, values in param_space.items()}
        reference = device == devices[0]
        roll = rng.random()
        supported: bool | None = True
        if src0 == "q4_0" and op not in ("MUL_MAT", "CPY"):
            outcome, supported = "unsupported", False
        elif not reference and op == "ROPE" and (src0, dst) == ("f16", "f32"):
            outcome, supported = "fail", None
        elif not reference and op in failing_ops and roll < 3 * fail_rate:
            outcome = "fail"
        elif not reference and op in ("CPY", "SOFT_MAX") and roll > 1 - fail_rate / 5:
            outcome = rng.choice(("crash", "timeout", "error"))
        else:
            outcome = "pass"
        # Passing error ratios: most ops sit well inside the bound, RMS_NORM and SOFT_MAX close to it.
        closeness = {"RMS_NORM": 0.97, "SOFT_MAX": 0.8, "MUL_MAT": 0.5}.get(op, 0.2)
        ratio = rng.uniform(1.5, 50.0) if outcome == "fail" else closeness * rng.random() ** 3
        cases.append(make_case(op, device, outcome, supported, src0, dst, params, ratio, index,
                               run_id=run_id))
    return cases


def write_results(path: Path, cases: list[dict[str, Any]], *, complete: bool = True,
                  header_record: dict[str, Any] | None = None, truncate_tail: str | None = None,
                  footer_record: dict[str, Any] | None = None,
                  extra_records: list[dict[str, Any]] | None = None) -> Path:
    """Write a results file; ``truncate_tail`` appends a cut-off final line (no newline);
    ``extra_records`` (skip records...) go after the cases, before the footer.

    The default footer's exit status agrees with the cases: 1 when one failed (and no known bug
    the harness matched explains it), else 0.
    """
    devices = sorted({case["device"] for case in cases}) or ["ggml:CPU"]
    head = header_record or header(devices=devices, run_id=cases[0]["run_id"] if cases else "run-1")
    lines = [dumps_record(head)] + [dumps_record(case) for case in cases]
    lines += [dumps_record(record) for record in extra_records or []]
    if complete:
        failing = {case.get("test_id") for case in cases
                   if case["outcome"] in ("fail", "crash", "timeout", "error") and "expected" not in case}
        tail = footer_record or footer(run_id=head["run_id"], worker=head["worker"], exitstatus=1 if failing else 0,
                                       pytest_failed=len(failing), pytest_errors=0)
        lines.append(dumps_record(tail))
    text = "\n".join(lines) + "\n"
    if truncate_tail is not None:
        text += truncate_tail
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def gelu_quick_as_erf_gelu(path: Path, size: int, seed: int = 0) -> Path:
    """An ``.npz`` artefact as the harness saves it, for GELU_QUICK computed as erf-GELU (the bug the
    error-against-input plot is for)."""
    import math

    import numpy as np

    x = np.random.default_rng(seed).uniform(-8.0, 8.0, size).astype(np.float32)
    exact = x / (1.0 + np.exp(-1.702 * x.astype(np.float64)))
    erf = np.vectorize(math.erf, otypes=[np.float64])
    device = (0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))).astype(np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, input_0=x, golden=exact, device=device, case_id=np.array("GELU_QUICK(...)"))
    return path


def plugin_failure(index: int, size: int, device: str = "tests.plugins.faulty:erf_gelu_quick",
                   artefact: str | None = None, **extra: Any) -> dict[str, Any]:
    """A failing GELU_QUICK record of a plug-in device, shaped as the harness writes it."""
    case_id = f"GELU_QUICK(type=f32,ne=[{size},1,1,1],dst=f32,data=dense:{index})"
    record = make_case("GELU_QUICK", device=device, outcome="fail", error_ratio=15.0 + index, index=index,
                       case_id=case_id, artefact=artefact,
                       repro=f"conform repro '{case_id}' --device {device}",
                       tolerance={"ulp": 1.0, "reason": "ggml's CPU evaluates it through an F16 lookup table "
                                                        "(input and output rounded to F16)"})
    record["shapes"] = {"src0": [size, 1, 1, 1]}
    record["test_id"] = f"conformance/test_elementwise.py::test_unary[gelu_quick-f32-{device}]"
    record.update(extra)
    return record

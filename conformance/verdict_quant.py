"""Verdicts for quantized (Q4_0/Q8_0) destinations: CPY F32/F16 → Q, and same-type DUP/CONT.

* Same-type copies move whole blocks: the device bytes must equal the source bytes.
* Quantizing copies are judged in dequantized space: each element of the device's dequantized
  output may be at most one quant step of its block away from the exact source value (Q8_0:
  amax/127; Q4_0: |max|/8, which also covers Q4_0's saturation of opposite-sign values at q = 15).
  ``n_quants_differ`` reports how many quants differ from the golden quantizer with the rounding
  ggml's CPU uses (x86 from_float), so a backend that rounds ties differently is visible without
  failing.
"""

from __future__ import annotations

import numpy as np

from conformance.verdict import Metrics
from golden import quant
from golden.case import OpCase

BLOCK = 32


def _blocks(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.float64).reshape(-1, BLOCK)


def quant_step(exact: np.ndarray, qtype: str) -> np.ndarray:
    """One quant step per element: the spacing of the block's quantization grid."""
    blocks = _blocks(exact)
    amax = np.abs(blocks).max(axis=1, keepdims=True)
    step = amax / 127.0 if qtype == "q8_0" else amax / 8.0
    # the F16 scale moves every level by up to |q|·Δd ≤ amax·2^-11
    return np.broadcast_to(step + amax * 2.0**-11, blocks.shape).reshape(-1)


def _quant_values(raw: np.ndarray, qtype: str, n: int) -> np.ndarray:
    """The integer quants of raw blocks (scales dropped), for counting differences."""
    size = 34 if qtype == "q8_0" else 18
    blocks = np.asarray(raw, dtype=np.uint8).reshape(-1, size)[:, 2:]
    if qtype == "q8_0":
        return blocks.view(np.int8).reshape(-1)[:n].astype(np.int16)
    lo, hi = blocks & 0x0F, blocks >> 4
    return np.concatenate([lo, hi], axis=1).reshape(-1)[:n].astype(np.int16)


def judge_quantized(case: OpCase, raw_inputs: list[np.ndarray], golden: np.ndarray, device: np.ndarray) -> Metrics:
    qtype = case.out_dtype
    n = int(np.asarray(golden).size)
    m = Metrics(n=n)
    dev_raw = np.asarray(device, dtype=np.uint8).reshape(-1)
    expected_bytes = n // BLOCK * (34 if qtype == "q8_0" else 18)
    if dev_raw.size != expected_bytes:
        m.passed, m.error_ratio = False, float("inf")
        m.detail = f"device returned {dev_raw.size} bytes for {n} {qtype} elements (expected {expected_bytes})"
        return m
    if case.inputs[0].dtype == qtype:
        src = np.asarray(raw_inputs[0], dtype=np.uint8).reshape(-1)
        differ = np.flatnonzero(src != dev_raw)
        m.n_bad = int(differ.size)
        m.error_ratio = float("inf") if differ.size else 0.0
        m.passed = differ.size == 0
        if differ.size:
            m.worst_index = [int(differ[0])]
            m.detail = f"same-type {qtype} copy is not byte-exact: {differ.size} of {src.size} bytes differ, " \
                       f"first at byte {int(differ[0])}"
        return m
    exact = np.asarray(golden, dtype=np.float64).reshape(-1)
    got = quant.dequantize(dev_raw, qtype, n).astype(np.float64)
    err = np.abs(got - exact)
    allowed = quant_step(exact, qtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(allowed > 0, err / allowed, np.where(err > 0, np.inf, 0.0))
    ratio = np.where(np.isnan(ratio), np.inf, ratio)
    worst = int(np.argmax(ratio))
    m.error_ratio = float(ratio[worst])
    m.max_abs = float(np.nanmax(err)) if err.size else 0.0
    m.n_bad = int((ratio > 1).sum())
    denom = float(np.sum(exact * exact))
    m.nmse = float(np.sum(err * err)) / denom if denom > 0 else float(np.sum(err * err))
    m.worst_device, m.worst_golden = float(got[worst]), float(exact[worst])
    m.worst_index = [worst]
    reference = quant.quantize(exact.astype(np.float32).reshape(-1, BLOCK), qtype, rounding="x86")
    m.n_quants_differ = int((_quant_values(reference, qtype, n) != _quant_values(dev_raw, qtype, n)).sum())
    m.passed = m.n_bad == 0
    if not m.passed:
        m.detail = (f"element {worst} dequantizes to {m.worst_device!r}, but the source is {m.worst_golden!r}: "
                    f"{m.error_ratio:.3g} quant steps ({m.n_bad}/{n} elements beyond one step; "
                    f"{m.n_quants_differ} quants differ from ggml's quantizer)")
    return m

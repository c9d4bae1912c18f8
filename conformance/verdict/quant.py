"""Verdicts for quantized destinations (every type with a golden quantizer the copies draw, golden.dtypes
.DRAWN_COPY_TYPES): CPY F32/F16 → Q, same-type DUP/CONT, and SET_ROWS' written rows.

* Same-type copies move whole blocks: the device bytes must equal the source bytes.
* Quantizing copies are judged against the exact golden blocks, per block:

  - the scale: within one F16 ulp of ggml's ``f16(amax/127)`` (Q8_0) or ``f16(max/−8)`` (Q4_0, max the
    signed element of largest magnitude; where +amax and −amax both occur either sign is accepted);
  - each quant: the nearest integer to ``x/d`` (``x/d + 8``, saturated at 15, for Q4_0), with ``d``
    the unrounded scale (as ggml computes the quants) or the device's stored F16 scale, except within
    ``QUANT_SLACK`` of a half-way point, where either neighbour is accepted. That admits the paths
    ggml itself ships: round-half-away (``quantize_row_q8_0_ref``), round-half-even (x86
    ``from_float``), ``floor(x·(1/d) + 8.5)`` (Q4_0) and the ``127/amax`` reciprocal, whose products
    differ from ``x/d`` by a few f32 ulp. A device with another scale rule (amax/128) or rounding
    (truncation) fails.

  The other formats by the same rule, each with its own grid:

  - Q5_0: ``f16(max/−16)``, quants ``x/d + 16`` saturated at 31 (Q4_0's rule with 5 bits);
  - Q4_1/Q5_1: ``d = (max − min)/15`` (``/31``) and ``m = min``, each within one F16 ulp; quants the
    nearest integer to ``(x − min)/d`` in ``[0, 15]`` (``[0, 31]``), ``min`` exact or the stored ``m``;
  - IQ4_NL: the scale within one F16 ulp of the golden's on either ggml path (the CPU's ``from_float``
    tries one scale, ``ggml_quantize_chunk`` fifteen: both least-squares fits of the levels); each level
    the nearest ``kvalues_iq4nl`` entry to ``x/d0`` (``d0 = max/−127``, the first pass the CPU picks the
    levels in), to ``x/d`` with the fifteen-try fit (ggml_quantize_chunk) or with the stored scale, either
    entry within ``QUANT_SLACK`` of a tie.

  ``n_quants_differ`` still reports how many quants differ from ggml's x86 quantizer.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from conformance.verdict import Metrics
from golden import dtypes, formats
from golden.case import OpCase
from golden.formats.iquants import KVALUES_IQ4NL
from golden.formats.iquants import _group_scales as group_scales

BLOCK = 32
# how close to a half-way point x/d must be for either neighbour to count: the reciprocal paths are
# within a few f32 ulp of x/d (|x/d| ≤ 127 → 127·2^-21), with room to spare
QUANT_SLACK = 2.0**-12
F16_ULP_AT_ONE = 2.0**-10


def quant_step(exact: np.ndarray, qtype: str) -> np.ndarray:
    """One quant step per element: the spacing of the block's quantization grid (plus the F16 scale's
    rounding). A looser check than the exact-block verdict above; SET_ROWS into a quantized cache uses
    it where duplicate indices leave several admissible rows."""
    if qtype not in ("q4_0", "q8_0"):
        raise ValueError(f"no quant step for {qtype}: its SET_ROWS rows take the exact-block verdict")
    blocks = np.asarray(exact, dtype=np.float64).reshape(-1, BLOCK)
    amax = np.abs(blocks).max(axis=1, keepdims=True)
    step = amax / 127.0 if qtype == "q8_0" else amax / 8.0
    return np.broadcast_to(step + amax * 2.0**-11, blocks.shape).reshape(-1)


def _quant_values(raw: np.ndarray, qtype: str, n: int) -> np.ndarray:
    """The integer quants of raw blocks (scales dropped), for counting differences."""
    if qtype not in ("q4_0", "q8_0"):
        return _fields(raw, qtype)[-1].reshape(-1)[:n].astype(np.int16)
    size = 34 if qtype == "q8_0" else 18
    blocks = np.asarray(raw, dtype=np.uint8).reshape(-1, size)[:, 2:]
    if qtype == "q8_0":
        return blocks.view(np.int8).reshape(-1)[:n].astype(np.int16)
    lo, hi = blocks & 0x0F, blocks >> 4
    return np.concatenate([lo, hi], axis=1).reshape(-1)[:n].astype(np.int16)


# where the fields of the other formats lie (ggml-common.h): scale d, min m (or -1), qh (or -1), qs
_LAYOUT: dict[str, tuple[int, int, int, int]] = {
    "q4_1": (0, 2, -1, 4), "q5_0": (0, -1, 2, 6), "q5_1": (0, 2, 4, 8), "iq4_nl": (0, -1, -1, 2)}


def _fields(raw: np.ndarray, qtype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(d, m, quants) of raw ``qtype`` blocks: the F16 scale and min widened (m zero where the format has
    none), and the (blocks, 32) integer quants (IQ4_NL: the table index)."""
    d_at, m_at, qh_at, qs_at = _LAYOUT[qtype]
    blocks = np.asarray(raw, np.uint8).reshape(-1, dtypes.type_size(qtype))

    def f16(at: int) -> np.ndarray:
        return blocks[:, at:at + 2].copy().view("<f2").reshape(-1).astype(np.float64)

    qs = blocks[:, qs_at:qs_at + 16]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int16)
    if qh_at >= 0:
        q |= np.unpackbits(blocks[:, qh_at:qh_at + 4], axis=1, bitorder="little").astype(np.int16) << 4
    m = f16(m_at) if m_at >= 0 else np.zeros(blocks.shape[0])
    return f16(d_at), m, q


def judge_quantized(case: OpCase, raw_inputs: list[np.ndarray], golden: np.ndarray, device: np.ndarray) -> Metrics:
    qtype = case.dst
    n = int(np.asarray(golden).size)
    m = Metrics(n=n)
    dev_raw = np.asarray(device, dtype=np.uint8).reshape(-1)
    expected_bytes = n // BLOCK * dtypes.type_size(qtype)
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
    got = formats.dequantize(dev_raw, qtype, n).astype(np.float64)
    bad_scale, bad_quant = _check_blocks(exact, dev_raw, qtype)
    err = np.abs(got - exact)
    m.max_abs = float(np.nanmax(err)) if err.size else 0.0
    denom = float(np.sum(exact * exact))
    m.nmse = float(np.sum(err * err)) / denom if denom > 0 else float(np.sum(err * err))
    reference = formats.quantize(exact.astype(np.float32).reshape(-1, BLOCK), qtype, rounding="x86")
    m.n_quants_differ = int((_quant_values(reference, qtype, n) != _quant_values(dev_raw, qtype, n)).sum())
    bad = np.repeat(bad_scale, BLOCK) | bad_quant
    m.n_bad = int(bad.sum())
    m.passed = m.n_bad == 0
    m.error_ratio = float("inf") if m.n_bad else 0.0
    worst = int(np.argmax(bad)) if m.n_bad else int(np.argmax(err))
    m.worst_index = [worst]
    m.worst_device, m.worst_golden = float(got[worst]), float(exact[worst])
    if not m.passed:
        block = worst // BLOCK
        what = ("its scale (or min) is off by more than one F16 ulp of ggml's" if bad_scale[block]
                else "a quant is not the nearest grid point to x/d")
        m.detail = (f"element {worst} dequantizes to {m.worst_device!r} (source {m.worst_golden!r}): in block "
                    f"{block} {what}; {int(bad_scale.sum())}/{bad_scale.size} blocks with a wrong scale, "
                    f"{int(bad_quant.sum())}/{n} wrong quants ({m.n_quants_differ} differ from ggml's quantizer)")
    return m


def _scales(raw: np.ndarray, qtype: str) -> np.ndarray:
    size = 34 if qtype == "q8_0" else 18
    return np.asarray(raw, np.uint8).reshape(-1, size)[:, :2].copy().view(np.float16).reshape(-1).astype(np.float64)


def block_elements_ok(exact: np.ndarray, dev_raw: np.ndarray, qtype: str) -> np.ndarray:
    """Per element of ``exact`` (flat, whole blocks): does the device's block pass the exact-block verdict."""
    bad_scale, bad_quant = _check_blocks(np.asarray(exact, np.float64).reshape(-1), dev_raw, qtype)
    return ~(np.repeat(bad_scale, BLOCK) | bad_quant)


def _check_blocks(exact: np.ndarray, dev_raw: np.ndarray, qtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Per block: is the device's scale wrong; per element: is its quant wrong (see the module doc)."""
    if qtype in _RULES:
        return _RULES[qtype](exact.reshape(-1, BLOCK), dev_raw)
    blocks = exact.reshape(-1, BLOCK)
    amax = np.abs(blocks).max(axis=1)
    d_dev = _scales(dev_raw, qtype)
    wanted: list[np.ndarray]
    if qtype == "q8_0":
        wanted = [np.asarray(amax / 127.0, np.float16).astype(np.float64)]
    else:  # the signed element of largest magnitude, divided by −8; either sign where both occur
        wanted = [np.asarray(-amax / 8.0, np.float16).astype(np.float64),
                  np.asarray(amax / 8.0, np.float16).astype(np.float64)]
        has_pos = (blocks == amax[:, None]).any(axis=1)
        has_neg = (blocks == -amax[:, None]).any(axis=1)
        wanted = [np.where(has_pos, wanted[0], np.nan), np.where(has_neg, wanted[1], np.nan)]
    ulp = np.maximum(np.abs(np.stack(wanted)), 2.0**-14) * F16_ULP_AT_ONE
    scale_ok = np.zeros(d_dev.shape, bool)
    for w, u in zip(wanted, ulp, strict=True):
        scale_ok |= np.abs(d_dev - w) <= np.where(np.isnan(w), -1.0, u)
    scale_ok |= (amax == 0) & (d_dev == 0)
    quants = _quant_values(dev_raw, qtype, exact.size).reshape(-1, BLOCK).astype(np.float64)
    # the quants may come from the unrounded scale (ggml: x·(1/d) with d = amax/127 in f32, then d stored
    # as F16) or from the stored F16 scale itself
    if qtype == "q8_0":
        unrounded = amax / 127.0
    else:
        unrounded = np.where(d_dev < 0, -amax / 8.0, amax / 8.0)
    quant_ok = np.zeros(quants.shape, bool)
    for d in (d_dev, unrounded):
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(d[:, None] != 0, blocks / d[:, None], 0.0)
        lo_q, hi_q = (-127.0, 127.0) if qtype == "q8_0" else (0.0, 15.0)
        if qtype == "q4_0":
            t = t + 8.0
        low = np.clip(np.ceil(t - 0.5 - QUANT_SLACK), lo_q, hi_q)
        high = np.clip(np.floor(t + 0.5 + QUANT_SLACK), lo_q, hi_q)
        quant_ok |= (quants >= low) & (quants <= high)
    return ~scale_ok, ~quant_ok.reshape(-1)


def _f16_ok(dev: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """``dev`` within one F16 ulp of ``f16(wanted)`` (NaN wanted: never)."""
    w = np.asarray(wanted, np.float16).astype(np.float64)
    ulp = np.maximum(np.abs(w), 2.0**-14) * F16_ULP_AT_ONE
    with np.errstate(invalid="ignore"):
        return np.abs(dev - w) <= ulp


def _nearest_ok(quants: np.ndarray, t: np.ndarray, top: float) -> np.ndarray:
    """``quants`` is an integer nearest to ``t`` (either one within QUANT_SLACK of a half), clamped to [0, top]."""
    low = np.clip(np.ceil(t - 0.5 - QUANT_SLACK), 0.0, top)
    high = np.clip(np.floor(t + 0.5 + QUANT_SLACK), 0.0, top)
    return (quants >= low) & (quants <= high)


def _divide(x: np.ndarray, d: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(d[:, None] != 0, x / d[:, None], 0.0)


def _check_q5_0(blocks: np.ndarray, dev_raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d_dev, _, quants = _fields(dev_raw, "q5_0")
    amax = np.abs(blocks).max(axis=1)
    has_pos = (blocks == amax[:, None]).any(axis=1)
    has_neg = (blocks == -amax[:, None]).any(axis=1)
    scale_ok = (has_pos & _f16_ok(d_dev, -amax / 16.0)) | (has_neg & _f16_ok(d_dev, amax / 16.0))
    scale_ok |= (amax == 0) & (d_dev == 0)
    unrounded = np.where(d_dev < 0, -amax / 16.0, amax / 16.0)
    quant_ok = np.zeros(quants.shape, bool)
    for d in (d_dev, unrounded):
        quant_ok |= _nearest_ok(quants, _divide(blocks, d) + 16.0, 31.0)
    return ~scale_ok, ~quant_ok.reshape(-1)


def _check_with_min(qtype: str, levels: int) -> Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    def check(blocks: np.ndarray, dev_raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        d_dev, m_dev, quants = _fields(dev_raw, qtype)
        low, high = blocks.min(axis=1), blocks.max(axis=1)
        unrounded = (high - low) / levels
        scale_ok = (_f16_ok(d_dev, unrounded) | ((high == low) & (d_dev == 0))) & _f16_ok(m_dev, low)
        quant_ok = np.zeros(quants.shape, bool)
        for d in (d_dev, unrounded):
            for m in (low, m_dev):
                quant_ok |= _nearest_ok(quants, _divide(blocks - m[:, None], d), float(levels))
        return ~scale_ok, ~quant_ok.reshape(-1)

    return check


def _check_iq4_nl(blocks: np.ndarray, dev_raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d_dev, _, levels = _fields(dev_raw, "iq4_nl")
    xt = np.ascontiguousarray(blocks.astype(np.float32).T)
    scale_ok = np.zeros(d_dev.shape, bool)
    fits = []
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for ntry in (-1, 7):  # the fit after one scale (CPU from_float) or fifteen (ggml_quantize_chunk)
            fits.append(group_scales(xt, ntry)[0].astype(np.float64))
            scale_ok |= _f16_ok(d_dev, fits[-1])
    table = KVALUES_IQ4NL.astype(np.float64)
    amax = np.abs(blocks).max(axis=1)
    has_pos = (blocks == amax[:, None]).any(axis=1)
    has_neg = (blocks == -amax[:, None]).any(axis=1)
    tiny = amax < 1e-15  # ggml stores d = 0 (every value 0) for such a block
    scale_ok |= tiny & (d_dev == 0)
    level = table[levels]
    level_ok = np.zeros(levels.shape, bool)
    anywhere = np.ones_like(has_pos)
    for d, valid in ((amax / -127.0, has_pos), (amax / 127.0, has_neg), (d_dev, anywhere), (fits[1], anywhere)):
        t = _divide(blocks, d)[:, :, None]
        distance = np.abs(table[None, None, :] - t).min(axis=2)
        level_ok |= valid[:, None] & (np.abs(level - t[:, :, 0]) <= distance + QUANT_SLACK)
    level_ok |= (tiny | (d_dev == 0))[:, None]
    return ~scale_ok, ~level_ok.reshape(-1)


_RULES: dict[str, Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]] = {
    "q4_1": _check_with_min("q4_1", 15), "q5_0": _check_q5_0, "q5_1": _check_with_min("q5_1", 31),
    "iq4_nl": _check_iq4_nl}

"""FLASH_ATTN_EXT (``ggml_flash_attn_ext`` with ``_set_prec`` and ``_add_sinks``) and its error model.

Shapes in ggml order (numpy order is reversed):

* q     ``[DK, n_q,  n_head,    ne3]`` F32
* k     ``[DK, n_kv, n_head_kv, ne3]`` F16 (or F32)
* v     ``[DV, n_kv, n_head_kv, ne3]`` F16 (or F32), not transposed
* mask  ``[n_kv, ≥ n_q, m2, m3]`` F16, contiguous; row ``i`` serves query ``i`` (rows from n_q on are
  padding and ignored), heads and batches take mask plane ``h % m2``, ``b % m3``
* sinks ``[n_head]`` F32: one extra logit per head that joins the softmax denominator only
* dst   ``[DV, n_head, n_q, ne3]`` F32 — permuted against q: head before query

For head ``h`` (kv head ``h // (n_head / n_head_kv)``: GQA groups consecutive heads), query ``t``,
key ``j``: ``ℓ_j = scale·q·k_j + slope_h·mask[t, j]`` (with ``logit_softcap = c > 0`` the first term is
``c·tanh(scale·q·k_j / c)``), ``out = Σ_j softmax(ℓ)_j v_j``; ALiBi slopes as SOFT_MAX's.

Fully masked rows (every ``ℓ_j = −inf``): ggml's CPU skips −inf keys, leaves the sum ``S = 0`` and
writes ``S_inv = 0`` times a zero accumulator, so the row is **0** (not NaN; SOFT_MAX gives NaN
there). With a sink, the sink is the only term of the denominator and the row is 0 as well. The
golden defines both as 0, and the error model allows nothing else.

ggml 0.20.2 has no mask padding requirement any more (GGML_KQ_MASK_PAD is gone): ``ne1 ≥ n_q`` is
what the CPU kernel reads. ``ggml_flash_attn_ext`` always makes an F32 result, so the F16/BF16
outputs ggml-cann's supports_op lists cannot be reached through the API.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from golden.case import OpCase
from golden.softmax import alibi_slopes
from golden.spec import InputLayouts, OpList, OpSpec, P, Regime, partial_tile, sig
from golden.tolerance import F16_EPS, F32_EPS, Calibration, Tolerance

SPECS = OpList()

PRECISIONS = ("default", "f32")  # ggml_prec: GGML_PREC_DEFAULT, GGML_PREC_F32
F16_SUBNORMAL_SPACING = 2.0**-24


def _f32(value: float) -> float:
    return float(np.float32(value))


@dataclass(frozen=True)
class Logits:
    """The pieces of ``ℓ = c + slope·mask`` in numpy order ``(ne3, n_head, n_q, n_kv)``."""

    qk: np.ndarray  # c: scale·q·k (soft-capped when asked), finite
    bias: np.ndarray  # slope·mask: 0 without a mask, −inf where masked
    qk_abs: np.ndarray | None  # T = |scale|·Σ_i |q_i|·|k_ji|: the magnitude the dot product's errors scale with
    # (only the error model needs it: None in the golden, which saves a third of its work)

    @property
    def total(self) -> np.ndarray:
        return self.qk + self.bias


def _kv_heads(x: np.ndarray, n_head: int) -> np.ndarray:
    """K or V ``(ne3, n_head_kv, n_kv, d)`` broadcast to ``n_head`` heads: head h reads kv head
    ``h // (n_head / n_head_kv)`` (consecutive heads share a kv head)."""
    group = n_head // x.shape[1]
    return x[:, np.arange(n_head) // group]


def _logits(q: np.ndarray, kh: np.ndarray, m: np.ndarray | None, scale: float, slope: np.ndarray,
            softcap: float, kh_abs: np.ndarray | None) -> Logits:
    """The logits of queries ``q`` against keys ``kh`` already matched to q's heads, with the mask
    planes ``m`` matched too and each head's ALiBi ``slope`` (broadcastable against the logits);
    their magnitudes T when given ``kh_abs = |kh|``."""
    scale = _f32(scale)
    dots = q @ np.swapaxes(kh, -1, -2)
    qk_abs = None if kh_abs is None else abs(scale) * (np.abs(q) @ np.swapaxes(kh_abs, -1, -2))
    qk = scale * dots
    if softcap != 0.0:
        c = _f32(softcap)
        qk = c * np.tanh(qk / c)
    bias = np.zeros_like(qk)
    if m is not None:
        with np.errstate(invalid="ignore"):
            bias = slope * m
    return Logits(qk, bias, qk_abs)


def attention_logits(
    q: np.ndarray, k: np.ndarray, mask: np.ndarray | None, scale: float, max_bias: float, softcap: float,
) -> Logits:
    """The exact logits (float64) of every query against every key."""
    q = np.asarray(q, np.float64)
    n_head, n_q = q.shape[1], q.shape[2]
    kh = _kv_heads(np.asarray(k, np.float64), n_head)
    m = None
    if mask is not None:
        m = np.asarray(mask, np.float64)[:, :, :n_q, :]
        ne3 = q.shape[0]
        m = m[np.arange(ne3) % m.shape[0]][:, np.arange(n_head) % m.shape[1]]
    slope = alibi_slopes(n_head, _f32(max_bias)).reshape(1, n_head, 1, 1)
    return _logits(q, kh, m, scale, slope, softcap, np.abs(kh))


# One block of queries is at most this many (query, key) pairs: each float64 intermediate of the
# golden and of the error model is then 16 MiB, whatever the context length (16k keys: 128 queries).
BLOCK_PAIRS = 2**21


@dataclass(frozen=True)
class Block:
    """Queries ``rows`` of head ``h`` in batch ``b``, with what they read, each shaped ``(1, 1, …)``
    so the whole-tensor formulas apply unchanged: every quantity is per query row, so evaluating
    the rows block by block gives the same float64 values as evaluating them all at once."""

    b: int
    h: int
    rows: slice
    q: np.ndarray  # (1, 1, r, DK)
    k: np.ndarray  # (1, 1, n_kv, DK): kv head h // group
    v: np.ndarray  # (1, 1, n_kv, DV)
    k_abs: np.ndarray  # |k| and |v|, computed once per kv head
    v_abs: np.ndarray
    mask: np.ndarray | None  # (1, 1, r, n_kv): plane (b % m3, h % m2)
    slope: np.ndarray  # (1, 1, 1, 1)
    sinks: np.ndarray | None  # (1,)


def query_blocks(case: OpCase, x: AttentionInputs) -> Iterator[Block]:
    """The case's (batch, head, query rows) blocks, each of at most BLOCK_PAIRS (query, key) pairs."""
    q, k, v = (np.asarray(a, np.float64) for a in (x.q, x.k, x.v))
    ne3, n_head, n_q = q.shape[0], q.shape[1], q.shape[2]
    n_kv = k.shape[2]
    group = n_head // k.shape[1]
    slopes = alibi_slopes(n_head, _f32(case.param("max_bias")))
    mask = None if x.mask is None else np.asarray(x.mask, np.float64)
    step = max(1, BLOCK_PAIRS // max(1, n_kv))
    for b in range(ne3):
        for h in range(n_head):
            kh, vh = k[b:b + 1, h // group][:, None], v[b:b + 1, h // group][:, None]
            if h % group == 0:
                k_abs, v_abs = np.abs(kh), np.abs(vh)
            for start in range(0, n_q, step):
                rows = slice(start, min(n_q, start + step))
                m = None
                if mask is not None:
                    m = mask[b % mask.shape[0], h % mask.shape[1], rows][None, None]
                yield Block(b, h, rows, q[b:b + 1, h:h + 1, rows], kh, vh, k_abs, v_abs, m,
                            slopes[h].reshape(1, 1, 1, 1), None if x.sinks is None else x.sinks[h:h + 1])


def _block_logits(case: OpCase, blk: Block, magnitude: bool = True) -> Logits:
    return _logits(blk.q, blk.k, blk.mask, case.param("scale"), blk.slope, case.param("logit_softcap"),
                   blk.k_abs if magnitude else None)


def attention_weights(logits: np.ndarray, sinks: np.ndarray | None) -> np.ndarray:
    """Softmax over keys (float64); a sink joins the denominator only. A fully masked row has no
    weight anywhere (all 0), which makes its output 0 as on ggml's CPU."""
    with np.errstate(invalid="ignore", over="ignore"):
        top = np.max(logits, axis=-1, keepdims=True)
        if sinks is not None:
            top = np.maximum(top, np.asarray(sinks, np.float64).reshape(1, -1, 1, 1))
        empty = np.isneginf(top)
        top = np.where(empty, 0.0, top)
        e = np.exp(logits - top)  # exp(−inf) = 0 for masked keys
        total = e.sum(axis=-1, keepdims=True)
        if sinks is not None:
            total = total + np.exp(np.asarray(sinks, np.float64).reshape(1, -1, 1, 1) - top)
        return np.where(total > 0, e / np.where(total > 0, total, 1.0), 0.0)


@dataclass(frozen=True)
class AttentionInputs:
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    mask: np.ndarray | None
    sinks: np.ndarray | None


def split_inputs(xs: list[np.ndarray], case: OpCase) -> AttentionInputs:
    """Inputs in case order: q, k, v, then the mask if ``mask``, then the sinks if ``sinks``."""
    mask = xs[3] if case.param("mask") else None
    sinks = np.asarray(xs[-1], np.float64).reshape(-1) if case.param("sinks") else None
    return AttentionInputs(xs[0], xs[1], xs[2], mask, sinks)


def flash_attn_ext(xs: list[np.ndarray], case: OpCase) -> np.ndarray:
    """``softmax(ℓ)·V`` per head and query, returned as ggml's permuted dst ``(ne3, n_q, n_head, DV)``;
    evaluated in query blocks (query_blocks) so memory does not grow with n_q·n_kv."""
    x = split_inputs(xs, case)
    ne3, n_head, n_q = x.q.shape[0], x.q.shape[1], x.q.shape[2]
    out = np.empty((ne3, n_head, n_q, x.v.shape[3]))
    for blk in query_blocks(case, x):
        p = attention_weights(_block_logits(case, blk, magnitude=False).total, blk.sinks)
        out[blk.b, blk.h, blk.rows] = (p @ blk.v)[0, 0]
    return np.ascontiguousarray(np.swapaxes(out, 1, 2))


# ---- error model ------------------------------------------------------------------------------------
def _precision_units(prec: str) -> tuple[float, float]:
    """(w16, acc): the F16 steps a backend may take under the case's ``prec``, and the V
    accumulator's unit. GGML_PREC_DEFAULT lets a backend keep F16 logits, weights, output and V
    accumulator (CANN, CUDA's half2 kernels, ggml's CPU); GGML_PREC_F32 asks for f32 throughout, so
    none of them is allowed there (ggml's CPU keeping an F16 V accumulator under it is that backend's
    documented deviation, ``cpu-flash-attn-ext-f16-accumulator-under-prec-f32``)."""
    if prec == "f32":
        return 0.0, F32_EPS
    return F16_EPS, F16_EPS + F32_EPS


BF16_EPS = 2.0**-8  # unit roundoff of bfloat16
QUANT_BLOCK = 32
# the K cache types whose vec_dot_type is Q8_1 on ggml's CPU (a block min as well as a scale): the rest Q8_0
Q8_1_DOT = frozenset({"q4_1", "q5_1"})


def q_block_error(case: OpCase, blk: Block) -> np.ndarray:
    """The logit error of quantizing q to a block-quantized K's vec_dot_type (Q8_0, or Q8_1 for Q4_1/Q5_1 K,
    as ggml's CPU does; a backend that rounds q to F16 errs less): each element is off by at most half a step
    of its 32-block, amax/254, plus the F16 scale's rounding (127 steps of w·d), so key j's logit by
    |scale|·Σ_i e_i·|k_ji|. Q8_1 also stores the block sum s = d·Σq in F16, which a Q4_1/Q5_1 dot multiplies
    by K's block min m (|m| ≤ the block's amax): + w·|scale|·Σ_b |s_b|·max_b|k_j|."""
    q = blk.q  # (1, 1, r, DK)
    blocks = q.reshape(*q.shape[:-1], -1, QUANT_BLOCK)
    amax = np.abs(blocks).max(axis=-1, keepdims=True)
    e = np.broadcast_to(amax * (1 / 254 + F16_EPS) * (1 + 2 * F32_EPS), blocks.shape).reshape(q.shape)
    scale = abs(_f32(case.param("scale")))
    out = scale * (e @ np.swapaxes(blk.k_abs, -1, -2))
    if case.inputs[1].dtype in Q8_1_DOT:
        sums = np.abs(blocks.sum(axis=-1)) * (1 + F16_EPS)  # (1, 1, r, n_blocks)
        k_blocks = blk.k_abs.reshape(*blk.k_abs.shape[:-1], -1, QUANT_BLOCK).max(axis=-1)  # (1, 1, n_kv, n_blocks)
        out = out + F16_EPS * scale * (sums @ np.swapaxes(k_blocks, -1, -2))
    return out


def _error_terms(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray, prec: str
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float, float]:
    """The pieces both criteria share, per head, query and output column (numpy (ne3, n_head, n_q, DV)):
    the weight spread Σ_j p_j|v_j|(e^{Δ_j+Δmax+η} − 1), the mass Σ_j p̂_j|v_j|, the unmasked key count n,
    |out|, the per-key V accumulator unit and the F16 output unit (0 under prec f32)."""
    x = split_inputs([np.asarray(a) for a in inputs], case)
    x = split_inputs([np.asarray(a) for a in inputs], case)
    dk = x.q.shape[3]
    w16, acc = _precision_units(prec)
    out = np.abs(np.swapaxes(np.asarray(golden, np.float64), 1, 2))
    out = np.where(np.isfinite(out), out, 0.0)
    spread_all, mass_all = np.empty_like(out), np.empty_like(out)
    n_all = np.empty(out.shape[:3] + (1,))
    # q rounded to F16 goes with F16 K under either precision (F16's vec_dot_type is F16 in ggml);
    # F32 K rounded to F16 (CUDA) only where the precision lets a backend choose F16; BF16 K: q in BF16;
    # a block-quantized K (a quantized KV cache): q quantized per block to K's vec_dot_type (q_block_error)
    k_type = case.inputs[1].dtype
    q_units = {"f16": F16_EPS, "bf16": BF16_EPS}.get(k_type, w16)
    blocky = k_type not in ("f16", "bf16", "f32")
    t_units = q_units + (dk + 2) * F32_EPS
    v_rounding = w16 if case.inputs[2].dtype == "f32" else 0.0  # F32 V to F16 (CUDA), default prec only
    for blk in query_blocks(case, x):  # every term is per query row: blocks give the same values
        lg = _block_logits(case, blk)
        assert lg.qk_abs is not None
        with np.errstate(invalid="ignore", over="ignore"):
            total = lg.total
            live = np.isfinite(total)
            ell = np.where(live, np.abs(total), 0.0)
            sm = np.where(live, np.abs(lg.bias), 0.0)
            h = float(blk.h)
            delta = t_units * (1 + w16) * lg.qk_abs + ((2 * h + 6) * F32_EPS + 2 * w16) * sm \
                + (2 * F32_EPS + w16) * ell
            if blocky:
                delta = delta + (1 + w16) * q_block_error(case, blk)
            if case.param("logit_softcap") != 0.0:
                delta = delta + F32_EPS * lg.qk_abs + 4 * F32_EPS * np.abs(lg.qk)
            delta = np.where(live, delta, 0.0)
            n = live.sum(axis=-1, keepdims=True).astype(np.float64)
            eta = (n + 6) * F32_EPS + w16
            delta_max = delta.max(axis=-1, keepdims=True)
            p = attention_weights(total, blk.sinks)
            spread = (p * np.expm1(delta + delta_max + eta)) @ blk.v_abs
            mass = np.exp(2 * delta_max + eta) * (p @ blk.v_abs)  # Σ_j p̂_j|v_j|
        spread_all[blk.b, blk.h, blk.rows] = (spread + v_rounding * mass)[0, 0]
        mass_all[blk.b, blk.h, blk.rows] = mass[0, 0]
        n_all[blk.b, blk.h, blk.rows] = n[0, 0]
    return spread_all, mass_all, n_all, out, acc, w16


def attention_error_bound(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """How far any correct online-softmax attention may land from the exact value, per output
    element, at the precision the case's ``prec`` allows (docs/attention-error-model.md has the
    derivation). u = 2^-24 (f32), w = 2^-11 (f16); w16 = w under GGML_PREC_DEFAULT, 0 under
    GGML_PREC_F32; a = 2(w + u) for an F16 V accumulator (default), 2u for f32 (prec f32).

    Logits: key j's logit ℓ_j = c_j + slope·m_j is off by at most
        Δ_j = (w_q + (DK+2)·u)(1+w16)·T_j + (2h+6)·u·|slope·m_j| + (2u + w16)·|ℓ_j| + 2w16·|slope·m_j|
    with T_j = |scale|·Σ_i |q_i k_ji|: q rounded to F16 for an F16 dot (w_q = w with F16 K: ggml's F16
    vec_dot_type; w16 with F32 K, which CUDA rounds to F16), an f32 dot of DK products in any order,
    the scale and the mask addition, ALiBi's powf slope, and the logit and the slope·mask product held
    in F16 (CANN); + u·T_j + 4u·|c_j| with a soft-cap (the tanh).
    Weights: p̂_j/p_j ∈ exp(±(Δ_j + Δ_max + η)), η = (n + 6)·u + w16: exp, the f32 sum of the n
    unmasked terms in any order, the reciprocal, and the weights rounded to F16 for P·V.
    Accumulation: one rounding per key and per rescale, a·n·Σ_j p̂_j|v_j| + n·2^-24 (F16 subnormal
    spacing, F16 accumulator only); + w16·Σ_j p̂_j|v_j| for F32 V (CUDA rounds it to F16).
    Output: 0.5 ulp f32 (the row's ulp) and w16·|out| (an F16 result cast to F32, as CANN returns).
        allowed = (1 + w16)·[Σ_j p_j|v_j|(e^{Δ_j+Δmax+η} − 1) + e^{2Δmax+η}·a·n·Σ_j p_j|v_j| + n·2^-24]
                  + w16·|out|
    A fully masked row has n = 0 and p = 0: it must be exactly 0.
    """
    return _bound_at(case, inputs, golden, str(case.param("prec")))


def _bound_at(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray, prec: str) -> np.ndarray:
    spread, mass, n, out, acc, w16 = _error_terms(case, inputs, golden, prec)
    subnormal = F16_SUBNORMAL_SPACING if w16 else 2.0**-150  # an F16 or an f32 accumulator's underflow
    allowed = (1 + w16) * (spread + 2 * n * acc * mass + n * subnormal) + w16 * out
    return np.ascontiguousarray(np.swapaxes(allowed, 1, 2))


def attention_typical_error(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """The aggregate criterion's scale (golden/tolerance.py): the bound with the accumulator's 2n
    roundings (per key and per rescale) counted as root-sum-square, √(2n)·(1 + n·w16)·a·Σp̂|v| + √n·s
    in place of 2n·a·Σp̂|v| + n·s. An F16 accumulator stagnates: once the added terms (≈ S/n) come
    near its half ulp (≈ w·S), a term is lost whole, always the same way, so a share of about n·w of
    each step's error adds up coherently (measured on ggml's CPU: RMS error/√(2n)a·Σp̂|v| ≈ n·w from
    n = 512 on, 1.8 at n = 4096). The logit and weight terms stay worst-case: they do not grow with n."""
    return _typical_at(case, inputs, golden, str(case.param("prec")))


def _typical_at(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray, prec: str) -> np.ndarray:
    spread, mass, n, out, acc, w16 = _error_terms(case, inputs, golden, prec)
    subnormal = F16_SUBNORMAL_SPACING if w16 else 2.0**-150
    stagnation = 1 + n * w16
    typical = (1 + w16) * (spread + np.sqrt(2 * n) * stagnation * acc * mass + np.sqrt(n) * subnormal) + w16 * out
    return np.ascontiguousarray(np.swapaxes(typical, 1, 2))


def f16_intermediates_typical(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    return _typical_at(case, inputs, golden, "default")


def f16_intermediates_bound(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """The GGML_PREC_DEFAULT bound whatever the case's prec: what a backend that keeps F16
    intermediates under GGML_PREC_F32 (ggml's CPU with F16 V) is judged against as its documented
    deviation."""
    return _bound_at(case, inputs, golden, "default")


# ---- contract ---------------------------------------------------------------------------------------
def _fail(case: OpCase, rule: str) -> None:
    raise ValueError(f"{case.op}: {rule} (case {case.case_id})")


def check_flash_attn_ext(case: OpCase, inputs: list[np.ndarray]) -> None:
    """The shapes ggml_flash_attn_ext asserts, and what the CPU kernel reads (mask ne0 = n_kv, mask
    ne1 ≥ n_q), so a bad repro line is one clear error."""
    has_mask, has_sinks = bool(case.param("mask")), bool(case.param("sinks"))
    want = 3 + has_mask + has_sinks
    if len(case.inputs) != want:
        _fail(case, f"takes {want} inputs (q, k, v{', mask' if has_mask else ''}{', sinks' if has_sinks else ''}), "
                    f"got {len(case.inputs)}")
    q, k, v = case.inputs[:3]
    if q.dtype != "f32":
        _fail(case, f"q must be f32 (the CPU kernel reads it as float), got {q.dtype}")
    if k.ne[0] != q.ne[0] or v.ne[1] != k.ne[1]:
        _fail(case, f"k ne={list(k.ne)} and v ne={list(v.ne)} do not fit q ne={list(q.ne)} "
                    "(k.ne0 = q.ne0, v.ne1 = k.ne1)")
    if q.ne[2] % k.ne[2] or q.ne[2] % v.ne[2] or not (q.ne[3] == k.ne[3] == v.ne[3]):
        _fail(case, f"heads: n_head={q.ne[2]} must be a multiple of k's {k.ne[2]} and v's {v.ne[2]}, "
                    "and ne3 equal")
    if has_mask:
        m = case.inputs[3]
        if m.dtype != "f16" or not m.layout.is_contiguous:
            _fail(case, "the mask must be a contiguous f16 tensor")
        if m.ne[0] != k.ne[1] or m.ne[1] < q.ne[1] or q.ne[2] % m.ne[2] or q.ne[3] % m.ne[3]:
            _fail(case, f"mask ne={list(m.ne)} must be [n_kv={k.ne[1]}, ≥ n_q={q.ne[1]}, a divisor of "
                        f"{q.ne[2]}, a divisor of {q.ne[3]}]")
    elif case.param("max_bias") > 0:
        _fail(case, "max_bias > 0 (ALiBi) needs a mask")
    if has_sinks:
        s = case.inputs[-1]
        if s.dtype != "f32" or s.ne[0] != q.ne[2] or s.ne[1:] != (1, 1, 1):
            _fail(case, f"sinks must be f32 [n_head={q.ne[2]}], got {s.dtype} {list(s.ne)}")
    if case.param("prec") not in PRECISIONS:
        _fail(case, f"prec must be one of {', '.join(PRECISIONS)}")


# the KV length one block of a flash-attention kernel takes per step (ggml-cuda's and ggml-vulkan's KV tiles are
# 32-256 long; the CPU's 64): a length past it and not a multiple leaves a partial last KV tile, masked or not
FA_KV_TILE = 64

SPECS.add(OpSpec(
    name="FLASH_ATTN_EXT", family="attention", golden=flash_attn_ext,
    regimes=(Regime("mla_v_in_k", lambda c: c.inputs[2].layout.alias == 1,
                    "DeepSeek's MLA: V a view of K's allocation (K head 576, V head 512)"),
             partial_tile("kv", lambda c: c.inputs[1].ne[1], FA_KV_TILE)),
    no_grid_regime="its grid is query-row tiles × heads × sequences: 65,536 blocks needs ~1 M query rows (no model "
                   "has them; a case would hold gigabytes)",
    signatures=(sig("f32", "f16", "f16"), sig("f32", "f16", "f16", "f16"), sig("f32", "f32", "f32", "f16")),
    tolerance={"f32": Tolerance(
        "online softmax at the case's prec: q rounded to F16 with F16 K (its vec_dot_type), f32 dot/exp/sum in any "
        "order; under prec default also F16 logits, weights, output and V accumulator (2n(w+u)Σp|v|), under prec "
        "f32 an f32 accumulator (2nu·Σp|v|) and nothing in F16; logit errors Δ move each weight by "
        "e^{Δ_j+Δ_max+η} (docs/attention-error-model.md has the derivation and the measured margins)",
        ulp=0.5, model=attention_error_bound, typical=attention_typical_error,
        typical_name="the bound with √(2n)(1+n·w16), √n for 2n, n",
        model_name="(1+w16)[Σp|v|(e^{Δ_j+Δmax+η}−1) + 2n·a·e^{2Δmax+η}Σp|v| + n·s] + w16|o|; w16 = w, a = w+u "
                   "(prec default) or w16 = 0, a = u (prec f32)", calibration=Calibration.GGML_CPU)},
    params={"scale": P("multiplies q·k (f32)"), "max_bias": P("ALiBi: 0 = off, > 0 needs a mask"),
            "logit_softcap": P("c > 0: logits become c·tanh(scale·q·k/c); 0 = off"),
            "prec": P("ggml_flash_attn_ext_set_prec: default (F16 intermediates allowed) or f32 (f32 throughout)", str),
            "mask": P("the 4th input is the F16 mask [n_kv, ≥ n_q, m2 | n_head, m3 | ne3]", bool),
            "sinks": P("the last input is one F32 sink logit per head (ggml_flash_attn_ext_add_sinks)", bool)},
    validate=check_flash_attn_ext, input_layouts=InputLayouts.ANY, structured_inputs=True,
    specials=(0.0, -0.0),
    notes="Signatures list q, k, v and the mask; sinks are F32 and follow. dst is always F32 (ggml_flash_attn_ext "
          "makes it so; the F16/BF16 outputs ggml-cann lists are unreachable). A fully masked row is 0, as on "
          "ggml's CPU. ggml-cann declines logit_softcap ≠ 0, sinks, K/V head sizes that differ and F32 K/V; "
          "they are drawn and judged where claimed (ggml:CPU). Inputs are drawn with n_kv·max|v| < 2^15 so "
          "an F16 V accumulator (ggml's CPU) cannot overflow."))

# ggml's CPU keeps its F16 V accumulator (VKQ16) under GGML_PREC_F32: judged against the default-prec bound
F16_INTERMEDIATES_UNDER_PREC_F32 = Tolerance(
    "the prec-default bound (F16 logits, weights, output and V accumulator) applied under prec f32: a backend's "
    "documented deviation, not a correct GGML_PREC_F32 result", ulp=0.5, model=f16_intermediates_bound,
    typical=f16_intermediates_typical, typical_name="the prec-default bound with √(2n)(1+n·w), √n for 2n, n",
    model_name="prec-default bound under prec f32")

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
from golden.spec import InputLayouts, OpList, OpSpec, P, sig
from golden.tolerance import F16_EPS, F32_EPS, Tolerance

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
def attention_error_bound(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """How far any correct online-softmax attention with F16 K/V may land from the exact value, per
    output element (docs/attention-error-model.md has the derivation). u = 2^-24 (f32), w = 2^-11 (f16).

    One bound for both precisions: ggml 0.20.2's own backends keep F16 intermediates under
    GGML_PREC_F32 too (the CPU's scalar path accumulates V in F16, CUDA's vec kernel holds weights
    and V sums in half2, CANN computes in F16 and casts its F16 output), so ggml allows them.

    Logits: key j's logit ℓ_j = c_j + slope·m_j is off by at most
        Δ_j = (w + (DK+2)·u)(1+w)·T_j + (2h+6)·u·|slope·m_j| + (2u + w)·|ℓ_j| + 2w·|slope·m_j|
    with T_j = |scale|·Σ_i |q_i k_ji|: q rounded to F16 for the F16 dot (ggml's CPU, CUDA, CANN), an
    f32 dot of DK products in any order, the scale and the mask addition, ALiBi's powf slope, and
    the logit and the slope·mask product held in F16 (CANN); + u·T_j + 4u·|c_j| with a soft-cap (the
    tanh); + w·T_j more for F32 K (CUDA rounds F32 K and V to F16).
    Weights: p̂_j/p_j ∈ exp(±(Δ_j + Δ_max + η)), η = (n + 6)·u + w: exp, the f32 sum of the n
    unmasked terms in any order, the reciprocal, and the weights rounded to F16 for P·V.
    Accumulation: the V accumulator in F16 (ggml's CPU, VKQ16: one rounding per key and per
    rescale): 2n(w + u)·Σ_j p̂_j|v_j| + n·2^-24 (F16 subnormal spacing); + w·Σ_j p̂_j|v_j| for F32 V.
    Output: 0.5 ulp f32 (the row's ulp) and w·|out| (an F16 result cast to F32, as CANN returns).
        allowed = (1 + w)·[Σ_j p_j|v_j|(e^{Δ_j+Δ_max+η} − 1) + e^{2Δ_max+η}·2n(w+u)·Σ_j p_j|v_j| + n·2^-24]
                  + w·|out|
    A fully masked row has n = 0 and p = 0: it must be exactly 0.
    """
    x = split_inputs([np.asarray(a) for a in inputs], case)
    dk = x.q.shape[3]
    out_all = np.abs(np.swapaxes(np.asarray(golden, np.float64), 1, 2))
    allowed = np.empty_like(out_all)
    for blk in query_blocks(case, x):  # every term is per query row: blocks give the same values
        lg = _block_logits(case, blk)
        assert lg.qk_abs is not None
        with np.errstate(invalid="ignore", over="ignore"):
            total = lg.total
            live = np.isfinite(total)
            ell = np.where(live, np.abs(total), 0.0)
            sm = np.where(live, np.abs(lg.bias), 0.0)
            h = float(blk.h)
            t_units = F16_EPS + (dk + 2) * F32_EPS + (F16_EPS if case.inputs[1].dtype == "f32" else 0.0)
            delta = t_units * (1 + F16_EPS) * lg.qk_abs + ((2 * h + 6) * F32_EPS + 2 * F16_EPS) * sm \
                + (2 * F32_EPS + F16_EPS) * ell
            if case.param("logit_softcap") != 0.0:
                delta = delta + F32_EPS * lg.qk_abs + 4 * F32_EPS * np.abs(lg.qk)
            delta = np.where(live, delta, 0.0)
            n = live.sum(axis=-1, keepdims=True).astype(np.float64)
            eta = (n + 6) * F32_EPS + F16_EPS
            delta_max = delta.max(axis=-1, keepdims=True)
            p = attention_weights(total, blk.sinks)
            v_abs = blk.v_abs
            spread = (p * np.expm1(delta + delta_max + eta)) @ v_abs
            mass = np.exp(2 * delta_max + eta) * (p @ v_abs)  # Σ_j p̂_j|v_j|
            v_units = 2 * n * (F16_EPS + F32_EPS) + (F16_EPS if case.inputs[2].dtype == "f32" else 0.0)
            bound = (1 + F16_EPS) * (spread + v_units * mass + n * F16_SUBNORMAL_SPACING)
            out = out_all[blk.b:blk.b + 1, blk.h:blk.h + 1, blk.rows]
            allowed[blk.b, blk.h, blk.rows] = (bound + F16_EPS * np.where(np.isfinite(out), out, 0.0))[0, 0]
    return np.ascontiguousarray(np.swapaxes(allowed, 1, 2))


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


SPECS.add(OpSpec(
    name="FLASH_ATTN_EXT", family="attention", golden=flash_attn_ext,
    signatures=(sig("f32", "f16", "f16"), sig("f32", "f16", "f16", "f16"), sig("f32", "f32", "f32", "f16")),
    tolerance={"f32": Tolerance(
        "online softmax with F16 K/V and the F16 intermediates ggml's backends keep under either precision: q "
        "rounded to F16, f32 dot/exp/sum in any order, F16 logits and weights, the V accumulator in F16 as ggml's "
        "CPU keeps it (2n(w+u)Σp|v|), F16 output; logit errors Δ move each weight by e^{Δ_j+Δ_max+η}; ggml CPU: "
        "ci ≤ 0.08, nightly ≤ 0.24 of the allowance (docs/attention-error-model.md)",
        ulp=0.5, model=attention_error_bound,
        model_name="(1+w)[Σp|v|(e^{Δ_j+Δmax+η}−1) + 2n(w+u)e^{2Δmax+η}Σp|v| + n·2^-24] + w|o|")},
    params={"scale": P("multiplies q·k (f32)"), "max_bias": P("ALiBi: 0 = off, > 0 needs a mask"),
            "logit_softcap": P("c > 0: logits become c·tanh(scale·q·k/c); 0 = off"),
            "prec": P("ggml_flash_attn_ext_set_prec: default or f32 (one bound serves both, see the model)", str),
            "mask": P("the 4th input is the F16 mask [n_kv, ≥ n_q, m2 | n_head, m3 | ne3]", bool),
            "sinks": P("the last input is one F32 sink logit per head (ggml_flash_attn_ext_add_sinks)", bool)},
    validate=check_flash_attn_ext, input_layouts=InputLayouts.ANY, structured_inputs=True,
    specials=(0.0, -0.0),
    notes="Signatures list q, k, v and the mask; sinks are F32 and follow. dst is always F32 (ggml_flash_attn_ext "
          "makes it so; the F16/BF16 outputs ggml-cann lists are unreachable). A fully masked row is 0, as on "
          "ggml's CPU. ggml-cann declines logit_softcap ≠ 0, sinks, K/V head sizes that differ and F32 K/V; "
          "they are drawn and judged where claimed (ggml:CPU). Inputs are drawn with n_kv·max|v| < 2^15 so "
          "an F16 V accumulator (ggml's CPU) cannot overflow."))

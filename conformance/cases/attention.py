"""FLASH_ATTN_EXT: the case strategy and the input maker (q, k, v, masks, sinks).

Cases reach what kernels special-case: head sizes 64/80/96/128/256 and odd ones, K/V head sizes that
differ, GQA groups of 1 to 8 heads, a single query (decode; ggml's CPU splits the KV range from 512
keys) and 64+ queries (its tiled path), n_kv on either side of 32/64/128/256/512/1024 tiles, K and V
as llama.cpp's permuted views of a larger cache (and Q as a permuted projection), masks with padded
rows, ALiBi, soft-capping, sinks and both precisions. The work per case stays under 2^23
multiply-adds so the float64 golden and its error model take milliseconds.

The data keep ``n_kv·max|v| < 2^15``: ggml's CPU accumulates V in F16, which would overflow beyond
65504 (the reason GGML_PREC_F32 exists, yet the CPU keeps F16 there too).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
from hypothesis import strategies as st

from conformance.cases.registry import register
from conformance.strategies import ALL_PERMS, ROW_KEEPING_PERMS, f32, finish, layouts, one_in, spec
from golden import dtypes
from golden.case import Layout, OpCase
from golden.spec import Signature

MAX_WORK = 1 << 23  # ne3·n_head·n_q·n_kv·(DK + DV)
MAX_TENSOR = 1 << 17  # elements of any one input
MAX_KV = 4096  # beyond ~1/(2·2^-11) keys the F16-accumulator allowance exceeds Σp|v|: longer rows add little
MAIN_HEAD_SIZES = (64, 80, 96, 128, 256)
OTHER_HEAD_SIZES = (1, 8, 16, 32, 40, 48, 72, 112, 192)
QUERY_COUNTS = (1, 1, 1, 2, 3, 7, 8, 16, 31, 33, 64, 65, 100)
KV_EDGES = (1, 2, 3, 7, 16, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 513, 1000, 1024, 1025)
F16_ACCUMULATOR_ROOM = 2.0**15  # n_kv·max|v| stays below this


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def _qkv_layout(draw: st.DrawFn, llama: Layout) -> Layout:
    """Contiguous, llama.cpp's own view, any row-keeping view, or now and then any permute at all
    (ggml_flash_attn_ext accepts it; ggml's CPU asserts unit-stride rows: a known CPU bug)."""
    kind = draw(st.sampled_from(["contiguous", "llama", "llama", "rows", "rows", "any"]))
    if kind == "contiguous":
        return Layout()
    if kind == "llama":
        return llama
    if kind == "rows":
        return draw(layouts(perms=ROW_KEEPING_PERMS))
    return draw(layouts(perms=ALL_PERMS))


@st.composite
def fa_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    q_type, k_type, v_type = sig.srcs[:3]
    has_mask = len(sig.srcs) > 3
    dk = draw(st.sampled_from(MAIN_HEAD_SIZES * 2 + OTHER_HEAD_SIZES))
    dv = draw(st.sampled_from((dk,) * 6 + (max(1, dk // 2), 128, 64)))  # DeepSeek-like 192/128 among them
    n_head_kv = draw(st.sampled_from([1, 1, 2, 4]))
    group = draw(st.sampled_from([1, 2, 2, 3, 4, 4, 8]))  # GQA: most cases share kv heads
    n_head = n_head_kv * group
    ne3 = draw(st.sampled_from([1, 1, 1, 2]))
    per_query = ne3 * n_head * (dk + dv)
    max_q = max(1, min(MAX_WORK // per_query, MAX_TENSOR // (dk * n_head * ne3)))
    n_q = draw(st.sampled_from([n for n in QUERY_COUNTS if n <= max_q] or [1]))
    max_kv = max(1, min(MAX_KV, MAX_WORK // (per_query * n_q), MAX_TENSOR // (max(dk, dv) * n_head_kv * ne3)))
    n_kv = draw(st.one_of(st.sampled_from([n for n in KV_EDGES if n <= max_kv] or [1]), st.integers(1, max_kv)))

    # llama.cpp: Q = permute(0,2,1,3) of [DK, n_head, n_q] (a slice of a fused QKV row now and then);
    # K/V = permute(0,2,1,3) of a view [D, n_head_kv, n_kv] of the cache [D·n_head_kv, kv_size]
    q_llama = Layout(perm=(0, 2, 1, 3), pad=(0, draw(st.sampled_from([0, 0, 2 * n_head_kv])), 0, 0),
                     offset=draw(st.sampled_from([0, 0, dk])))
    spare_cells = draw(st.sampled_from([0, 1, 5, 32, 256]))
    if dk * n_head_kv * (n_kv + spare_cells) * ne3 > MAX_TENSOR:
        spare_cells = 0
    cache = Layout(perm=(0, 2, 1, 3), pad=(0, 0, spare_cells, 0), offset=draw(st.sampled_from([0, 0, 3, 64])))
    inputs = [
        spec(q_type, (dk, n_q, n_head, ne3), draw(_qkv_layout(q_llama))),
        spec(k_type, (dk, n_kv, n_head_kv, ne3), draw(_qkv_layout(cache))),
        spec(v_type, (dv, n_kv, n_head_kv, ne3), draw(_qkv_layout(cache))),
    ]
    max_bias = 0.0
    if has_mask:
        pad_to = draw(st.sampled_from([1, 1, 32, 64]))  # the old GGML_KQ_MASK_PAD rows, or a few spare rows
        rows = (n_q + pad_to - 1) // pad_to * pad_to + draw(st.sampled_from([0, 0, 0, 1, 3]))
        m2 = draw(st.sampled_from([1, 1, n_head] + _divisors(n_head)))
        m3 = draw(st.sampled_from([1, ne3]))
        while n_kv * rows * m2 * m3 > MAX_TENSOR and rows > n_q:
            rows = n_q
        inputs.append(spec("f16", (n_kv, rows, m2, m3)))
        max_bias = draw(st.sampled_from([0.0, 0.0, 0.0, 8.0, 0.5, 2.0]))
    has_sinks = draw(st.sampled_from([False] * 5 + [True]))
    if has_sinks:
        inputs.append(spec("f32", (n_head, 1, 1, 1)))
    scale = draw(st.one_of(st.sampled_from([1.0 / math.sqrt(dk)] * 3 + [1.0, 0.125, 2.0]),
                           st.floats(0.015625, 2.0, width=32)))
    softcap = draw(st.sampled_from([0.0] * 6 + [50.0, 30.0, 1.0]))
    params = (("scale", f32(scale)), ("max_bias", f32(max_bias)), ("logit_softcap", f32(softcap)),
              ("prec", draw(st.sampled_from(["default", "f32"]))), ("mask", has_mask), ("sinks", has_sinks))
    return _mla_branch(draw, finish(draw, OpCase(op, tuple(inputs), params=params, dst=sig.dst)))


MLA_DK, MLA_DV = 576, 512  # DeepSeek's multi-head latent attention: V is the first 512 of each K row


def _mla_branch(draw: st.DrawFn, case: OpCase) -> OpCase:
    """In about one case of 8, DeepSeek's MLA: K head 576 and V a view of K's allocation holding the
    first 512 of each K row (``Layout.alias``), as llama.cpp builds it. Drawn after every other choice;
    its simplest value keeps the case as drawn. K keeps its layout where its rows stay innermost."""
    if not one_in(draw, 8):
        return case
    q, k, v, *rest = case.inputs
    if k.dtype != v.dtype or k.layout.perm[0] != 0:
        return case
    n_q, n_head, ne3 = q.ne[1], q.ne[2], q.ne[3]
    n_kv = max(1, min(k.ne[1], MAX_WORK // (ne3 * n_head * n_q * (MLA_DK + MLA_DV))))
    k_layout = k.layout
    v_layout = replace(k_layout, pad=(k_layout.pad[0] + MLA_DK - MLA_DV, *k_layout.pad[1:]), alias=1)
    inputs = [replace(q, ne=(MLA_DK, *q.ne[1:])), replace(k, ne=(MLA_DK, n_kv, *k.ne[2:])),
              replace(v, ne=(MLA_DV, n_kv, *v.ne[2:]), layout=v_layout)]
    if case.param("mask"):
        mask, *rest = rest
        inputs.append(replace(mask, ne=(n_kv, *mask.ne[1:])))
    return replace(case, inputs=(*inputs, *rest))


# ---- inputs ------------------------------------------------------------------------------------------
# (q and k range, v range) per distribution: test-backend-ops' range, a peaked softmax with larger
# values, large values of one sign per kv head (the F16 accumulator's hardest case), and zeros,
# subnormals and masks that are mostly −inf
RANGES = {"uniform": (1.0, 1.0), "dense": (3.0, 8.0), "wide": (1.0, 150.0), "special": (1.0, 1.0)}
MASK_KINDS = ("free", "causal", "random", "causal_holes", "sparse")


def _sprinkle(rng: np.random.Generator, x: np.ndarray, values: list[float], share: float) -> np.ndarray:
    where = rng.random(x.shape) < share
    return np.where(where, rng.choice(np.array(values), size=x.shape), x)


def _mask(rng: np.random.Generator, shape: tuple[int, ...], n_q: int, distribution: str) -> np.ndarray:
    """F16 mask (numpy (m3, m2, rows, n_kv)): finite values (uniform in [−1, 1], zeros, or −distance
    as ALiBi models use) with −inf blocks: causal with the past in front, random holes, fully masked
    rows, one live key per row. Rows from n_q on are padding ggml ignores (NaN under ``special``)."""
    m3, m2, rows, n_kv = shape
    style = rng.integers(0, 5)
    if style < 3:
        m = rng.uniform(-1.0, 1.0, size=shape)
    elif style == 3:
        m = np.zeros(shape)
    else:
        m = -np.abs(np.arange(n_kv)[None, :] - np.arange(rows)[:, None] - (n_kv - n_q)).astype(np.float64)
        m = np.broadcast_to(m, shape).copy()
    kinds = MASK_KINDS if distribution != "special" else ("random", "causal_holes", "sparse")
    kind = kinds[rng.integers(0, len(kinds))]
    i = np.arange(rows)[:, None]
    j = np.arange(n_kv)[None, :]
    if kind == "causal":  # query i sees the past (n_kv − n_q keys) and itself, minus a random shift
        past = n_kv - n_q + int(rng.integers(-2, 3))
        m = np.where(j > i + past, -np.inf, m)
    elif kind == "random":
        m = np.where(rng.random(shape) < rng.uniform(0.3, 0.95), -np.inf, m)
    elif kind == "causal_holes":
        m = np.where(j > i + (n_kv - n_q), -np.inf, m)
        m = np.where((rng.random(shape[:-1]) < rng.uniform(0.2, 0.6))[..., None], -np.inf, m)
    elif kind == "sparse":  # at most one live key per row, some rows none
        live = rng.integers(0, n_kv, size=shape[:-1])
        keep = (j == live[..., None]) & (rng.random(shape[:-1]) < 0.7)[..., None]
        m = np.where(keep, m, -np.inf)
    if rows > n_q:
        fill = np.nan if distribution == "special" else -np.inf
        m[:, :, n_q:, :] = np.where(rng.random((m3, m2, rows - n_q, n_kv)) < 0.5, fill,
                                    rng.uniform(-1.0, 1.0, size=(m3, m2, rows - n_q, n_kv)))
    return dtypes.round_to(m, "f16")


def fa_inputs(case: OpCase, rng: np.random.Generator) -> list[np.ndarray]:
    q_spec, k_spec, v_spec = case.inputs[:3]
    n_kv = k_spec.ne[1]
    qk_range, v_range = RANGES[case.distribution]
    v_range = min(v_range, F16_ACCUMULATOR_ROOM / n_kv)
    q = rng.uniform(-qk_range, qk_range, size=q_spec.np_shape)
    k = rng.uniform(-qk_range, qk_range, size=k_spec.np_shape)
    if case.distribution == "wide":  # one sign per kv head: the accumulator grows with every key
        sign = rng.choice(np.array([-1.0, 1.0]), size=(v_spec.np_shape[0], v_spec.np_shape[1], 1, 1))
        v = sign * rng.uniform(0.0, v_range, size=v_spec.np_shape)
    else:
        v = rng.uniform(-v_range, v_range, size=v_spec.np_shape)
    if case.distribution == "special":
        q = _sprinkle(rng, q, [0.0, -0.0], 0.1)
        k = _sprinkle(rng, k, [0.0, 2.0**-20, -(2.0**-20)], 0.1)  # F16 subnormals
        v = _sprinkle(rng, v, [0.0, -0.0, 2.0**-20], 0.1)
    out = [dtypes.round_to(q, q_spec.dtype), dtypes.round_to(k, k_spec.dtype), dtypes.round_to(v, v_spec.dtype)]
    if case.param("mask"):
        out.append(_mask(rng, case.inputs[3].np_shape, q_spec.ne[1], case.distribution))
    if case.param("sinks"):
        s_spec = case.inputs[-1]
        sinks = rng.uniform(-4.0, 4.0, size=s_spec.np_shape)
        out.append(dtypes.round_to(_sprinkle(rng, sinks, [8.0, 20.0], 0.2), "f32"))
    return out


register("FLASH_ATTN_EXT", group="flash_attn_ext", draw=fa_case, make_inputs=fa_inputs)

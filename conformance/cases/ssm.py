"""CONV_TRANSPOSE_1D, SSM_CONV, GATED_LINEAR_ATTN and SOLVE_TRI: case strategies and the input
makers of the two whose inputs have structure.

Shapes stay small (the goldens are float64 numpy, the recurrence and the substitution loop in
Python) but reach each kernel's corners: CONV_TRANSPOSE_1D strides beyond the kernel (gaps in the
output) and kernels longer than ggml-cann's 255-tap slices; SSM_CONV Mamba's d_conv = 4 and odd
channel counts; GATED_LINEAR_ATTN head sizes off the SIMD width, one token per sequence and
several sequences; SOLVE_TRI triangles from diagonally dominant to small-pivot, one to many
right-hand sides, batched.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import strategies as st

from conformance.cases.registry import register
from conformance.data import floats
from conformance.strategies import (
    ALL_PERMS,
    GRID_EVERY,
    f32,
    finish,
    input_layouts,
    layouts,
    one_in,
    spec,
    special_branch,
)
from golden import catalogue, dtypes, ssm
from golden.case import OpCase
from golden.spec import CHUNK_TOKENS, GRID_ROWS, Signature
from golden.ssm import SOLVE_TRI_RHS_TILE

MAX_ELEMENTS = 1 << 15
# ‖γ_n·|T⁻¹||T|‖_∞ of every drawn triangle stays at most this: its f32 error bound exists (ρ < 1) and
# is at most ~11 % of |x| beyond first order
SOLVE_TRI_MAX_AMPLIFICATION = 0.1


# ---- CONV_TRANSPOSE_1D ------------------------------------------------------------------------------
@st.composite
def conv_transpose_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    k = draw(st.one_of(st.sampled_from([1, 2, 3, 4, 5, 8, 16]), st.integers(1, 32), st.sampled_from([255, 256, 300])))
    c_in, c_out = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    if k > 32:  # ggml-cann slices kernels into 255-tap parts: reached with few channels
        c_in, c_out = min(c_in, 3), min(c_out, 3)
    length = draw(st.one_of(st.sampled_from([1, 2, 3, 16, 33]), st.integers(1, 64)))
    s0 = draw(st.one_of(st.sampled_from([1, 2, k, k + 1]), st.integers(1, 5)))  # s0 > K leaves gaps
    if one_in(draw, GRID_EVERY):  # the grid-limit regime: (4,096·2 + 16)·8 = 65,664 outputs
        k, s0, length, c_out = 16, 2, 4097, 8
    kernel = spec(sig.srcs[0], (k, c_out, c_in, 1), draw(input_layouts(catalogue.get(op).input_layouts)))
    data = spec(sig.srcs[1], (length, c_in, 1, 1), draw(layouts(perms=ALL_PERMS)))
    return finish(draw, OpCase(op, (kernel, data), params=(("s0", s0),), dst=sig.dst))


# tokens per sequence in the long-sequence regime: past golden.spec.CHUNK_TOKENS, up to two chunks
LONG_SEQUENCE_TOKENS = st.integers(CHUNK_TOKENS + 1, 2 * CHUNK_TOKENS + 3)


# ---- SSM_CONV ---------------------------------------------------------------------------------------
@st.composite
def ssm_conv_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    d_conv = draw(st.sampled_from([4, 4, 1, 2, 3, 5]))  # Mamba uses 4
    d_inner = draw(st.one_of(st.sampled_from([1, 2, 3, 16, 31, 32, 33, 64, 128, 255, 256]), st.integers(1, 300)))
    n_s = draw(st.integers(1, 3))
    n_t = draw(st.integers(1, max(1, min(32, MAX_ELEMENTS // (d_inner * n_s) - d_conv + 1))))
    sx_layout = draw(input_layouts(catalogue.get(op).input_layouts))
    c_layout = draw(layouts(perms=ALL_PERMS))
    drawn = finish(draw, OpCase(op, (), dst=sig.dst))
    # the long-sequence regime (golden.spec.long_sequences), drawn after every other choice (see
    # strategies.long_row_branch): two or more sequences of more than one chunk of tokens
    long_sequences, long_t = one_in(draw, 4), draw(LONG_SEQUENCE_TOKENS)
    if long_sequences:
        n_s, n_t = max(2, n_s), long_t
        d_inner = max(1, min(d_inner, MAX_ELEMENTS // ((d_conv - 1 + n_t) * n_s)))
    sx = spec(sig.srcs[0], (d_conv - 1 + n_t, d_inner, n_s, 1), sx_layout)
    c = spec(sig.srcs[1], (d_conv, d_inner, 1, 1), c_layout)
    return special_branch(draw, replace(drawn, inputs=(sx, c)))


# ---- GATED_LINEAR_ATTN ------------------------------------------------------------------------------
@st.composite
def gla_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    size = draw(st.one_of(st.sampled_from([1, 4, 7, 8, 16, 17, 32, 64]), st.integers(1, 24)))  # off the SIMD width
    heads = draw(st.integers(1, max(1, min(4, MAX_ELEMENTS // (size * size)))))
    n_seqs = draw(st.integers(1, 3))
    per_seq = draw(st.one_of(st.just(1), st.integers(1, 12)))
    scale = draw(st.sampled_from([1.0, 0.125, 0.5, 2.0, float(size) ** -0.5]))
    drawn = finish(draw, OpCase(op, (), params=(("scale", f32(scale)),), dst=sig.dst))
    long_sequences, long_t = one_in(draw, 4), draw(LONG_SEQUENCE_TOKENS)  # as in ssm_conv_case
    if long_sequences:
        n_seqs, per_seq = max(2, n_seqs), long_t
        heads = max(1, min(heads, MAX_ELEMENTS // (size * n_seqs * per_seq)))
    tokens = n_seqs * per_seq
    qkvg = tuple(spec(t, (size, heads, tokens, 1)) for t in sig.srcs[:4])
    state = spec(sig.srcs[4], (size * size * heads, n_seqs, 1, 1))
    return special_branch(draw, replace(drawn, inputs=(*qkvg, state)))


# the gate regime per distribution: decay range, and whether exact resets (0) and holds (1) are mixed in
GATE_RANGES = {"uniform": (0.5, 1.0), "dense": (0.0, 1.0), "wide": (0.95, 1.0), "special": (0.0, 1.0)}


def gla_inputs(case: OpCase, rng: np.random.Generator) -> list[np.ndarray]:
    """k, v, q and the state from the case's distribution; the gate g in [0, 1] (GLA's decay), long
    memory (g near 1, where the state error accumulates) under ``wide``, exact 0 and 1 under ``special``."""
    op = catalogue.get(case.op)
    k, v, q = (floats(rng, t, case.distribution, op.specials) for t in case.inputs[:3])
    lo, hi = GATE_RANGES[case.distribution]
    g = rng.uniform(lo, hi, size=case.inputs[3].np_shape)
    if case.distribution == "special":
        pick = rng.random(g.shape)
        g = np.where(pick < 0.2, 0.0, np.where(pick > 0.8, 1.0, g))
    state = floats(rng, case.inputs[4], case.distribution, op.specials)
    return [k, v, q, dtypes.round_to(g, case.inputs[3].dtype), state]


PARTIAL_RHS = (33, 47, 63, 65, 95)
# ---- SOLVE_TRI --------------------------------------------------------------------------------------
@st.composite
def solve_tri_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    n = draw(st.one_of(st.sampled_from([1, 2, 3, 5, 8, 16, 17, 31, 32, 33, 64]), st.integers(1, 48)))
    rhs = draw(st.one_of(st.sampled_from([1, 2, 3, 16, 32, 33, 64]), st.integers(1, 24)))
    b2 = draw(st.integers(1, max(1, min(3, MAX_ELEMENTS // (n * max(n, rhs))))))
    b3 = draw(st.integers(1, 2))
    a = spec(sig.srcs[0], (n, n, b2, b3))
    # one case in 3: right-hand sides over one 32-wide tile with a partial last tile
    # (golden.ssm.SOLVE_TRI_RHS_TILE), drawn last so the usual draws and the shrink target stay
    partial = draw(st.sampled_from(PARTIAL_RHS))
    if one_in(draw, 3):
        rhs = partial
        b2 = min(b2, max(1, MAX_ELEMENTS // (n * max(n, rhs))))
    b = spec(sig.srcs[1], (rhs, n, b2, b3))
    case = finish(draw, OpCase(op, (a, b), dst=sig.dst))
    # the grid-limit regime, drawn last: 65,537 small systems (one block per system)
    many, small_n, small_rhs = one_in(draw, GRID_EVERY), draw(st.integers(1, 3)), draw(st.integers(1, 2))
    if not many or n > SOLVE_TRI_RHS_TILE or rhs > SOLVE_TRI_RHS_TILE:  # a partial-tile case stays one
        return case
    systems = GRID_ROWS + 2
    return replace(case, inputs=(spec(sig.srcs[0], (small_n, small_n, systems, 1)),
                                 spec(sig.srcs[1], (small_rhs, small_n, systems, 1))))


def _triangle(rng: np.random.Generator, shape: tuple[int, ...], regime: str) -> np.ndarray:
    """Lower triangle and diagonal of one regime (the strict upper part is filled by the caller)."""
    n = shape[-1]
    sign = rng.choice(np.array([-1.0, 1.0]), size=shape[:-1])
    if regime == "special":  # integer entries, many zeros, power-of-two pivots: exact products
        lower = rng.integers(-2, 3, size=shape).astype(np.float64)
        diag = sign * rng.choice(np.array([1.0, 2.0, 4.0]), size=shape[:-1])
    else:
        lower = rng.uniform(-1.0, 1.0, size=shape)
        diag = sign * rng.uniform(1.0, 2.0, size=shape[:-1])
        if regime == "uniform":  # diagonally dominant: |T⁻¹||T| near the identity
            lower = lower / n
        elif regime == "wide":  # small pivots on about a quarter of the diagonal
            lower = lower / np.sqrt(n)
            small = rng.random(shape[:-1]) < 0.25
            diag = np.where(small, sign * 10.0 ** rng.uniform(-4.0, -1.0, size=shape[:-1]), diag)
        # "dense": O(1) entries, the conditioning of a random triangle (exponential in n) until capped
    t = np.tril(lower, -1)
    idx = np.arange(n)
    t[..., idx, idx] = diag
    return t


def solve_tri_inputs(case: OpCase, rng: np.random.Generator) -> list[np.ndarray]:
    """A triangle of the case's regime (distribution: uniform = diagonally dominant, dense = random O(1)
    entries, wide = small pivots, special = integers), its strict lower part halved until its f32 error
    bound exists (‖γ_n·|T⁻¹||T|‖_∞ ≤ 0.1: as ill-conditioned as f32 can still be judged), junk in the
    strict upper triangle that ggml never reads (NaN under ``special``), and b from the distribution."""
    a_spec, b_spec = case.inputs
    shape = a_spec.np_shape
    n = shape[-1]
    t = _triangle(rng, shape, case.distribution)
    strict_lower = np.tril(np.ones((n, n), bool), -1)
    while True:
        t = dtypes.round_to(t, a_spec.dtype)
        amplification = ssm.gamma(n) * ssm.triangular_conditioning(t)
        if amplification.sum(axis=-1).max() <= SOLVE_TRI_MAX_AMPLIFICATION:
            break
        t = np.where(strict_lower, t * 0.5, t)
    junk = np.nan if case.distribution == "special" else rng.uniform(-100.0, 100.0, size=shape)
    a = np.where(np.triu(np.ones((n, n), bool), 1), junk, t)
    b = floats(rng, b_spec, case.distribution)
    return [dtypes.round_to(a, a_spec.dtype), b]


register("CONV_TRANSPOSE_1D", group="conv_transpose_1d", draw=conv_transpose_case)
register("SSM_CONV", group="ssm_conv", draw=ssm_conv_case)
register("GATED_LINEAR_ATTN", group="gated_linear_attn", draw=gla_case, make_inputs=gla_inputs)
register("SOLVE_TRI", group="solve_tri", draw=solve_tri_case, make_inputs=solve_tri_inputs)

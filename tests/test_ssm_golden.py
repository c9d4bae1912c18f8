"""The goldens of CONV_TRANSPOSE_1D, SSM_CONV, GATED_LINEAR_ATTN and SOLVE_TRI against independent
formulations, and their error models' dependence on what they claim to track (tokens, conditioning)."""

from __future__ import annotations

import numpy as np

from golden import catalogue, conv, ssm
from golden.case import OpCase, TensorSpec

RNG = np.random.default_rng(7)


def test_conv_transpose_is_the_adjoint_of_a_strided_correlation() -> None:
    """⟨conv_transpose(a, b), y⟩ = ⟨b, strided_correlation(a, y)⟩ for every y: the defining property."""
    c_in, c_out, k, length, s0 = 3, 2, 4, 5, 3
    a = RNG.standard_normal((1, c_in, c_out, k))
    b = RNG.standard_normal((1, 1, c_in, length))
    out = conv.conv_transpose_1d(a, b, s0)
    assert out.shape == (1, 1, c_out, (length - 1) * s0 + k)
    y = RNG.standard_normal(out.shape[-2:])
    correlated = np.array([[sum(a[0, i, co, t] * y[co, l * s0 + t] for co in range(c_out) for t in range(k))
                            for l in range(length)] for i in range(c_in)])
    assert np.isclose(np.sum(out[0, 0] * y), np.sum(b[0, 0] * correlated), rtol=1e-12)


def test_conv_transpose_leaves_the_gaps_of_a_long_stride_zero() -> None:
    a, b = np.ones((1, 1, 1, 2)), np.ones((1, 1, 1, 3))
    assert conv.conv_transpose_1d(a, b, 4).ravel().tolist() == [1, 1, 0, 0, 1, 1, 0, 0, 1, 1]


def test_ssm_conv_is_a_causal_window_in_stored_kernel_order() -> None:
    d_conv, d_inner, n_t, n_s = 4, 3, 5, 2
    sx = RNG.standard_normal((1, n_s, d_inner, d_conv - 1 + n_t))
    c = RNG.standard_normal((1, 1, d_inner, d_conv))
    out = ssm.ssm_conv(sx, c)
    assert out.shape == (1, n_s, n_t, d_inner)
    for s in range(n_s):
        for t in range(n_t):
            for r in range(d_inner):
                assert np.isclose(out[0, s, t, r], sum(sx[0, s, r, t + j] * c[0, 0, r, j] for j in range(d_conv)))


def _gla_case(size: int, heads: int, tokens: int, n_seqs: int, scale: float = 0.5) -> OpCase:
    qkvg = tuple(TensorSpec("f32", (size, heads, tokens, 1)) for _ in range(4))
    state = TensorSpec("f32", (size * size * heads, n_seqs, 1, 1))
    return OpCase("GATED_LINEAR_ATTN", (*qkvg, state), params=(("scale", scale),))


def test_gla_without_decay_is_causal_linear_attention() -> None:
    """g = 1 and a zero state: o_t = scale·Σ_{τ≤t} (q_t·k_τ)·v_τ, and the final state is Σ k_τ v_τᵀ."""
    size, heads, tokens = 3, 2, 4
    case = _gla_case(size, heads, tokens, 1)
    k, v, q = (RNG.standard_normal((1, tokens, heads, size)) for _ in range(3))
    out = catalogue.evaluate(case, [k, v, q, np.ones_like(k), np.zeros((1, 1, 1, size * size * heads))])[0, 0]
    for t in range(tokens):
        for h in range(heads):
            want = 0.5 * sum((q[0, t, h] @ k[0, tau, h]) * v[0, tau, h] for tau in range(t + 1))
            assert np.allclose(out[t, h * size:(h + 1) * size], want)
    final = out[tokens:].reshape(heads, size, size)  # the state rows: [h][i][j]
    for h in range(heads):
        assert np.allclose(final[h], sum(np.outer(k[0, tau, h], v[0, tau, h]) for tau in range(tokens)))


def test_gla_sequences_start_from_their_own_state() -> None:
    """Two sequences of one token each: each output reads only its own initial state."""
    size = 2
    case = _gla_case(size, 1, 2, 2, scale=1.0)
    zeros = np.zeros((1, 2, 1, size))
    g = np.ones_like(zeros)
    q = np.ones_like(zeros)
    state = np.concatenate([np.full(size * size, 1.0), np.full(size * size, 10.0)]).reshape(1, 1, 2, -1)
    out = catalogue.evaluate(case, [zeros, zeros, q, g, state])[0, 0]
    assert out[0].tolist() == [2.0, 2.0] and out[1].tolist() == [20.0, 20.0]


def test_gla_allowance_grows_with_the_tokens() -> None:
    size = 4
    allowed = []
    for tokens in (1, 16):
        case = _gla_case(size, 1, tokens, 1)
        xs = [np.full((1, tokens, 1, size), 0.5) for _ in range(3)] + [np.full((1, tokens, 1, size), 0.99)]
        xs.append(np.zeros((1, 1, 1, size * size)))
        golden = catalogue.evaluate(case, xs)
        state_rows = slice(tokens, None)  # the final state: E_t relative to it, ~2u per token seen
        allowed.append(ssm.gla_model(case, xs, golden)[0, 0, state_rows] / np.abs(golden[0, 0, state_rows]))
    assert np.all(allowed[1] > 5 * allowed[0])


def test_solve_tri_reads_the_lower_triangle_only() -> None:
    n, rhs = 5, 3
    t = np.tril(RNG.standard_normal((1, 1, n, n)), -1) + 4 * np.eye(n)
    a = np.where(np.triu(np.ones((n, n), bool), 1), np.nan, t)
    b = RNG.standard_normal((1, 1, n, rhs))
    x = ssm.forward_substitution(a, b)
    assert np.allclose(t @ x, b, rtol=1e-13, atol=1e-13)


def test_solve_tri_allowance_follows_the_conditioning() -> None:
    """The same x solved through a dominant and a small-pivot triangle: the second is allowed more."""
    n = 6
    case = OpCase("SOLVE_TRI", (TensorSpec("f32", (n, n, 1, 1)), TensorSpec("f32", (1, n, 1, 1))))
    x = np.ones((1, 1, n, 1))
    dominant = np.eye(n) + np.tril(np.full((n, n), 0.1), -1)
    small_pivot = dominant.copy()
    small_pivot[2, 2] = 1e-3
    bounds = [ssm.solve_tri_model(case, [t[None, None], t @ x], x) for t in (dominant, small_pivot)]
    assert np.all(bounds[0] <= 8 * ssm.gamma(n))  # well-conditioned: a few γ_n of |x| = 1
    assert bounds[1].max() > 100 * bounds[0].max()

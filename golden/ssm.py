"""State-space and linear-attention ops: SSM_CONV (Mamba's causal depthwise conv), GATED_LINEAR_ATTN
(the gated linear-attention recurrence) and SOLVE_TRI (the triangular solve of chunked delta-net
attention).

Numpy shapes (ggml ne reversed):
- SSM_CONV: ``sx`` ggml [d_conv − 1 + n_t, d_inner, n_s] (numpy (1, n_s, d_inner, d_conv − 1 + n_t)),
  ``c`` ggml [d_conv, d_inner]; dst ggml [d_inner, n_t, n_s].
- GATED_LINEAR_ATTN: ``k, v, q, g`` ggml [S, H, T] (numpy (1, T, H, S)); ``state`` holds S·S·H·n_s
  values with ne1 = n_s (llama.cpp passes [S·S·H, n_s]), read flat as (n_s, H, S_k, S_v); dst ggml
  [S·H, T + S·n_s]: T rows of outputs, then the final states flat. Tokens belong to sequences in
  order, T/n_s each.
- SOLVE_TRI: ``a`` ggml [n, n, B2, B3] (numpy (B3, B2, n rows, n cols)), ``b`` ggml [k, n, B2, B3];
  dst like b. Solves ``tril(a)·x = b``: the strict upper triangle of ``a`` is never read.
"""

from __future__ import annotations

import math

import numpy as np

from golden.case import OpCase
from golden.spec import (
    SPECIAL_VALUES,
    InputLayouts,
    OpList,
    OpSpec,
    P,
    Regime,
    RegimeKind,
    long_sequences,
    partial_tile,
    sig,
)
from golden.tolerance import F32_EPS, Calibration, Tolerance, finite_abs

SPECS = OpList()
F32_UNDERFLOW = 2.0**-150  # the largest absolute error of one f32 rounding in the subnormal range


def gamma(n: int | np.ndarray, u: float = F32_EPS) -> float | np.ndarray:
    """Higham's γ_n = n·u/(1 − n·u): the relative error of n chained f32 roundings."""
    return n * u / (1.0 - n * u)


# ---- SSM_CONV ---------------------------------------------------------------------------------------
def ssm_conv(sx: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``dst[s, t, r] = Σ_j sx[s, r, t + j]·c[r, j]`` (j < d_conv): each channel's window of d_conv
    consecutive columns, the kernel in its stored order (c[r, 0] meets the oldest column)."""
    sx = np.asarray(sx, np.float64)[0]  # (n_s, d_inner, d_conv − 1 + n_t)
    c = np.asarray(c, np.float64)[0, 0]  # (d_inner, d_conv)
    windows = np.lib.stride_tricks.sliding_window_view(sx, c.shape[1], axis=-1)  # (n_s, d_inner, n_t, d_conv)
    with np.errstate(invalid="ignore", over="ignore"):
        out = np.einsum("srtj,rj->str", windows, c)
    return out[None]


def ssm_conv_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """A d_conv-term dot product in f32 in any order: ``γ_dconv·Σ_j|sx||c|`` (d_conv products, d_conv − 1
    additions), plus 2^-150 per rounding where the products fall in f32's subnormal range."""
    n = case.inputs[1].ne[0]
    with np.errstate(invalid="ignore", over="ignore"):
        return gamma(n) * ssm_conv(finite_abs(inputs[0]), finite_abs(inputs[1])) + (n + 1) * F32_UNDERFLOW


def _validate_ssm_conv(case: OpCase, inputs: list[np.ndarray]) -> None:
    sx, c = case.inputs[0].ne, case.inputs[1].ne
    if sx[3] != 1 or c[2] != 1 or c[3] != 1:
        raise ValueError(f"SSM_CONV: sx is 3-d and c a matrix (ggml asserts it); got {list(sx)} and {list(c)}")
    if sx[1] != c[1]:
        raise ValueError(f"SSM_CONV: sx ne1 = {sx[1]} (d_inner) must equal c ne1 = {c[1]}")
    if sx[0] < c[0] - 1:
        raise ValueError(f"SSM_CONV: sx ne0 = {sx[0]} is shorter than d_conv − 1 = {c[0] - 1}")


def _conv_tokens(case: OpCase) -> int:
    """SSM_CONV's new tokens per sequence: sx holds d_conv − 1 carried columns, then n_t tokens."""
    return case.inputs[0].ne[0] - case.inputs[1].ne[0] + 1


SPECS.add(OpSpec(
    name="SSM_CONV", family="ssm", golden=lambda xs, c: ssm_conv(xs[0], xs[1]),
    regimes=(long_sequences(_conv_tokens, lambda c: c.inputs[0].ne[2]), SPECIAL_VALUES),
    no_grid_regime="its grid is sequences × channel tiles (one block per 128 channels): 65,536 blocks needs 8 M "
                   "channels, beyond any model",
    signatures=(sig("f32", "f32"),),
    tolerance={"f32": Tolerance(
        "a d_conv-term dot product per output, f32 in any order: γ_dconv·Σ|sx||c| (+2^-150 per subnormal "
        "rounding); ggml CPU nightly: ≤ 0.998 at d_conv = 1 (one rounding: the bound is tight), ≤ 0.71 at "
        "d_conv = 4", model=ssm_conv_model, model_name="γ_dconv·Σ|sx||c|", calibration=Calibration.GGML_CPU)},
    validate=_validate_ssm_conv,
    notes="sx [d_conv − 1 + n_t, d_inner, n_s] and c [d_conv, d_inner] in any layout ggml accepts (sx 3-d, c a "
          "matrix); dst [d_inner, n_t, n_s] F32. The window of token t is sx columns t .. t + d_conv − 1, the "
          "kernel applied in stored order (no flip)"))


# ---- GATED_LINEAR_ATTN ------------------------------------------------------------------------------
def _per_sequence(x: np.ndarray, n_seqs: int) -> np.ndarray:
    """(1, T, H, S) → (n_s, T/n_s, H, S): tokens belong to sequences in order."""
    x = np.asarray(x, np.float64)[0]
    return x.reshape(n_seqs, x.shape[0] // n_seqs, *x.shape[1:])


def _gla_parts(case: OpCase, inputs: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    n_seqs = case.inputs[4].ne[1]
    k, v, q, g = (_per_sequence(x, n_seqs) for x in inputs[:4])
    heads, size = k.shape[2], k.shape[3]
    state = np.asarray(inputs[4], np.float64).reshape(n_seqs, heads, size, size)
    return k, v, q, g, state


def _gla_dst(outputs: np.ndarray, state: np.ndarray) -> np.ndarray:
    """Outputs (n_s, T/n_s, H, S) and final states (n_s, H, S, S) as ggml's [S·H, T + S·n_s] dst."""
    n_seqs, steps, heads, size = outputs.shape
    rows = np.concatenate([outputs.reshape(n_seqs * steps, heads * size), state.reshape(n_seqs * size, heads * size)])
    return rows[None, None]


def gated_linear_attn(case: OpCase, inputs: list[np.ndarray]) -> np.ndarray:
    """Per sequence, head and token t: ``S_t = diag(g_t)·S_{t−1} + k_t v_tᵀ`` (the gate decays row i of
    the state, the key index), then ``o_t = (scale·q_t)ᵀ S_t`` — the output reads the updated state."""
    k, v, q, g, state = _gla_parts(case, inputs)
    scale = float(case.param("scale"))
    outputs = np.empty_like(v)
    with np.errstate(invalid="ignore", over="ignore"):
        for t in range(k.shape[1]):
            state = state * g[:, t, :, :, None] + k[:, t, :, :, None] * v[:, t, :, None, :]
            outputs[:, t] = np.einsum("nhij,nhi->nhj", state, q[:, t] * scale)
    return _gla_dst(outputs, state)


def gla_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """Error of the recurrence, tracked per state entry. Each step rounds ``g·Ŝ + k·v`` at most twice
    (FMA: fewer), so with M_t = |g|·M_{t−1} + |k||v| (M_0 = |S_0|, the state's magnitude) the state error
    obeys ``E_t ≤ |g|·E_{t−1}·(1 + γ_2) + γ_2·M_t`` (+3·2^-150 where the product g·Ŝ, the product k·v and
    their sum each round in the subnormal range, where rounding is absolute, not relative): it grows about
    linearly with the tokens seen, ≤ 2t·u·M_t. A chunked evaluation that forms the gate products
    directly (γ_{t−τ+2} on the term of token τ) stays within the same bound. The output sums S terms
    ``Ŝ·fl(q·scale)``: ``Σ_i (E_t(1 + γ_{S+1}) + γ_{S+1}·M_t)·|q·scale|`` (+2S·2^-150: S products, S − 1
    additions and the scale, if applied last, each rounding absolutely in the subnormal range)."""
    k, v, q, g, state = (finite_abs(x) for x in _gla_parts(case, inputs))
    scale = abs(float(case.param("scale")))
    size = k.shape[3]
    g2, g_out = gamma(2), gamma(size + 1)
    magnitude, error = state, np.zeros_like(state)
    outputs = np.empty_like(v)
    with np.errstate(invalid="ignore", over="ignore"):
        for t in range(k.shape[1]):
            gate = g[:, t, :, :, None]
            magnitude = gate * magnitude + k[:, t, :, :, None] * v[:, t, :, None, :]
            error = gate * error * (1.0 + g2) + g2 * magnitude + 3 * F32_UNDERFLOW
            per_entry = error * (1.0 + g_out) + g_out * magnitude
            # fl(q·scale) in the subnormal range rounds absolutely (2^-150), times the state it multiplies
            reach = np.einsum("nhij->nhj", magnitude + error) * F32_UNDERFLOW
            outputs[:, t] = np.einsum("nhij,nhi->nhj", per_entry, q[:, t] * scale) + reach + 2 * size * F32_UNDERFLOW
    return _gla_dst(outputs, error)


def _validate_gla(case: OpCase, inputs: list[np.ndarray]) -> None:
    k = case.inputs[0].ne
    size, heads, tokens = k[0], k[1], k[2]
    for name, t in zip("vqg", case.inputs[1:4], strict=True):
        if t.ne[:3] != k[:3]:
            raise ValueError(f"GATED_LINEAR_ATTN: {name} ne {list(t.ne)} must match k's [S, H, T] = {list(k[:3])}")
    state = case.inputs[4]
    n_seqs = state.ne[1]
    if state.nelements != size * size * heads * n_seqs:
        raise ValueError(f"GATED_LINEAR_ATTN: the state holds {state.nelements} values, ggml asserts "
                         f"S·S·H·n_seqs = {size * size * heads * n_seqs} (n_seqs = state ne1)")
    if tokens % n_seqs:
        raise ValueError(f"GATED_LINEAR_ATTN: {tokens} tokens do not split into {n_seqs} equal sequences (ggml "
                         "assigns T/n_seqs tokens to each and would index past the state)")


def _gla_tokens_per_sequence(case: OpCase) -> int:
    return case.inputs[0].ne[2] // case.inputs[4].ne[1]


SPECS.add(OpSpec(
    name="GATED_LINEAR_ATTN", family="ssm", golden=lambda xs, c: gated_linear_attn(c, xs),
    regimes=(long_sequences(_gla_tokens_per_sequence, lambda c: c.inputs[4].ne[1]), SPECIAL_VALUES),
    no_grid_regime="its grid is heads × sequences, each block carrying a head's S×S state: 65,536 of them is "
                   "beyond any model's heads × parallel sequences",
    signatures=(sig("f32", "f32", "f32", "f32", "f32"),),
    tolerance={"f32": Tolerance(
        "the state recurrence S_t = g·S_{t−1} + k·v rounds twice a step: E_t ≤ |g|·E_{t−1}(1 + γ_2) + γ_2·M_t "
        "(M_t the state's magnitude, |g|·M_{t−1} + |k||v|), growing with the tokens; outputs add an S-term "
        "dot product with q·scale (γ_{S+1}); in the subnormal range each rounding is absolute (2^-150): 3 a "
        "state step, 2S in the output, and fl(q·scale)'s times the state (dev seed 24025: 1.6x without it); "
        "ggml CPU nightly: ≤ 0.96 at one token per sequence (two "
        "roundings, tight), ≤ 0.84 beyond four", model=gla_model,
        model_name="gla_recurrence(E_t, γ_{S+1})", calibration=Calibration.GGML_CPU)},
    params={"scale": P("factor on q (f32)")},
    validate=_validate_gla, input_layouts=InputLayouts.CONTIGUOUS, structured_inputs=True,
    specials=(0.0, -0.0),
    notes="k, v, q, g [S, H, T] and state [S·S·H, n_seqs], all contiguous (ggml asserts it); dst [S·H, T + S·n_seqs] "
          "F32: the outputs, then each sequence's final state. g is the per-key decay, drawn in [0, 1] with exact "
          "0 (reset) and 1 (no decay); NaN/inf are not drawn (a recurrence spreads them everywhere)"))


# ---- SOLVE_TRI --------------------------------------------------------------------------------------
def forward_substitution(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``x`` with ``tril(a)·x = b`` by rows in float64 (batched over the leading axes); only the lower
    triangle and diagonal of ``a`` are read. Componentwise within γ_n^(f64)·|T⁻¹||T||x| (Higham 8.5),
    ~2^-53·n·cond: negligible beside any f32 bound."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    x = np.zeros(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + b.shape[-2:])
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for i in range(b.shape[-2]):
            known = np.einsum("...t,...tk->...k", a[..., i, :i], x[..., :i, :])
            x[..., i, :] = (b[..., i, :] - known) / a[..., i, i][..., None]
    return x


def lower_triangle(a: np.ndarray) -> np.ndarray:
    """The triangle ggml solves with (the strict upper part, which may hold anything, as zeros)."""
    a = np.asarray(a, np.float64)
    return np.where(np.tril(np.ones(a.shape[-2:], bool)), a, 0.0)


def triangular_conditioning(a: np.ndarray) -> np.ndarray:
    """``|T⁻¹|·|T|`` per matrix (Skeel's componentwise condition matrix of the lower triangle T)."""
    t = lower_triangle(a)
    inverse = forward_substitution(t, np.broadcast_to(np.eye(t.shape[-1]), t.shape))
    return np.abs(inverse) @ np.abs(t)


def solve_tri_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """Substitution in any summation order is backward stable componentwise: (T + ΔT)·x̂ = b with
    |ΔT| ≤ γ_n·|T| (Higham, Thm 8.5; division included), so with C = |T⁻¹||T| the error obeys
    |Δx| ≤ γ_n·C·(|x| + |Δx|), i.e. ``|Δx| ≤ (I − γ_n·C)⁻¹·γ_n·C·|x|`` where ρ(γ_n·C) < 1 (the input
    maker keeps ‖γ_n·C‖_∞ ≤ 0.1; a triangle beyond that has no f32 bound and is allowed anything).
    The triangle's conditioning thus scales the allowance: diagonally dominant triangles get a few
    ulps, small pivots as many as they amplify. Subnormal roundings add (n + 1)·2^-150·|T⁻¹|·1."""
    a, x = inputs[0], np.abs(np.asarray(golden, np.float64))
    n = a.shape[-1]
    cond = gamma(n) * triangular_conditioning(a)
    with np.errstate(invalid="ignore", over="ignore"):
        allowed = np.linalg.solve(np.eye(n) - cond, cond @ np.where(np.isfinite(x), x, 0.0))
        t_inv = np.abs(forward_substitution(lower_triangle(a), np.broadcast_to(np.eye(n), a.shape)))
        allowed = allowed + (n + 1) * F32_UNDERFLOW * t_inv.sum(axis=-1, keepdims=True)
    diverges = np.abs(cond).sum(axis=-1).max(axis=-1) >= 1.0  # per matrix: no first-order bound
    allowed = np.where(diverges[..., None, None] | ~np.isfinite(allowed), np.inf, allowed)
    return np.broadcast_to(allowed, golden.shape)


def _validate_solve_tri(case: OpCase, inputs: list[np.ndarray]) -> None:
    a, b = case.inputs[0].ne, case.inputs[1].ne
    if a[0] != a[1]:
        raise ValueError(f"SOLVE_TRI: a must be square (ne0 = ne1); got {list(a)}")
    if a[1] != b[1] or a[2:] != b[2:]:
        raise ValueError(f"SOLVE_TRI: b ne1 and batch dims must match a's; got a {list(a)}, b {list(b)}")


# ggml-cuda's solve_tri and ggml-cann tile the right-hand sides 32 columns at a time
SOLVE_TRI_RHS_TILE = 32


SPECS.add(OpSpec(
    name="SOLVE_TRI", family="ssm", golden=lambda xs, c: forward_substitution(xs[0], xs[1]),
    signatures=(sig("f32", "f32"),),
    tolerance={"f32": Tolerance(
        "Higham's componentwise bound for substitution: |Δx| ≤ γ_n·|T⁻¹||T|·(|x| + |Δx|), solved for |Δx| "
        "from the case's own triangle (its conditioning sets the allowance); ggml CPU nightly: ≤ 0.99 at n = 1 "
        "(one division), ≤ 0.74 up to n = 8, ≤ 0.17 beyond",
        model=solve_tri_model, model_name="(I − γ_n|T⁻¹||T|)⁻¹·γ_n|T⁻¹||T|·|x|", calibration=Calibration.GGML_CPU)},
    validate=_validate_solve_tri, input_layouts=InputLayouts.CONTIGUOUS, structured_inputs=True,
    specials=(),
    regimes=(partial_tile("rhs", lambda c: c.inputs[1].ne[0], SOLVE_TRI_RHS_TILE),
             partial_tile("n", lambda c: c.inputs[0].ne[0], SOLVE_TRI_RHS_TILE),
             Regime("systems>65535", lambda c: math.prod(c.inputs[1].ne[2:]) > 65535,
                    "more systems (dims 2 and 3) than one grid dimension has blocks", RegimeKind.GRID)),
    notes="a [n, n, B2, B3] and b [k, n, B2, B3], contiguous F32 (ggml asserts it, and left = lower = True, "
          "uni = False: the only variant ggml 0.20.2 builds; ggml-cann claims F32, the only type). The strict "
          "upper triangle of a is never read: the input maker fills it with junk (NaN in the special "
          "distribution). Triangles are drawn diagonally dominant, moderate, with small pivots, and "
          "integer-valued, with ‖γ_n|T⁻¹||T|‖_∞ ≤ 0.1 so every drawn case has an f32 bound"))

"""Numerics ops: NORM, RMS_NORM, GROUP_NORM, SOFT_MAX, DIAG_MASK_INF, ROPE, MUL_MAT, IM2COL, POOL_2D,
TIMESTEP_EMBEDDING: their case strategies and the input makers of those whose inputs have structure.

Each strategy constructs valid cases that reach the op's parameter corners (ALiBi with odd head
counts, masks taller than the input, partial rotation, YaRN, blocked GQA broadcast, padding-only
pooling windows...). Shapes stay ≤ 32k elements per tensor so the ci profile runs in seconds, but
in the regime branches (one case in about 3: partial tiles of MUL_MAT, ROPE, GROUP_NORM and IM2COL, and
just over 65,536 elements). Inputs
are drawn from the case's seed, and the case's distribution picks the regime, so the case id alone
reproduces the bytes.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st

from conformance.cases.registry import register
from conformance.data import floats, plain_input
from conformance.strategies import (
    GRID_EVERY,
    ROW_KEEPING_PERMS,
    divisor_of,
    f32,
    finish,
    grid_shape,
    input_layouts,
    layouts,
    long_row_branch,
    many_rows_branch,
    many_weight_rows,
    nightly_sizes,
    one_in,
    partial_tiles,
    row_size,
    shapes,
    spec,
    special_branch,
    weight_names,
)
from golden import catalogue, dtypes, formats, quant, rope
from golden.case import Layout, OpCase
from golden.conv import conv_output_size, pool_output_size
from golden.spec import GRID_BLOCKS, GRID_ROWS, Signature

MAX_ELEMENTS = 1 << 15
# the in-place constructor (ggml_*_inplace) on a copy of the input, a quarter of the time
INPLACE_FORM = st.sampled_from(["", "", "", "inplace"])
EPS = st.sampled_from([1e-5, 1e-6, 1e-12, 1e-3, 0.5])


def _divisor(draw: st.DrawFn, n: int) -> int:
    return draw(divisor_of(n))


# ---- NORM, RMS_NORM, GROUP_NORM --------------------------------------------------------------------
GROUP_TILED = (33, 17)  # ne0, ne1 of GROUP_NORM's partial-tile branch (two channels per group)


@st.composite
def norm_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    if op == "GROUP_NORM":
        ne0, ne1 = draw(st.integers(1, 32)), draw(st.integers(1, 16))
        channels = draw(st.integers(1, max(1, min(40, MAX_ELEMENTS // (ne0 * ne1)))))
        ne = (ne0, ne1, channels, draw(st.integers(1, 2)))
        n_groups = draw(st.integers(1, channels + 3))
        if one_in(draw, GRID_EVERY):  # a partial tile: groups of 33·17·2 = 1,122 elements (past 1,024 threads)
            ne = (GROUP_TILED[0], GROUP_TILED[1], max(channels, 4), ne[3])
            n_groups = ne[2] // 2
        params: tuple = (("n_groups", n_groups), ("eps", f32(draw(EPS))))
    else:
        ne = draw(shapes())
        params = (("eps", f32(draw(EPS))),)
    form = draw(INPLACE_FORM) if op == "RMS_NORM" else ""
    # in place, the kernel sees the ggml_dup's contiguous copy: the input's layout would test only the dup
    lay = Layout() if form else draw(input_layouts(catalogue.get(op).input_layouts))
    case = finish(draw, OpCase(op, (spec(sig.srcs[0], ne, lay),), params=params, dst=sig.dst, form=form))
    if op != "GROUP_NORM":
        return special_branch(draw, many_rows_branch(draw, long_row_branch(draw, case)))
    many, width = one_in(draw, GRID_EVERY), draw(st.sampled_from((1, 2)))  # drawn last (see long_row_branch)
    if not many or ne[:2] == GROUP_TILED:  # a partial-tile case stays one
        return case
    # the grid-limit regime: one block per group, 65,537 groups of one channel each
    groups = GRID_ROWS + 2
    return replace(case, inputs=(spec(sig.srcs[0], (width, 1, groups, 1)),),
                   params=(("n_groups", groups), ("eps", case.param("eps"))))


# ---- SOFT_MAX, DIAG_MASK_INF -----------------------------------------------------------------------
VOCAB_ROWS = (4096, 8192, 32000, 32768)  # long softmax rows the ci profile keeps
NIGHTLY_VOCAB_ROWS = (151936, 200000, 202048, 262144)  # vocabulary-wide rows (Qwen, Llama-4, Gemma)
MASK_EXTRA_ROWS = st.sampled_from([0, 0, 1, 3])
MAX_BIASES = st.sampled_from([0.0, 0.0, 8.0, 0.5, 2.0, 1.0, 3.0])
SOFT_MAX_SCALES = st.one_of(st.sampled_from([1.0, 0.125, 0.08838835, 2.0]), st.floats(0.015625, 4.0, width=32))


@st.composite
def soft_max_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    # both regimes drawn, bounds fixed and clamped: the choices do not depend on the branch (shrinking)
    vocab = draw(st.sampled_from(VOCAB_ROWS + (NIGHTLY_VOCAB_ROWS if nightly_sizes() else ())))
    vocab_heads, vocab_rows = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    row = draw(row_size(max_ne0=1024))
    row_heads = draw(st.integers(1, 12))  # 3, 5, 6, 7, 12... reach ALiBi's second slope segment
    rows = min(draw(st.integers(1, 8)), max(1, MAX_ELEMENTS // (row * row_heads * 2)))
    if one_in(draw, 6):  # a vocabulary-wide row: one or two heads of one or two rows
        ne0, heads, ne1 = vocab, vocab_heads, vocab_rows
    else:
        ne0, heads, ne1 = row, row_heads, rows
    ne3 = draw(st.integers(1, 2))
    ne = (ne0, ne1, heads, ne3)
    inputs = [spec("f32", ne)]
    has_mask = len(sig.srcs) > 1
    if has_mask:
        mask_ne = (ne0, ne1 + draw(MASK_EXTRA_ROWS), _divisor(draw, heads), _divisor(draw, ne3))
        inputs.append(spec(sig.srcs[1], mask_ne))
    has_sinks = draw(st.booleans())
    if has_sinks:
        inputs.append(spec("f32", (heads, 1, 1, 1)))
    max_bias = draw(MAX_BIASES) if has_mask else 0.0
    scale = draw(SOFT_MAX_SCALES)
    params = (("scale", f32(scale)), ("max_bias", f32(max_bias)), ("mask", has_mask), ("sinks", has_sinks))
    form = draw(INPLACE_FORM)
    case = finish(draw, OpCase("SOFT_MAX", tuple(inputs), params=params, dst=sig.dst, form=form))
    return many_rows_branch(draw, case, inputs=(0, 1) if has_mask else (0,))  # the mask keeps its extra rows


@st.composite
def diag_mask_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    ne = draw(shapes(max_ne0=512))
    ne = grid_shape(draw) or ne  # the grid-limit regime
    params = (("n_past", draw(st.integers(0, ne[0] + 1))),)
    src = spec(sig.srcs[0], ne, draw(input_layouts(catalogue.get(op).input_layouts)))
    return finish(draw, OpCase("DIAG_MASK_INF", (src,), params=params, dst=sig.dst))


# ---- ROPE -------------------------------------------------------------------------------------------
# head sizes of real models, and 1024 beyond the 896 that ggml-cann accepts (drawn: recorded as declined)
ROPE_HEAD_DIMS = (2, 4, 8, 16, 32, 64, 80, 96, 128, 256, 1024)
# a 640-wide head: past one 512-element tile (a CUDA rope block of 256 threads, a pair each), not a multiple of
# it; with 4 heads and 26 tokens, 66,560 elements (past the grid limit)
ROPE_TILED = (640, 4, 26)
ROPE_MODES = (rope.NORMAL, rope.NEOX, rope.MROPE, rope.VISION, rope.IMROPE)


def _nightly() -> bool:
    """Long profiles (nightly) reach model-sized tensors; ci and dev keep the float64 golden cheap."""
    return settings().max_examples > 100


@st.composite
def _rope_sections(draw: st.DrawFn, mode: int, n_dims: int, ne0: int) -> tuple[int, int, int, int]:
    """[t, h, w, e] pair counts: most often covering the rotated pairs exactly (Qwen2-VL, Qwen3-VL,
    vision encoders), else fewer (sectors wrap around) or a few more (late sections unused)."""
    n_pairs = n_dims if mode == rope.VISION else n_dims // 2
    total = draw(st.one_of(st.just(n_pairs), st.just(n_pairs), st.integers(1, max(1, min(ne0, n_pairs + 4)))))
    cuts = sorted(draw(st.lists(st.integers(0, total), min_size=3, max_size=3)))
    if mode == rope.VISION:
        cuts[1] = cuts[2] = total  # [y, x, 0, 0]: ggml.h says the last two are ignored
    elif not draw(st.booleans()):
        cuts[2] = total  # no e section, as in the models that use these modes
    if cuts[2] == 0:
        cuts[2] = total  # s0 + s1 + s2 > 0
    return (cuts[0], cuts[1] - cuts[0], cuts[2] - cuts[1], total - cuts[2])


@st.composite
def rope_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    mode = draw(st.sampled_from(ROPE_MODES))
    head_dim = draw(st.one_of(st.sampled_from(ROPE_HEAD_DIMS), st.integers(1, 64).map(lambda k: 2 * k)))
    tiled = one_in(draw, GRID_EVERY)  # the head-tile and grid regimes: 640-wide heads, 66,560 elements
    if tiled:
        head_dim = ROPE_TILED[0]
    if mode == rope.VISION:  # n_dims = ne0/2 must be even
        head_dim = 4 * max(1, head_dim // 4)
        n_dims = head_dim // 2
    else:
        n_dims = draw(st.one_of(st.just(head_dim), st.integers(1, head_dim // 2).map(lambda k: 2 * k)))
    budget = (1 << 20) if _nightly() else MAX_ELEMENTS  # nightly: up to 128 heads or 8192 tokens
    max_heads, max_tokens = (128, 8192) if _nightly() else (16, 16)
    ne3 = draw(st.integers(1, 2))
    heads = draw(st.integers(1, max(1, min(max_heads, budget // (head_dim * 2)))))
    tokens = draw(st.integers(1, max(1, min(max_tokens, budget // (head_dim * heads * ne3)))))
    if tiled:
        heads, tokens, ne3 = ROPE_TILED[1], ROPE_TILED[2], 1
    ne = (head_dim, heads, tokens, ne3)
    lay = draw(input_layouts(catalogue.get("ROPE").input_layouts))
    multi = mode in rope.MULTI_SECTION_MODES
    inputs = [spec(sig.srcs[0], ne, lay), spec("i32", (tokens * (4 if multi else 1), 1, 1, 1))]
    has_ff = draw(st.booleans())
    if has_ff:
        factors = n_dims if mode == rope.VISION else n_dims // 2  # VISION reads one per rotated pair
        inputs.append(spec("f32", (factors + draw(st.sampled_from([0, 0, 3])), 1, 1, 1)))
    ext_factor = draw(st.one_of(st.sampled_from([0.0, 0.0, 1.0, 0.5]), st.floats(0.015625, 1.0, width=32)))
    if ext_factor:
        n_ctx_orig = draw(st.sampled_from([2048, 4096, 8192, 32768, 0]))  # 0: logf(0) = −inf ramp ends
        beta_fast, beta_slow = draw(st.sampled_from([(32.0, 1.0), (16.0, 2.0), (32.0, 2.0), (1.0, 1.0), (8.0, 8.0),
                                                     (32.0, 32.0)]))  # β_fast = β_slow: a one-pair ramp
    else:
        n_ctx_orig = draw(st.sampled_from([0, 4096]))
        beta_fast, beta_slow = draw(st.sampled_from([(0.0, 0.0), (32.0, 1.0)]))
    params: tuple = (
        ("n_dims", n_dims), ("mode", mode), ("n_ctx_orig", n_ctx_orig),
        ("freq_base", f32(draw(st.sampled_from([10000.0, 500000.0, 1e6, 100.0])))),
        ("freq_scale", f32(draw(st.sampled_from([1.0, 1.0, 0.25, 0.5, 0.125, 2.0, 4.0, 8.0])))),
        ("ext_factor", f32(ext_factor)),
        ("attn_factor", f32(draw(st.sampled_from([1.0, 1.4245, 0.8, 2.0])))),
        ("beta_fast", f32(beta_fast)), ("beta_slow", f32(beta_slow)), ("freq_factors", has_ff),
    )
    if multi:
        params += (("sections", draw(_rope_sections(mode, n_dims, head_dim))),)
    return finish(draw, OpCase("ROPE", tuple(inputs), params=params, dst=sig.dst))


# ---- MUL_MAT ----------------------------------------------------------------------------------------
DEEP_K = (4097, 6144, 8192)


@st.composite
def big_mul_mat_case(draw: st.DrawFn, sig: Signature) -> OpCase:
    """Deep dot products: K to 8192 with a row or two in ci; in nightly weights of up to 4096 rows and
    src1 of up to 512 (ggml's m, n, k to 4096, 512, 8192), at most 16M weight elements."""
    if nightly_sizes():
        k = draw(st.one_of(st.sampled_from((4096, 5120, 8192)), st.integers(1024, 8192)))
        n = draw(st.one_of(st.sampled_from((1024, 2048, 4096)), st.integers(1, 4096)))
        n = max(1, min(n, (1 << 24) // k))
        m = draw(st.one_of(st.sampled_from((1, 7, 32, 512)), st.integers(1, 512)))
    else:
        k, n, m = draw(st.sampled_from(DEEP_K)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    a = spec(sig.srcs[0], (k, n, 1, 1), name=draw(weight_names))
    b = spec(sig.srcs[1], (k, m, 1, 1))
    return OpCase("MUL_MAT", (a, b), dst=sig.dst)  # the caller draws its data (finish)


@st.composite
def mul_mat_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    big = draw(big_mul_mat_case(sig))  # drawn either way: the choices do not depend on the branch
    k = draw(row_size(max_ne0=4096))
    a2, a3 = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    r2, r3 = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    n = min(draw(st.integers(1, 16)), max(1, MAX_ELEMENTS // (k * a2 * a3)))  # fixed bounds, clamped
    m = min(draw(st.integers(1, 8)), max(1, MAX_ELEMENTS // (k * a2 * r2 * a3 * r3)))
    lay = draw(input_layouts(catalogue.get("MUL_MAT").input_layouts))
    a = spec(sig.srcs[0], (k, n, a2, a3), lay, draw(weight_names))
    b_layout = draw(layouts(perms=ROW_KEEPING_PERMS))
    b = spec(sig.srcs[1], (k, m, a2 * r2, a3 * r3), b_layout)
    tiles = partial_tiles(draw)  # the partial-tile regimes (golden.matmul.MATMUL_TILES)
    use_big = one_in(draw, 32 if nightly_sizes() else 8)  # nightly's take seconds each: a dozen per test
    if use_big:
        case = finish(draw, big)
    else:
        if tiles:
            tk, rows, cols = tiles
            a, b = spec(sig.srcs[0], (tk, rows, 1, 1), lay, a.name), spec(sig.srcs[1], (tk, cols, 1, 1), b_layout)
        case = finish(draw, OpCase("MUL_MAT", (a, b), dst=sig.dst))
    # the grid-limit regime, drawn last: a vocabulary-sized projection of one or two tokens (float weights
    # only: a quantized one would be millions of elements of K-quant blocks in every third case)
    grid_k, tokens = many_weight_rows(draw), draw(st.integers(1, 2))
    if grid_k is None or sig.quantized or tiles or use_big:  # a partial-tile or big case stays one
        return case
    return replace(case, inputs=(spec(sig.srcs[0], (grid_k, GRID_ROWS + 2, 1, 1), name=a.name),
                                 spec(sig.srcs[1], (grid_k, tokens, 1, 1))))


def same_sign_operands(case: OpCase) -> bool:
    """A quarter of the data seeds give MUL_MAT operands of one sign (|a| and |b|): every product is
    positive, |Σab| = Σ|a||b|, so the γ_K bound is tight, and an F16 accumulator (rounding to 2^-11 of
    a partial sum that only grows) errs by ~2^-12·√K·Σ|a||b|, far past it."""
    return case.data_seed % 4 == 0


def mul_mat_inputs(case: OpCase, rng: np.random.Generator) -> list[np.ndarray]:
    out = [plain_input(rng, t, case) for t in case.inputs]
    if not same_sign_operands(case):
        return out
    for i, t in enumerate(case.inputs):
        if dtypes.is_quantized(t.dtype) and t.dtype not in dtypes.DRAWN_QUANT_TYPES:
            # a weight format: |values| quantized again where the golden has its quantizer (raw random
            # blocks have no sign to fold); the others keep their mixed-sign weights
            fmt = formats.get(t.dtype)
            if fmt.quantize is not None:
                values = fmt.dequantize(np.asarray(out[i], np.uint8).ravel(), t.nelements)
                raw = fmt.quantize(np.abs(values).reshape(-1, t.ne[0]), "reference")
                out[i] = raw.reshape(np.shape(out[i]))
        elif dtypes.is_quantized(t.dtype):  # Q weights: quantize |values| again, block by block
            values = quant.dequantize(np.asarray(out[i], np.uint8).ravel(), t.dtype, t.nelements)
            raw = quant.quantize(np.abs(values).astype(np.float32).reshape(-1, t.ne[0]), t.dtype)
            out[i] = raw.reshape(np.shape(out[i]))
        else:
            out[i] = np.abs(out[i])
    return out


# ---- IM2COL, POOL_2D --------------------------------------------------------------------------------
IM2COL_TILED_CHANNELS = 13
POOL_GRID_SIDE = 262  # a 262 × 262 plane at stride 1: at least 258² = 66,564 outputs


@st.composite
def _window(draw: st.DrawFn, size: int, *, max_k: int = 5) -> tuple[int, int, int, int]:
    """(k, s, p, d) with at least one output position along a dim of ``size``."""
    s, p, d = draw(st.integers(1, 3)), draw(st.integers(0, 3)), draw(st.integers(1, 3))
    reach = size + 2 * p  # d·(k−1) + 1 ≤ reach
    k = draw(st.integers(1, max(1, min(max_k, (reach - 1) // d + 1))))
    return k, s, p, d


@st.composite
def im2col_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    is_2d = draw(st.booleans())
    ic, oc, batch = draw(st.integers(1, 4)), draw(st.integers(1, 3)), draw(st.integers(1, 2))
    iw = draw(st.integers(1, 32 if is_2d else 96))
    kw, s0, p0, d0 = draw(_window(iw))
    if is_2d:
        ih = draw(st.integers(1, 32))
        kh, s1, p1, d1 = draw(_window(ih))
        kernel_ne, data_ne = (kw, kh, ic, oc), (iw, ih, ic, batch)
        out = ic * kh * kw * conv_output_size(iw, kw, s0, p0, d0) * conv_output_size(ih, kh, s1, p1, d1) * batch
    else:
        s1 = p1 = d1 = 0
        kernel_ne, data_ne = (kw, ic, oc, 1), (iw, ic, batch, 1)
        out = ic * kw * conv_output_size(iw, kw, s0, p0, d0) * batch
    if out > MAX_ELEMENTS:
        data_ne = data_ne[:3] + (1,) if is_2d else data_ne
    if one_in(draw, GRID_EVERY):  # 13·5·5 = 325 columns (a partial 256 tile) × 16·16 outputs: 83,200 elements
        is_2d, (kw, s0, p0, d0), (kh, s1, p1, d1) = True, (5, 1, 0, 1), (5, 1, 0, 1)
        kernel_ne, data_ne = (5, 5, IM2COL_TILED_CHANNELS, oc), (20, 20, IM2COL_TILED_CHANNELS, 1)
    kernel = spec(sig.srcs[0], kernel_ne)
    data = spec(sig.srcs[1], data_ne, draw(input_layouts(catalogue.get("IM2COL").input_layouts)))
    params = (("s0", s0), ("s1", s1), ("p0", p0), ("p1", p1), ("d0", d0), ("d1", d1), ("is_2d", is_2d))
    return finish(draw, OpCase("IM2COL", (kernel, data), params=params, dst=sig.dst))


@st.composite
def pool_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    ne = (draw(st.integers(1, 32)), draw(st.integers(1, 32)), draw(st.integers(1, 4)), draw(st.integers(1, 2)))
    params: list = [("op", draw(st.sampled_from([0, 1])))]
    dims = []
    for size in ne[:2]:
        p = draw(st.sampled_from([0.0, 0.0, 1.0, 2.0, 0.5, 1.7, 1.2]))
        k = draw(st.integers(1, max(1, min(5, int(size + 2 * p)))))
        s = draw(st.integers(1, 3))
        assert pool_output_size(size, k, s, p) >= 1
        dims.append((k, s, p))
    (k0, s0, p0), (k1, s1, p1) = dims
    if one_in(draw, GRID_EVERY):  # the grid-limit regime: one big plane at stride 1
        ne, s0, s1 = (POOL_GRID_SIDE, POOL_GRID_SIDE, 1, 1), 1, 1
    params += [("k0", k0), ("k1", k1), ("s0", s0), ("s1", s1), ("p0", f32(p0)), ("p1", f32(p1))]
    lay = draw(input_layouts(catalogue.get("POOL_2D").input_layouts))
    return finish(draw, OpCase("POOL_2D", (spec(sig.srcs[0], ne, lay),), params=tuple(params), dst=sig.dst))


# ---- TIMESTEP_EMBEDDING -----------------------------------------------------------------------------
@st.composite
def timestep_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    dim = draw(st.one_of(st.sampled_from([1, 2, 3, 8, 9, 128, 255, 256, 320]), st.integers(1, 512)))
    n = draw(st.integers(1, max(1, min(64, MAX_ELEMENTS // dim))))
    if one_in(draw, GRID_EVERY):  # the grid-limit regime: just over 65,536 outputs of rows 1,024 or 4,097 wide
        dim = 1024 if dim <= 1024 else 4097
        n = GRID_BLOCKS // dim + 1
    params = (("dim", dim), ("max_period", draw(st.sampled_from([10000, 10000, 1000, 100, 2]))))
    t = spec(sig.srcs[0], (n, 1, 1, 1), draw(input_layouts(catalogue.get("TIMESTEP_EMBEDDING").input_layouts)))
    return finish(draw, OpCase("TIMESTEP_EMBEDDING", (t,), params=params, dst=sig.dst))


# ROPE positions per distribution: a prompt at a small offset, anywhere in a 4k context, anywhere
# up to 64k (long-context models), and the edges mixed in
POSITION_RANGES = {"uniform": 64, "dense": 4096, "wide": 65536, "special": 65536}


def _main_input(case: OpCase, rng: np.random.Generator) -> np.ndarray:
    spec = case.inputs[0]
    op = catalogue.get(case.op)
    return floats(rng, spec, case.distribution, op.specials, op.max_abs_input)


def rope_inputs(case: OpCase, rng: np.random.Generator) -> list[np.ndarray]:
    x = _main_input(case, rng)
    n_tokens = case.inputs[0].ne[2]
    n_rows = case.inputs[1].ne[0] // n_tokens  # 4 position rows (t, h, w, e) in the multi-section modes
    top = POSITION_RANGES[case.distribution]
    start = int(rng.integers(0, top))
    if case.distribution == "uniform":  # consecutive prompt positions (t); an image's rows and columns (h, w)
        pos = start + np.arange(n_tokens)
        if n_rows > 1:
            index, width = np.arange(n_tokens), int(rng.integers(1, n_tokens + 1))
            pos = np.concatenate([pos, start + index // width, start + index % width, rng.integers(0, 4, n_tokens)])
    else:
        pos = rng.integers(0, top, size=n_tokens * n_rows)
    if case.distribution == "special":
        edges = np.array([0, 1, 4095, 4096, 32767, 65535])
        where = rng.random(pos.size) < 0.3
        pos = np.where(where, rng.choice(edges, size=pos.size), pos)
    out = [x, pos.astype(np.int32).reshape(case.inputs[1].np_shape)]
    if len(case.inputs) > 2:  # freq factors: llama-3 style divisors between 1 and 8 (and some below 1)
        ff = rng.uniform(0.5, 8.0, size=case.inputs[2].np_shape)
        out.append(dtypes.round_to(ff, case.inputs[2].dtype))
    return out


def _mask(rng: np.random.Generator, np_shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Additive mask: values in [−1, 1] (test-backend-ops' range) with −inf blocks: causal with an
    offset, random columns, and now and then a fully masked row."""
    m = rng.uniform(-1.0, 1.0, size=np_shape)
    kind = rng.integers(0, 4)
    rows, cols = np_shape[-2], np_shape[-1]
    if kind == 1:  # causal: column j > row i + offset is masked
        offset = int(rng.integers(0, max(1, cols)))
        m = np.where(np.arange(cols)[None, :] > np.arange(rows)[:, None] + offset, -np.inf, m)
    elif kind == 2:  # random −inf blocks
        m = np.where(rng.random(np_shape) < 0.3, -np.inf, m)
    elif kind == 3:  # causal plus some fully masked rows
        m = np.where(np.arange(cols)[None, :] > np.arange(rows)[:, None], -np.inf, m)
        full = rng.random(np_shape[:-1]) < 0.2
        m = np.where(full[..., None], -np.inf, m)
    return dtypes.round_to(m, dtype)


def soft_max_inputs(case: OpCase, rng: np.random.Generator) -> list[np.ndarray]:
    out = [_main_input(case, rng)]
    if case.param("mask"):
        spec = case.inputs[1]
        out.append(_mask(rng, spec.np_shape, spec.dtype))
    if case.param("sinks"):
        spec = case.inputs[-1]
        out.append(dtypes.round_to(rng.uniform(-4.0, 4.0, size=spec.np_shape), spec.dtype))
    return out


TIMESTEP_RANGES = {"uniform": (0.0, 1000.0), "dense": (0.0, 1.0), "wide": (-1000.0, 1000.0), "special": (0.0, 1000.0)}


def timestep_inputs(case: OpCase, rng: np.random.Generator) -> list[np.ndarray]:
    spec = case.inputs[0]
    lo, hi = TIMESTEP_RANGES[case.distribution]
    t = rng.uniform(lo, hi, size=spec.np_shape)
    if case.distribution == "uniform":
        t = np.floor(t)  # diffusion schedulers' integer steps
    if case.distribution == "special":
        where = rng.random(t.shape) < 0.2
        t = np.where(where, rng.choice(np.array([0.0, -0.0, 1.0, 999.0]), size=t.shape), t)
    return [dtypes.round_to(t, spec.dtype)]


register("NORM", "RMS_NORM", "GROUP_NORM", group="norm", draw=norm_case)
register("SOFT_MAX", group="soft_max", draw=soft_max_case, make_inputs=soft_max_inputs)
register("DIAG_MASK_INF", group="diag_mask_inf", draw=diag_mask_case)
register("ROPE", group="rope", draw=rope_case, make_inputs=rope_inputs)
register("MUL_MAT", group="mul_mat", draw=mul_mat_case, make_inputs=mul_mat_inputs)
register("IM2COL", group="im2col", draw=im2col_case)
register("POOL_2D", group="pool_2d", draw=pool_case)
register("TIMESTEP_EMBEDDING", group="timestep_embedding", draw=timestep_case, make_inputs=timestep_inputs)

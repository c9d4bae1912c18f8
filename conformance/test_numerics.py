"""Numerics ops: NORM, RMS_NORM, GROUP_NORM, SOFT_MAX, DIAG_MASK_INF, ROPE, MUL_MAT, IM2COL, POOL_2D,
TIMESTEP_EMBEDDING.

Each strategy constructs valid cases that reach the op's parameter corners (ALiBi with odd head
counts, masks taller than the input, partial rotation, YaRN, blocked GQA broadcast, padding-only
pooling windows...). Shapes stay ≤ 32k elements per tensor so the ci profile runs in seconds.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import conformance.inputs_numerics  # noqa: F401  (registers the input makers)
from conformance.strategies import (
    ROW_KEEPING_PERMS,
    f32,
    finish,
    layouts,
    layouts_for,
    row_size,
    shapes,
    spec,
    weight_names,
)
from conformance.suite import op_signatures
from golden import catalogue
from golden.case import Layout, OpCase
from golden.catalogue import Signature
from golden.conv import conv_output_size, pool_output_size

MAX_ELEMENTS = 1 << 15
EPS = st.sampled_from([1e-5, 1e-6, 1e-12, 1e-3, 0.5])


def _divisor(draw: st.DrawFn, n: int) -> int:
    return draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]))


# ---- NORM, RMS_NORM, GROUP_NORM --------------------------------------------------------------------
@st.composite
def norm_case(draw: st.DrawFn, op: str, sig: Signature) -> OpCase:
    if op == "GROUP_NORM":
        ne0, ne1 = draw(st.integers(1, 32)), draw(st.integers(1, 16))
        channels = draw(st.integers(1, max(1, min(40, MAX_ELEMENTS // (ne0 * ne1)))))
        ne = (ne0, ne1, channels, draw(st.integers(1, 2)))
        params: tuple = (("n_groups", draw(st.integers(1, channels + 3))), ("eps", f32(draw(EPS))))
    else:
        ne = draw(shapes())
        params = (("eps", f32(draw(EPS))),)
    lay = draw(layouts_for(catalogue.get(op).layouts))
    return finish(draw, OpCase(op, (spec(sig.srcs[0], ne, lay),), params=params, out_dtype=sig.dst))


@pytest.mark.parametrize(("op", "sig"), op_signatures(("NORM", "RMS_NORM", "GROUP_NORM")))
@given(data=st.data())
def test_norm(conform, op: str, sig: Signature, data: st.DataObject) -> None:
    conform.check(data.draw(norm_case(op, sig), label="case"))


# ---- SOFT_MAX, DIAG_MASK_INF -----------------------------------------------------------------------
@st.composite
def soft_max_case(draw: st.DrawFn, sig: Signature) -> OpCase:
    ne0 = draw(row_size(max_ne0=1024))
    heads = draw(st.integers(1, 12))  # 3, 5, 6, 7, 12... reach ALiBi's second slope segment
    ne1 = draw(st.integers(1, max(1, min(8, MAX_ELEMENTS // (ne0 * heads * 2)))))
    ne3 = draw(st.integers(1, 2))
    ne = (ne0, ne1, heads, ne3)
    inputs = [spec("f32", ne)]
    has_mask = len(sig.srcs) > 1
    if has_mask:
        mask_ne = (ne0, ne1 + draw(st.sampled_from([0, 0, 1, 3])), _divisor(draw, heads), _divisor(draw, ne3))
        inputs.append(spec(sig.srcs[1], mask_ne))
    has_sinks = draw(st.booleans())
    if has_sinks:
        inputs.append(spec("f32", (heads, 1, 1, 1)))
    max_bias = draw(st.sampled_from([0.0, 0.0, 8.0, 0.5, 2.0])) if has_mask else 0.0
    scale = draw(st.one_of(st.sampled_from([1.0, 0.125, 0.08838835, 2.0]), st.floats(0.015625, 4.0, width=32)))
    params = (("scale", f32(scale)), ("max_bias", f32(max_bias)), ("mask", has_mask), ("sinks", has_sinks))
    return finish(draw, OpCase("SOFT_MAX", tuple(inputs), params=params, out_dtype=sig.dst))


@st.composite
def diag_mask_case(draw: st.DrawFn, sig: Signature) -> OpCase:
    ne = draw(shapes(max_ne0=512))
    params = (("n_past", draw(st.integers(0, ne[0] + 1))),)
    return finish(draw, OpCase("DIAG_MASK_INF", (spec(sig.srcs[0], ne),), params=params, out_dtype=sig.dst))


@pytest.mark.parametrize(("op", "sig"), op_signatures(("SOFT_MAX",)))
@given(data=st.data())
def test_soft_max(conform, op: str, sig: Signature, data: st.DataObject) -> None:
    conform.check(data.draw(soft_max_case(sig), label="case"))


@pytest.mark.parametrize(("op", "sig"), op_signatures(("DIAG_MASK_INF",)))
@given(data=st.data())
def test_diag_mask_inf(conform, op: str, sig: Signature, data: st.DataObject) -> None:
    conform.check(data.draw(diag_mask_case(sig), label="case"))


# ---- ROPE -------------------------------------------------------------------------------------------
@st.composite
def rope_case(draw: st.DrawFn, sig: Signature) -> OpCase:
    head_dim = draw(st.one_of(st.sampled_from([2, 4, 8, 16, 32, 64, 80, 96, 128, 256]),
                              st.integers(1, 64).map(lambda k: 2 * k)))
    n_dims = draw(st.one_of(st.just(head_dim), st.integers(1, head_dim // 2).map(lambda k: 2 * k)))
    heads = draw(st.integers(1, max(1, min(8, MAX_ELEMENTS // (head_dim * 8)))))
    tokens = draw(st.integers(1, max(1, min(8, MAX_ELEMENTS // (head_dim * heads * 2)))))
    ne = (head_dim, heads, tokens, draw(st.integers(1, 2)))
    inputs = [spec(sig.srcs[0], ne, draw(layouts_for(catalogue.get("ROPE").layouts))), spec("i32", (tokens, 1, 1, 1))]
    has_ff = draw(st.booleans())
    if has_ff:
        inputs.append(spec("f32", (n_dims // 2 + draw(st.sampled_from([0, 0, 3])), 1, 1, 1)))
    ext_factor = draw(st.sampled_from([0.0, 0.0, 1.0, 0.5]))
    if ext_factor:
        n_ctx_orig = draw(st.sampled_from([2048, 4096, 8192, 32768]))
        beta_fast, beta_slow = draw(st.sampled_from([32.0, 16.0])), draw(st.sampled_from([1.0, 2.0]))
    else:
        n_ctx_orig = draw(st.sampled_from([0, 4096]))
        beta_fast, beta_slow = draw(st.sampled_from([(0.0, 0.0), (32.0, 1.0)]))
    params = (
        ("n_dims", n_dims), ("mode", draw(st.sampled_from([0, 2]))), ("n_ctx_orig", n_ctx_orig),
        ("freq_base", f32(draw(st.sampled_from([10000.0, 500000.0, 1e6, 100.0])))),
        ("freq_scale", f32(draw(st.sampled_from([1.0, 1.0, 0.25, 0.5, 0.125])))),
        ("ext_factor", f32(ext_factor)),
        ("attn_factor", f32(draw(st.sampled_from([1.0, 1.4245, 0.8, 2.0])))),
        ("beta_fast", f32(beta_fast)), ("beta_slow", f32(beta_slow)), ("freq_factors", has_ff),
    )
    return finish(draw, OpCase("ROPE", tuple(inputs), params=params, out_dtype=sig.dst))


@pytest.mark.parametrize(("op", "sig"), op_signatures(("ROPE",)))
@given(data=st.data())
def test_rope(conform, op: str, sig: Signature, data: st.DataObject) -> None:
    conform.check(data.draw(rope_case(sig), label="case"))


# ---- MUL_MAT ----------------------------------------------------------------------------------------
@st.composite
def mul_mat_case(draw: st.DrawFn, sig: Signature) -> OpCase:
    k = draw(row_size(max_ne0=4096))
    a2, a3 = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    r2, r3 = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    n = draw(st.integers(1, max(1, min(16, MAX_ELEMENTS // (k * a2 * a3)))))
    m = draw(st.integers(1, max(1, min(8, MAX_ELEMENTS // (k * a2 * r2 * a3 * r3)))))
    a = spec(sig.srcs[0], (k, n, a2, a3), draw(layouts_for(catalogue.get("MUL_MAT").layouts)), draw(weight_names))
    b = spec(sig.srcs[1], (k, m, a2 * r2, a3 * r3), draw(layouts(perms=ROW_KEEPING_PERMS)))
    return finish(draw, OpCase("MUL_MAT", (a, b), out_dtype=sig.dst))


@pytest.mark.parametrize(("op", "sig"), op_signatures(("MUL_MAT",)))
@given(data=st.data())
def test_mul_mat(conform, op: str, sig: Signature, data: st.DataObject) -> None:
    conform.check(data.draw(mul_mat_case(sig), label="case"))


# ---- IM2COL, POOL_2D --------------------------------------------------------------------------------
@st.composite
def _window(draw: st.DrawFn, size: int, *, max_k: int = 5) -> tuple[int, int, int, int]:
    """(k, s, p, d) with at least one output position along a dim of ``size``."""
    s, p, d = draw(st.integers(1, 3)), draw(st.integers(0, 3)), draw(st.integers(1, 3))
    reach = size + 2 * p  # d·(k−1) + 1 ≤ reach
    k = draw(st.integers(1, max(1, min(max_k, (reach - 1) // d + 1))))
    return k, s, p, d


def packed_plane_layouts() -> st.SearchStrategy[Layout]:
    """2-D IM2COL data as ggml's CPU reads it: rows packed within each channel plane (it addresses
    row ih at ``ih·IW`` elements, ignoring nb1), channel and batch strides free."""
    return st.builds(
        lambda perm, pad, offset: Layout(perm=perm, pad=(0, *pad), offset=offset),
        st.sampled_from([(0, 1, 2, 3), (0, 1, 3, 2)]), st.tuples(*[st.integers(0, 3)] * 3), st.integers(0, 5))


@st.composite
def im2col_case(draw: st.DrawFn, sig: Signature) -> OpCase:
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
    kernel = spec(sig.srcs[0], kernel_ne)
    data = spec(sig.srcs[1], data_ne, draw(packed_plane_layouts() if is_2d else layouts_for("rows")))
    params = (("s0", s0), ("s1", s1), ("p0", p0), ("p1", p1), ("d0", d0), ("d1", d1), ("is_2d", is_2d))
    return finish(draw, OpCase("IM2COL", (kernel, data), params=params, out_dtype=sig.dst))


@st.composite
def pool_case(draw: st.DrawFn, sig: Signature) -> OpCase:
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
    params += [("k0", k0), ("k1", k1), ("s0", s0), ("s1", s1), ("p0", f32(p0)), ("p1", f32(p1))]
    lay = draw(layouts_for(catalogue.get("POOL_2D").layouts))
    return finish(draw, OpCase("POOL_2D", (spec(sig.srcs[0], ne, lay),), params=tuple(params), out_dtype=sig.dst))


@pytest.mark.parametrize(("op", "sig"), op_signatures(("IM2COL",)))
@given(data=st.data())
def test_im2col(conform, op: str, sig: Signature, data: st.DataObject) -> None:
    conform.check(data.draw(im2col_case(sig), label="case"))


@pytest.mark.parametrize(("op", "sig"), op_signatures(("POOL_2D",)))
@given(data=st.data())
def test_pool_2d(conform, op: str, sig: Signature, data: st.DataObject) -> None:
    conform.check(data.draw(pool_case(sig), label="case"))


# ---- TIMESTEP_EMBEDDING -----------------------------------------------------------------------------
@st.composite
def timestep_case(draw: st.DrawFn, sig: Signature) -> OpCase:
    dim = draw(st.one_of(st.sampled_from([1, 2, 3, 8, 9, 128, 255, 256, 320]), st.integers(1, 512)))
    n = draw(st.integers(1, max(1, min(64, MAX_ELEMENTS // dim))))
    params = (("dim", dim), ("max_period", draw(st.sampled_from([10000, 10000, 1000, 100, 2]))))
    t = spec(sig.srcs[0], (n, 1, 1, 1), draw(layouts_for(catalogue.get("TIMESTEP_EMBEDDING").layouts)))
    return finish(draw, OpCase("TIMESTEP_EMBEDDING", (t,), params=params, out_dtype=sig.dst))


@pytest.mark.parametrize(("op", "sig"), op_signatures(("TIMESTEP_EMBEDDING",)))
@given(data=st.data())
def test_timestep_embedding(conform, op: str, sig: Signature, data: st.DataObject) -> None:
    conform.check(data.draw(timestep_case(sig), label="case"))


# ---- anchors: the parameter corners where real CANN bugs sat ------------------------------------------
def _rope_params(n_dims: int, mode: int = 0, attn_factor: float = 1.0, ext_factor: float = 0.0,
                 freq_scale: float = 1.0) -> tuple:
    return (("n_dims", n_dims), ("mode", mode), ("n_ctx_orig", 32768), ("freq_base", 1e6),
            ("freq_scale", f32(freq_scale)), ("ext_factor", f32(ext_factor)), ("attn_factor", f32(attn_factor)),
            ("beta_fast", 32.0), ("beta_slow", 1.0), ("freq_factors", False))


def _soft_max(heads: int, mask: str, max_bias: float, sinks: bool = False) -> OpCase:
    inputs = [spec("f32", (64, 7, heads, 1)), spec(mask, (64, 9, heads // 2 if heads % 2 == 0 else 1, 1))]
    if sinks:
        inputs.append(spec("f32", (heads, 1, 1, 1)))
    params = (("scale", f32(0.125)), ("max_bias", f32(max_bias)), ("mask", True), ("sinks", sinks))
    return OpCase("SOFT_MAX", tuple(inputs), params=params, distribution="dense")


def _pool(op: int, k: int, s: int, p: float) -> OpCase:
    params = (("op", op), ("k0", k), ("k1", k), ("s0", s), ("s1", s), ("p0", f32(p)), ("p1", f32(p)))
    return OpCase("POOL_2D", (spec("f32", (13, 11, 3, 1)),), params=params, distribution="dense")


_TOKENS = spec("i32", (6, 1, 1, 1))
ANCHORS = [  # id (op first, so -k selects it), case; see shared/reference test-backend-ops-and-cann-bugs §2
    ("rope-B6-attn_factor_f16", OpCase("ROPE", (spec("f16", (128, 4, 6, 1)), _TOKENS),
                                       _rope_params(128, 2, attn_factor=1.4245, ext_factor=1.0, freq_scale=0.25),
                                       out_dtype="f16", distribution="dense")),
    ("rope-B6-noncontiguous", OpCase("ROPE", (spec("f32", (64, 4, 6, 1), Layout(perm=(0, 2, 1, 3), pad=(2, 0, 1, 0))),
                                              _TOKENS), _rope_params(64), distribution="wide")),
    ("rope-B7-partial_rotary", OpCase("ROPE", (spec("f32", (96, 2, 6, 1)), _TOKENS), _rope_params(32, 2))),
    ("soft_max-B10-alibi_f32_mask", _soft_max(8, "f32", 8.0)),
    ("soft_max-B11-alibi_6_heads_f16_mask", _soft_max(6, "f16", 8.0)),
    ("soft_max-alibi_48_heads_sinks", _soft_max(48, "f16", 8.0, sinks=True)),
    ("pool_2d-B5-avg_pad_over_half_kernel", _pool(1, 3, 2, 2.0)),
    ("pool_2d-max_padding_only_windows", _pool(0, 1, 1, 1.0)),
    ("im2col-B9-1d", OpCase("IM2COL", (spec("f16", (3, 4, 2, 1)), spec("f32", (50, 4, 2, 1))),
                            (("s0", 2), ("s1", 0), ("p0", 1), ("p1", 0), ("d0", 2), ("d1", 0), ("is_2d", False)),
                            out_dtype="f16")),
    ("rms_norm-B12-llama_row", OpCase("RMS_NORM", (spec("f32", (4096, 2, 1, 1)),), (("eps", f32(1e-6)),))),
    ("mul_mat-B4-permuted_f16_gqa", OpCase("MUL_MAT", (spec("f16", (128, 5, 2, 1), Layout(perm=(0, 2, 1, 3))),
                                                       spec("f32", (128, 3, 8, 1), Layout(perm=(0, 2, 1, 3)))))),
]


@pytest.mark.parametrize("case", [pytest.param(case, id=name) for name, case in ANCHORS])
def test_numerics_anchor(conform, case: OpCase) -> None:
    conform.check(case)

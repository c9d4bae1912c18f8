"""ggml constructors for the numerics ops (see golden/catalogue.py for the list).

Multi-input conventions (case.inputs order): SOFT_MAX takes a, then the mask when ``mask`` is set,
then the sinks when ``sinks`` is set; ROPE takes a, positions (four rows t, h, w, e in the
multi-section modes, built with ``ggml_rope_multi``), then freq factors when ``freq_factors`` is
set; IM2COL takes the kernel (shape only), then the data.
"""

from __future__ import annotations

import ctypes as C

from device.ggml.graph import P_CTX, P_TENSOR, Builder, GraphBuilder, prototype
from device.ggml.lib import TensorP
from golden import dtypes
from golden.case import OpCase

prototype("ggml_soft_max_ext_inplace", P_TENSOR, P_CTX, P_TENSOR, P_TENSOR, C.c_float, C.c_float)
prototype("ggml_rms_norm_inplace", P_TENSOR, P_CTX, P_TENSOR, C.c_float)


def _inplace_copy(g: GraphBuilder, a: TensorP) -> TensorP:
    """form=inplace: the in-place constructor runs on a ggml_dup of the input, so the in-place kernel
    (output aliasing its input) is what is checked and the input itself stays readable."""
    return g.lib.ggml_dup(g.ctx, a)


def _norm(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    return g.lib.ggml_norm(g.ctx, srcs[0], case.param("eps"))


def _rms_norm(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    if case.form == "inplace":
        return g.call("ggml_rms_norm_inplace", g.ctx, _inplace_copy(g, srcs[0]), case.param("eps"))
    return g.lib.ggml_rms_norm(g.ctx, srcs[0], case.param("eps"))


def _group_norm(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    return g.lib.ggml_group_norm(g.ctx, srcs[0], case.param("n_groups"), case.param("eps"))


def _soft_max(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    mask = srcs[1] if case.param("mask") else None
    args = (mask, case.param("scale", 1.0), case.param("max_bias", 0.0))
    if case.form == "inplace":
        out = g.call("ggml_soft_max_ext_inplace", g.ctx, _inplace_copy(g, srcs[0]), *args)
    else:
        out = g.lib.ggml_soft_max_ext(g.ctx, srcs[0], *args)
    if case.param("sinks"):
        g.lib.ggml_soft_max_add_sinks(out, srcs[-1])
    return out


def _diag_mask_inf(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    return g.lib.ggml_diag_mask_inf(g.ctx, srcs[0], case.param("n_past"))


prototype("ggml_rope_ext_inplace", P_TENSOR, P_CTX, P_TENSOR, P_TENSOR, P_TENSOR, C.c_int, C.c_int, C.c_int,
          *(C.c_float,) * 6)
prototype("ggml_rope_multi", P_TENSOR, P_CTX, P_TENSOR, P_TENSOR, P_TENSOR, C.c_int, C.POINTER(C.c_int),
          C.c_int, C.c_int, C.c_float, C.c_float, C.c_float, C.c_float, C.c_float, C.c_float)


def _rope(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    p = case.params_dict
    freq_factors = srcs[2] if p.get("freq_factors") else None
    if "sections" in p:  # MROPE, VISION, IMROPE: ggml_rope_multi with int sections[4]
        sections = (C.c_int * 4)(*p["sections"])
        return g.call("ggml_rope_multi", g.ctx, srcs[0], srcs[1], freq_factors, p["n_dims"], sections, p["mode"],
                      p["n_ctx_orig"], p["freq_base"], p["freq_scale"], p["ext_factor"], p["attn_factor"],
                      p["beta_fast"], p["beta_slow"])
    # form=inplace: ggml_rope_ext_inplace, as llama.cpp's KV-cache shift rotates the cache's own view
    # (graph cases only: the op tier draws no such form)
    if case.form == "inplace":
        return g.call("ggml_rope_ext_inplace", g.ctx, srcs[0], srcs[1], freq_factors, p["n_dims"], p["mode"],
                      p["n_ctx_orig"], p["freq_base"], p["freq_scale"], p["ext_factor"], p["attn_factor"],
                      p["beta_fast"], p["beta_slow"])
    return g.lib.ggml_rope_ext(
        g.ctx, srcs[0], srcs[1], freq_factors, p["n_dims"], p["mode"], p["n_ctx_orig"], p["freq_base"],
        p["freq_scale"], p["ext_factor"], p["attn_factor"], p["beta_fast"], p["beta_slow"])


def _mul_mat(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    return g.lib.ggml_mul_mat(g.ctx, srcs[0], srcs[1])


def _im2col(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    p = case.params_dict
    return g.lib.ggml_im2col(g.ctx, srcs[0], srcs[1], p["s0"], p["s1"], p["p0"], p["p1"], p["d0"], p["d1"],
                             bool(p["is_2d"]), dtypes.GGML_TYPE_ID[case.dst])


def _pool_2d(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    p = case.params_dict
    return g.lib.ggml_pool_2d(g.ctx, srcs[0], p["op"], p["k0"], p["k1"], p["s0"], p["s1"], p["p0"], p["p1"])


def _timestep_embedding(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    return g.lib.ggml_timestep_embedding(g.ctx, srcs[0], case.param("dim"), case.param("max_period"))


BUILDERS: dict[str, Builder] = {
    "NORM": _norm,
    "RMS_NORM": _rms_norm,
    "GROUP_NORM": _group_norm,
    "SOFT_MAX": _soft_max,
    "DIAG_MASK_INF": _diag_mask_inf,
    "ROPE": _rope,
    "MUL_MAT": _mul_mat,
    "IM2COL": _im2col,
    "POOL_2D": _pool_2d,
    "TIMESTEP_EMBEDDING": _timestep_embedding,
}

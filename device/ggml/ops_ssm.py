"""ggml constructors for CONV_TRANSPOSE_1D and the state-space / linear-attention ops (SSM_CONV,
GATED_LINEAR_ATTN, SOLVE_TRI); golden/conv.py and golden/ssm.py give their semantics.

Input order is the constructor's: CONV_TRANSPOSE_1D (kernel, data); SSM_CONV (sx, c);
GATED_LINEAR_ATTN (k, v, q, g, state); SOLVE_TRI (a, b).
"""

from __future__ import annotations

import ctypes as C

from device.ggml.graph import P_CTX, P_TENSOR, Builder, GraphBuilder, prototype
from device.ggml.lib import TensorP
from golden.case import OpCase

prototype("ggml_conv_transpose_1d", P_TENSOR, P_CTX, P_TENSOR, P_TENSOR, C.c_int, C.c_int, C.c_int)
prototype("ggml_ssm_conv", P_TENSOR, P_CTX, P_TENSOR, P_TENSOR)
prototype("ggml_gated_linear_attn", P_TENSOR, P_CTX, P_TENSOR, P_TENSOR, P_TENSOR, P_TENSOR, P_TENSOR, C.c_float)
prototype("ggml_solve_tri", P_TENSOR, P_CTX, P_TENSOR, P_TENSOR, C.c_bool, C.c_bool, C.c_bool)


def _conv_transpose_1d(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    # ggml 0.20.2 asserts p0 == 0 and d0 == 1
    return g.call("ggml_conv_transpose_1d", g.ctx, srcs[0], srcs[1], case.param("s0"), 0, 1)


def _ssm_conv(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    return g.call("ggml_ssm_conv", g.ctx, srcs[0], srcs[1])


def _gated_linear_attn(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    return g.call("ggml_gated_linear_attn", g.ctx, *srcs[:5], case.param("scale"))


def _solve_tri(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    # left, lower, not unit-diagonal: the only variant ggml 0.20.2 builds (it asserts the rest away)
    return g.call("ggml_solve_tri", g.ctx, srcs[0], srcs[1], True, True, False)


BUILDERS: dict[str, Builder] = {
    "CONV_TRANSPOSE_1D": _conv_transpose_1d,
    "SSM_CONV": _ssm_conv,
    "GATED_LINEAR_ATTN": _gated_linear_attn,
    "SOLVE_TRI": _solve_tri,
}

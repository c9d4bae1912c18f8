"""ggml constructors for the attention family (golden/attention.py): FLASH_ATTN_EXT.

Inputs in case order: q, k, v, then the mask when ``mask`` is set, then the sinks when ``sinks`` is
set. ``prec`` goes through ``ggml_flash_attn_ext_set_prec`` and the sinks through
``ggml_flash_attn_ext_add_sinks``, the calls llama.cpp makes.
"""

from __future__ import annotations

import ctypes as C

from device.ggml.graph import P_CTX, P_TENSOR, Builder, GraphBuilder, prototype
from device.ggml.lib import TensorP
from golden.case import OpCase

GGML_PREC = {"default": 0, "f32": 10}  # enum ggml_prec (ggml.h 0.20.2)

prototype("ggml_flash_attn_ext", P_TENSOR, P_CTX, P_TENSOR, P_TENSOR, P_TENSOR, P_TENSOR,
          C.c_float, C.c_float, C.c_float)
prototype("ggml_flash_attn_ext_set_prec", None, P_TENSOR, C.c_int)
prototype("ggml_flash_attn_ext_add_sinks", None, P_TENSOR, P_TENSOR)


def _flash_attn_ext(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    q, k, v = srcs[:3]
    mask = srcs[3] if case.param("mask") else None
    out = g.call("ggml_flash_attn_ext", g.ctx, q, k, v, mask, case.param("scale"), case.param("max_bias"),
                 case.param("logit_softcap"))
    g.call("ggml_flash_attn_ext_set_prec", out, GGML_PREC[case.param("prec")])
    if case.param("sinks"):
        g.call("ggml_flash_attn_ext_add_sinks", out, srcs[-1])
    return out


BUILDERS: dict[str, Builder] = {"FLASH_ATTN_EXT": _flash_attn_ext}

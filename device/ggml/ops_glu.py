"""ggml constructors for GGML_OP_GLU: the fused form ``ggml_glu(a, op, swapped)`` and the split form
``ggml_glu_split(a, b, op)`` (case form ``split``)."""

from __future__ import annotations

import ctypes as C

from device.ggml.graph import P_CTX, P_TENSOR, Builder, GraphBuilder, prototype
from device.ggml.lib import TensorP
from golden.case import OpCase
from golden.glu import SPLIT

# enum ggml_glu_op (ggml.h 0.20.2); SWIGLU_OAI (3) takes extra parameters and is not one of these
GLU_OPS = {"REGLU": 0, "GEGLU": 1, "SWIGLU": 2, "GEGLU_ERF": 4, "GEGLU_QUICK": 5}

prototype("ggml_glu", P_TENSOR, P_CTX, P_TENSOR, C.c_int, C.c_bool)
prototype("ggml_glu_split", P_TENSOR, P_CTX, P_TENSOR, P_TENSOR, C.c_int)


def _glu(op: str) -> Builder:
    def build(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
        if case.form == SPLIT:
            return g.call("ggml_glu_split", g.ctx, srcs[0], srcs[1], GLU_OPS[op])
        return g.call("ggml_glu", g.ctx, srcs[0], GLU_OPS[op], bool(case.param("swapped", False)))

    return build


BUILDERS: dict[str, Builder] = {op: _glu(op) for op in GLU_OPS}

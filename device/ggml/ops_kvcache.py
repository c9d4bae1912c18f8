"""ggml constructors for the KV-cache family (golden/kvcache.py): SET_ROWS.

Inputs in case order: the destination (any row-contiguous view: a slice of a larger cache), the
source rows, the indices. ``ggml_set_rows`` returns a view of the destination, which is what the
device reads back as the result.
"""

from __future__ import annotations

from device.ggml.graph import P_CTX, P_TENSOR, Builder, GraphBuilder, prototype
from device.ggml.lib import TensorP
from golden.case import OpCase

prototype("ggml_set_rows", P_TENSOR, P_CTX, P_TENSOR, P_TENSOR, P_TENSOR)


def _set_rows(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    destination, source, indices = srcs
    return g.call("ggml_set_rows", g.ctx, destination, source, indices)


BUILDERS: dict[str, Builder] = {"SET_ROWS": _set_rows}

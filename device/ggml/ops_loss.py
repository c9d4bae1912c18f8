"""ggml constructors for the loss ops: CROSS_ENTROPY_LOSS takes the logits, then the labels."""

from __future__ import annotations

from device.ggml.graph import P_CTX, P_TENSOR, Builder, GraphBuilder, prototype
from device.ggml.lib import TensorP
from golden.case import OpCase

prototype("ggml_cross_entropy_loss", P_TENSOR, P_CTX, P_TENSOR, P_TENSOR)


def _cross_entropy_loss(g: GraphBuilder, srcs: list[TensorP], case: OpCase) -> TensorP:
    return g.call("ggml_cross_entropy_loss", g.ctx, srcs[0], srcs[1])


BUILDERS: dict[str, Builder] = {"CROSS_ENTROPY_LOSS": _cross_entropy_loss}

"""NORM → MUL → ADD and GROUP_NORM → MUL → ADD: a centred norm, then its affine weight and bias.

Shapes follow test-backend-ops' ``test_norm_mul_add`` and ``test_group_norm_mul_add``: NORM's weight
and bias one row broadcast over the rows (as llama.cpp's LayerNorm models) or full; GROUP_NORM's
one value per channel (ne2) broadcast over the spatial dims (as stable-diffusion's GroupNorm) or
full. ``order=wx`` swaps MUL's arguments, which a matcher must accept or refuse, never misread.
"""

from __future__ import annotations

from golden.case import Ne, TensorSpec
from golden.graphs.graph import CaseParams, Graph, GraphInput, GraphNode, Pattern
from golden.spec import P

PATTERNS: list[Pattern] = []


def _affine_ne(ne: Ne, how: str, pattern: str) -> Ne:
    shapes = {"row": (ne[0], 1, 1, 1), "channel": (1, 1, ne[2], 1), "full": ne}
    allowed = ("channel", "full") if pattern.startswith("group") else ("row", "full")
    if how not in allowed:
        raise ValueError(f"{pattern}: a weight or bias shape must be one of {', '.join(allowed)}, not {how!r}")
    return shapes[how]


def _norm_mul_add(case: CaseParams, op: str) -> Graph:
    ne, t, pattern = tuple(case.param("ne")), case.param("type"), case.pattern
    w, b, order = case.param("w"), case.param("b"), case.param("order")
    if order not in ("xw", "wx"):
        raise ValueError(f"{pattern}: order must be xw or wx, not {order!r}")
    if order == "wx" and w != "full":
        raise ValueError(f"{pattern}: order=wx needs w=full (ggml_mul broadcasts src1 only)")
    params: tuple[tuple[str, object], ...] = (("eps", case.param("eps")),)
    if op == "GROUP_NORM":
        groups = case.param("n_groups")
        if not 1 <= groups <= ne[2]:
            raise ValueError(f"{pattern}: n_groups must be 1..ne2 ({ne[2]}), not {groups}")
        params = (("n_groups", groups), *params)
    inputs = (GraphInput("x", TensorSpec(t, ne, name="x")),
              GraphInput("w", TensorSpec(t, _affine_ne(ne, w, pattern), name="w")),
              GraphInput("b", TensorSpec(t, _affine_ne(ne, b, pattern), name="b")))
    mul_srcs = ("w", "n0") if order == "wx" else ("n0", "w")
    nodes = (GraphNode("n0", op, ("x",), ne, params, dst=t), GraphNode("n1", "MUL", mul_srcs, ne, dst=t),
             GraphNode("n2", "ADD", ("n1", "b"), ne, dst=t))
    return Graph(inputs, nodes, ("n2",), (("n0", "n1", "n2"),))


_COMMON = {"type": P("dtype of the activations (and intermediates)", str),
           "ne": P("activation shape, ggml order", tuple),
           "order": P("MUL argument order: xw (norm first, as models) or wx (swapped)", str),
           "eps": P("epsilon added to the variance (f32, > 0)")}
PATTERNS.append(Pattern(
    "norm_mul_add", _COMMON | {"w": P("weight shape: row or full", str), "b": P("bias shape: row or full", str)},
    lambda c: _norm_mul_add(c, "NORM"), ("f32",),
    notes="LayerNorm with its affine weight and bias: norm(x)·w + b", fused_by="Metal (NORM+MUL+ADD)"))
PATTERNS.append(Pattern(
    "group_norm_mul_add",
    _COMMON | {"n_groups": P("groups over ne2 (the channels)", int),
               "w": P("weight shape: channel (one per ne2) or full", str),
               "b": P("bias shape: channel or full", str)},
    lambda c: _norm_mul_add(c, "GROUP_NORM"), ("f32",),
    notes="GroupNorm with its affine weight and bias (stable-diffusion's UNet)",
    fused_by="none known (test-backend-ops has the case)"))

"""unary → MUL and SSM_CONV (→ ADD) → SILU.

* ``unary_mul``: ``mul(unary(a), b)``, test-backend-ops' ``test_unary_mul``; CUDA fuses it for SILU,
  SIGMOID and SOFTPLUS (the gates of SwiGLU-like FFNs written without GLU).
* ``ssm_conv_silu``: Mamba's input convolution, ``silu(ssm_conv(sx, c) + bias)``, test-backend-ops'
  ``test_ssm_conv_bias_silu``; Vulkan and CUDA fuse SSM_CONV+ADD+SILU and SSM_CONV+SILU.
"""

from __future__ import annotations

from golden.case import Ne, TensorSpec
from golden.graphs.graph import CaseParams, Graph, GraphInput, GraphNode, Pattern
from golden.spec import P

PATTERNS: list[Pattern] = []
UNARY_GATES = ("SILU", "SIGMOID", "SOFTPLUS")


def _unary_mul(case: CaseParams) -> Graph:
    ne, t, op, b = tuple(case.param("ne")), case.param("type"), case.param("unary"), case.param("b")
    if op not in UNARY_GATES:
        raise ValueError(f"unary_mul: unary must be one of {', '.join(UNARY_GATES)}, not {op!r}")
    b_ne: Ne | None = {"row": (ne[0], 1, 1, 1), "full": ne}.get(b)
    if b_ne is None:
        raise ValueError(f"unary_mul: b must be row or full, not {b!r}")
    inputs = (GraphInput("a", TensorSpec(t, ne, name="a")), GraphInput("b", TensorSpec(t, b_ne, name="b")))
    nodes = (GraphNode("n0", op, ("a",), ne, dst=t), GraphNode("n1", "MUL", ("n0", "b"), ne, dst=t))
    return Graph(inputs, nodes, ("n1",), (("n0", "n1"),))


PATTERNS.append(Pattern(
    "unary_mul", {"type": P("dtype", str), "ne": P("shape of a, ggml order", tuple),
                  "unary": P("the gate: SILU, SIGMOID or SOFTPLUS", str),
                  "b": P("shape of b: row (broadcast) or full", str)},
    _unary_mul, ("f32",), notes="mul(unary(a), b)", fused_by="CUDA (SILU, SIGMOID, SOFTPLUS)"))


def _ssm_conv_silu(case: CaseParams) -> Graph:
    d_conv, d_inner, n_t, n_s = (case.param(k) for k in ("d_conv", "d_inner", "n_t", "n_s"))
    bias = case.param("bias")
    if not isinstance(bias, bool):
        raise ValueError(f"ssm_conv_silu: bias must be True or False, not {bias!r}")
    out: Ne = (d_inner, n_t, n_s, 1)
    inputs = [GraphInput("sx", TensorSpec("f32", (d_conv - 1 + n_t, d_inner, n_s, 1), name="sx")),
              GraphInput("c", TensorSpec("f32", (d_conv, d_inner, 1, 1), name="c"))]
    nodes = [GraphNode("n0", "SSM_CONV", ("sx", "c"), out)]
    if bias:
        inputs.append(GraphInput("bias", TensorSpec("f32", (d_inner, 1, 1, 1), name="bias")))
        nodes.append(GraphNode("n1", "ADD", ("n0", "bias"), out))
    nodes.append(GraphNode(f"n{len(nodes)}", "SILU", (nodes[-1].name,), out))
    names = tuple(n.name for n in nodes)
    return Graph(tuple(inputs), tuple(nodes), (names[-1],), (names,))


PATTERNS.append(Pattern(
    "ssm_conv_silu", {"type": P("dtype (f32: the only one SSM_CONV takes)", str),
                      "d_conv": P("convolution width", int), "d_inner": P("channels", int),
                      "n_t": P("tokens: 1 is decode", int), "n_s": P("sequences", int),
                      "bias": P("an ADD of the conv bias (one per channel) between conv and SILU", bool)},
    _ssm_conv_silu, ("f32",), notes="Mamba's conv: silu(ssm_conv(sx, c) + b)", fused_by="Vulkan, CUDA"))

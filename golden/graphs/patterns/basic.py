"""Norm, chain, matmul, softcap and GLU patterns: each expands a graph case into its
:class:`~golden.graphs.graph.Graph`.

Node order is the DFS post-order ``ggml_build_forward_expand`` gives llama.cpp's graphs (src0 before
src1), which is what a backend's fusion matcher sees (shared/reference/graph-and-fusion.md §1).
Shapes and variants follow test-backend-ops' fusion cases (``test_rms_norm_mul_add``,
``test_add_rms_norm``, ``test_bin_bcast`` with nf > 1, ``test_mul_mat_vec_fusion``, ``test_softcap``):
decode (one row) and prefill rows, broadcast weights and biases, and swapped argument orders that a
matcher must check before it fuses.

To add a pattern: write its expansion in a module of this package, list it in the module's
``PATTERNS`` with its params, and give it a strategy in ``conformance/graph_strategies.py``; the
suite, repro and the ggml device pick it up by name.
"""

from __future__ import annotations

from collections.abc import Callable

from golden.case import Ne, TensorSpec
from golden.graphs.graph import CaseParams, Graph, GraphInput, GraphNode, Pattern
from golden.spec import P

PATTERNS: list[Pattern] = []
ROW, FULL = "row", "full"  # a weight/bias of one row broadcast over the rows, or one per element


def _shape(case: CaseParams) -> Ne:
    return tuple(case.param("ne"))


def _bcast_ne(ne: Ne, how: str) -> Ne:
    if how == ROW:
        return (ne[0], 1, 1, 1)
    if how == FULL:
        return ne
    raise ValueError(f"broadcast variant {how!r} is neither {ROW} nor {FULL}")


def _ordered(first: str, second: str, swap: bool) -> tuple[str, str]:
    return (second, first) if swap else (first, second)


def _check_order(name: str, order: str, shape_of_second: str) -> bool:
    """``order`` swaps MUL/ADD's arguments; ggml_mul(a, b) broadcasts b only, so a swapped order needs
    a full-shape second argument."""
    if order not in ("xw", "wx"):
        raise ValueError(f"{name}: order must be xw or wx, not {order!r}")
    if order == "wx" and shape_of_second != FULL:
        raise ValueError(f"{name}: order=wx needs a full-shape weight (ggml broadcasts src1 only)")
    return order == "wx"


_TYPE = P("dtype of the activations (and intermediates)", str)
_NE = P("activation shape, ggml order [ne0,rows,...]", tuple)
_EPS = P("RMS_NORM epsilon (f32, > 0)")
_W = P("weight shape: row (one row broadcast over all rows) or full", str)
_ORDER = P("MUL/ADD argument order: xw (norm first, as llama.cpp) or wx (swapped)", str)


# ---- RMS_NORM → MUL (→ ADD) --------------------------------------------------------------------------

def _rms_norm_mul(case: CaseParams, with_add: bool) -> Graph:
    ne, t = _shape(case), case.param("type")
    w = case.param("w")
    swap = _check_order(case.pattern, case.param("order"), w)
    inputs = [GraphInput("x", TensorSpec(t, ne, name="x")), GraphInput("w", TensorSpec(t, _bcast_ne(ne, w), name="w"))]
    nodes = [GraphNode("n0", "RMS_NORM", ("x",), ne, (("eps", case.param("eps")),), dst=t),
             GraphNode("n1", "MUL", _ordered("n0", "w", swap), ne, dst=t)]
    if with_add:
        b = case.param("b")
        inputs.append(GraphInput("b", TensorSpec(t, _bcast_ne(ne, b), name="b")))
        nodes.append(GraphNode("n2", "ADD", ("n1", "b"), ne, dst=t))
    names = tuple(n.name for n in nodes)
    return Graph(tuple(inputs), tuple(nodes), (names[-1],), (names,))


PATTERNS.append(Pattern(
    "rms_norm_mul", {"type": _TYPE, "ne": _NE, "w": _W, "order": _ORDER, "eps": _EPS},
    lambda c: _rms_norm_mul(c, False), ("f32",),
    notes="llama's attn_norm/ffn_norm: y = rms_norm(x)·w", fused_by="Vulkan, CUDA, Metal, CPU (0.25+)"))
PATTERNS.append(Pattern(
    "rms_norm_mul_add",
    {"type": _TYPE, "ne": _NE, "w": _W, "order": _ORDER, "eps": _EPS, "b": P("bias shape: row or full", str)},
    lambda c: _rms_norm_mul(c, True), ("f32",),
    notes="rms_norm(x)·w + b", fused_by="CUDA, Metal"))


# ---- ADD → RMS_NORM (→ MUL) --------------------------------------------------------------------------

def _add_rms_norm(case: CaseParams, with_mul: bool) -> Graph:
    ne, t = _shape(case), case.param("type")
    b = case.param("b")
    inputs = [GraphInput("a", TensorSpec(t, ne, name="a")), GraphInput("b", TensorSpec(t, _bcast_ne(ne, b), name="b"))]
    nodes = [GraphNode("n0", "ADD", ("a", "b"), ne, dst=t),
             GraphNode("n1", "RMS_NORM", ("n0",), ne, (("eps", case.param("eps")),), dst=t)]
    if with_mul:
        w = case.param("w")
        swap = _check_order(case.pattern, case.param("order"), w)
        inputs.append(GraphInput("w", TensorSpec(t, _bcast_ne(ne, w), name="w")))
        nodes.append(GraphNode("n2", "MUL", _ordered("n1", "w", swap), ne, dst=t))
    names = tuple(n.name for n in nodes)
    return Graph(tuple(inputs), tuple(nodes), (names[-1],), (names[:2], names) if with_mul else (names,))


_B_ADD = P("second addend's shape: full (same shape; the only one CANN fuses) or row (broadcast)", str)
PATTERNS.append(Pattern(
    "add_rms_norm", {"type": _TYPE, "ne": _NE, "b": _B_ADD, "eps": _EPS},
    lambda c: _add_rms_norm(c, False), ("f32",),
    notes="residual add then norm, the sum used once", fused_by="CANN (GGML_CANN_OPERATOR_FUSION), Vulkan 1-row"))
PATTERNS.append(Pattern(
    "add_rms_norm_mul", {"type": _TYPE, "ne": _NE, "b": _B_ADD, "eps": _EPS, "w": _W, "order": _ORDER},
    lambda c: _add_rms_norm(c, True), ("f32",),
    notes="residual add, norm, weight", fused_by="CANN fuses the ADD+RMS_NORM part"))


# ---- chains of ADDs or MULs --------------------------------------------------------------------------

def _chain(op: str) -> Callable[[CaseParams], Graph]:
    def expand(case: CaseParams) -> Graph:
        ne, t, n = _shape(case), case.param("type"), case.param("n")
        if not 1 <= n <= 8:
            raise ValueError(f"{case.pattern}: n (the number of {op} nodes) must be 1..8, not {n}")
        addend = _bcast_ne(ne, case.param("b"))
        inputs = [GraphInput("x0", TensorSpec(t, ne, name="x0"))]
        inputs += [GraphInput(f"x{i}", TensorSpec(t, addend, name=f"x{i}")) for i in range(1, n + 1)]
        nodes, prev = [], "x0"
        for i in range(n):
            nodes.append(GraphNode(f"n{i}", op, (prev, f"x{i + 1}"), ne, dst=t))
            prev = f"n{i}"
        names = tuple(node.name for node in nodes)
        return Graph(tuple(inputs), tuple(nodes), (names[-1],), (names,) if n > 1 else ())
    return expand


_N_CHAIN = P("number of nodes in the chain (1..8)", int)
_B_CHAIN = P("shape of the later operands: full (what Vulkan's multi-add fuses) or row (broadcast)", str)
PATTERNS.append(Pattern("add_chain", {"type": _TYPE, "ne": _NE, "n": _N_CHAIN, "b": _B_CHAIN}, _chain("ADD"),
                 ("f32",), notes="x0 + x1 + ... + xn, left to right", fused_by="Vulkan (f32), CUDA, Metal"))
PATTERNS.append(Pattern("mul_chain", {"type": _TYPE, "ne": _NE, "n": _N_CHAIN, "b": _B_CHAIN}, _chain("MUL"),
                 ("f32",), notes="x0 · x1 · ... · xn, left to right", fused_by="CUDA"))


# ---- MUL_MAT → ADD(bias) ------------------------------------------------------------------------------

_WTYPE = P("weight dtype (activations are f32)", str)
_K = P("the dot-product length (ne0 of weight and activations)", int)
_M = P("output features (weight rows)", int)
_N = P("tokens: 1 is decode, more is prefill", int)


def _mul_mat_add(case: CaseParams) -> Graph:
    k, m, n, wt = case.param("k"), case.param("m"), case.param("n"), case.param("type")
    bias = case.param("bias")
    out: Ne = (m, n, 1, 1)
    bias_ne = {"vec": (m, 1, 1, 1), "full": out}.get(bias)
    if bias_ne is None:
        raise ValueError(f"mul_mat_add: bias must be vec (one row broadcast over tokens) or full, not {bias!r}")
    swap = case.param("order") == "bm"
    if swap and bias != "full":
        raise ValueError("mul_mat_add: order=bm needs bias=full (ggml broadcasts src1 only)")
    inputs = (GraphInput("w", TensorSpec(wt, (k, m, 1, 1), name="w")),
              GraphInput("x", TensorSpec("f32", (k, n, 1, 1), name="x")),
              GraphInput("bias", TensorSpec("f32", bias_ne, name="bias")))
    nodes = (GraphNode("n0", "MUL_MAT", ("w", "x"), out), GraphNode("n1", "ADD", _ordered("n0", "bias", swap), out))
    return Graph(inputs, nodes, ("n1",), (("n0", "n1"),))


PATTERNS.append(Pattern(
    "mul_mat_add", {"type": _WTYPE, "k": _K, "m": _M, "n": _N,
                    "bias": P("vec (plain bias, broadcast over tokens) or full (one per output)", str),
                    "order": P("mb: ADD(matmul, bias), as models; bm: ADD(bias, matmul)", str)},
    _mul_mat_add, ("f32", "f16"), notes="a projection with bias", fused_by="Vulkan (mat-vec), CUDA"))


# ---- softcap: SCALE → TANH → SCALE ---------------------------------------------------------------------

def _softcap(case: CaseParams) -> Graph:
    ne, cap = _shape(case), case.param("cap")
    if not cap > 0:
        raise ValueError(f"softcap: cap must be > 0, not {cap!r}")
    inputs = (GraphInput("x", TensorSpec("f32", ne, name="x")),)
    nodes = (GraphNode("n0", "SCALE", ("x",), ne, (("s", 1.0 / cap),)), GraphNode("n1", "TANH", ("n0",), ne),
             GraphNode("n2", "SCALE", ("n1",), ne, (("s", float(cap)),)))
    return Graph(inputs, nodes, ("n2",), (("n0", "n1", "n2"),))


PATTERNS.append(Pattern("softcap", {"type": _TYPE, "ne": _NE, "cap": P("the cap c: c·tanh(x/c), > 0")}, _softcap,
                        ("f32",),
                        notes="Gemma's logit softcap", fused_by="CUDA"))


# ---- gate and up MUL_MATs → GLU -------------------------------------------------------------------------

def _gate_up_glu(case: CaseParams) -> Graph:
    k, f, n, wt = case.param("k"), case.param("f"), case.param("n"), case.param("type")
    out: Ne = (f, n, 1, 1)
    inputs = (GraphInput("w_gate", TensorSpec(wt, (k, f, 1, 1), name="w_gate")),
              GraphInput("x", TensorSpec("f32", (k, n, 1, 1), name="x")),
              GraphInput("w_up", TensorSpec(wt, (k, f, 1, 1), name="w_up")))
    nodes = (GraphNode("n0", "MUL_MAT", ("w_gate", "x"), out), GraphNode("n1", "MUL_MAT", ("w_up", "x"), out),
             GraphNode("n2", "SWIGLU", ("n0", "n1"), out, form="split"))
    return Graph(inputs, nodes, ("n2",), (("n0", "n1", "n2"),))


PATTERNS.append(Pattern("gate_up_glu", {"type": _WTYPE, "k": _K, "f": P("FFN width (weight rows)", int), "n": _N},
                 _gate_up_glu, ("f32", "f16"), notes="SwiGLU FFN input: silu(W_gate·x) · (W_up·x)",
                 fused_by="CUDA (mat-vec)"))

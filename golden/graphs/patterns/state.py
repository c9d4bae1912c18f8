"""State between nodes and between graphs: ROPE graphs for the caches a backend keeps in its context.

ggml-cann keeps ROPE's sin/cos (theta) cache in the backend context and rebuilds it only when
``n_dims``, ``freq_base`` or the sections change (shared/reference/graph-and-fusion.md §1.3, llama.cpp #15629),
and its ACL graph cache matched graphs by tensor address (§3.2, llama.cpp #16166). test-backend-ops changes
``n_dims`` whenever it changes the other params and builds each case in a fresh graph, so it sees
neither. Two patterns:

* ``rope_pair``: two ROPE nodes in one graph with equal params (or differing only in ``freq_scale``
  or ``ext_factor``: ``second``) and their own position tensors, as llama.cpp rotates Q and K;
* ``rope_seq``: one ROPE node, the graph a sequence repeats with new data, other positions, other
  ``freq_scale``/``ext_factor`` or other strides (``lay``) in one device process
  (``conformance/test_graph_state.py``).

Positions are ``p0, p0+1, ...`` (a prompt at offset ``p0``), fixed by the params so that a case id
that differs only in its positions says so.
"""

from __future__ import annotations

from typing import Any

from golden.case import Layout, TensorSpec
from golden.graphs.graph import CaseParams, Graph, GraphInput, GraphNode, Pattern
from golden.spec import P

PATTERNS: list[Pattern] = []
SECOND = ("same", "freq_scale", "ext_factor")  # what the second ROPE node changes besides its positions
MODES = (0, 2)  # NORMAL and NEOX: the modes llama.cpp's text models use


def rope_params(case: CaseParams, freq_scale: float, ext_factor: float) -> tuple[tuple[str, Any], ...]:
    """A ROPE node's params: YaRN's n_ctx_orig and betas as llama.cpp passes them for a 4k model."""
    return (("n_dims", case.param("n_dims")), ("mode", case.param("mode")), ("n_ctx_orig", 4096),
            ("freq_base", case.param("freq_base")), ("freq_scale", freq_scale), ("ext_factor", ext_factor),
            ("attn_factor", 1.0), ("beta_fast", 32.0), ("beta_slow", 1.0), ("freq_factors", False))


def _check(case: CaseParams) -> tuple[int, int, int, int]:
    ne = tuple(case.param("ne"))
    if len(ne) != 4 or ne[3] != 1 or min(ne) < 1:
        raise ValueError(f"{case.pattern}: ne must be [head_dim, heads, tokens, 1], not {list(ne)}")
    n_dims, mode = case.param("n_dims"), case.param("mode")
    if mode not in MODES:
        raise ValueError(f"{case.pattern}: mode must be 0 (NORMAL) or 2 (NEOX), not {mode}")
    if n_dims % 2 or not 2 <= n_dims <= ne[0]:
        raise ValueError(f"{case.pattern}: n_dims must be even and in 2..head_dim ({ne[0]}), not {n_dims}")
    return ne


def _positions(start: int, tokens: int) -> tuple[int, ...]:
    if not 0 <= start < 2**20:
        raise ValueError(f"position offset {start} is outside 0..2^20")
    return tuple(range(start, start + tokens))


def _rope_pair(case: CaseParams) -> Graph:
    ne = _check(case)
    t, second = case.param("type"), case.param("second")
    p0, p1 = case.param("pos")
    if second not in SECOND:
        raise ValueError(f"rope_pair: second must be one of {', '.join(SECOND)}, not {second!r}")
    fs, ef = case.param("freq_scale"), case.param("ext_factor")
    fs2 = fs * 0.5 if second == "freq_scale" else fs  # exact in f32: a power of two
    ef2 = (0.0 if ef else 1.0) if second == "ext_factor" else ef
    tokens = ne[2]
    inputs = (GraphInput("q", TensorSpec(t, ne, name="q")),
              GraphInput("pos_q", TensorSpec("i32", (tokens, 1, 1, 1), name="pos_q"),
                         values=_positions(p0, tokens)),
              GraphInput("k", TensorSpec(t, ne, name="k")),
              GraphInput("pos_k", TensorSpec("i32", (tokens, 1, 1, 1), name="pos_k"),
                         values=_positions(p1, tokens)))
    nodes = (GraphNode("n0", "ROPE", ("q", "pos_q"), ne, rope_params(case, fs, ef), dst=t),
             GraphNode("n1", "ROPE", ("k", "pos_k"), ne, rope_params(case, fs2, ef2), dst=t))
    return Graph(inputs, nodes, ("n0", "n1"))


def _rope_seq(case: CaseParams) -> Graph:
    ne = _check(case)
    t = case.param("type")
    try:
        layout = Layout.from_label(case.param("lay"))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"rope_seq: lay {case.param('lay')!r} is not a layout label ({exc})") from None
    if layout.perm != (0, 1, 2, 3):
        raise ValueError("rope_seq: lay may pad or offset the input, not permute it")
    tokens = ne[2]
    inputs = (GraphInput("x", TensorSpec(t, ne, layout, name="x")),
              GraphInput("pos", TensorSpec("i32", (tokens, 1, 1, 1), name="pos"),
                         values=_positions(case.param("p0"), tokens)))
    nodes = (GraphNode("n0", "ROPE", ("x", "pos"), ne,
                       rope_params(case, case.param("freq_scale"), case.param("ext_factor")), dst=t),)
    return Graph(inputs, nodes, ("n0",))


_TYPE = P("dtype of the rotated tensors", str)
_NE = P("[head_dim, heads, tokens, 1]", tuple)
_COMMON = {"type": _TYPE, "ne": _NE, "n_dims": P("rotated leading dims (even)", int),
           "mode": P("0 NORMAL or 2 NEOX", int), "freq_base": P("θ base (f32)"), "freq_scale": P("θ scale (f32)"),
           "ext_factor": P("YaRN ramp mix (0 = off)")}

PATTERNS.append(Pattern(
    "rope_pair", _COMMON | {"pos": P("first positions of the two nodes [p_q, p_k]", tuple),
                            "second": P("same (equal params), freq_scale (halved) or ext_factor (toggled) on "
                                        "the second node", str)},
    _rope_pair, ("f32",),
    notes="Q and K rotated in one graph, each with its own positions: a sin/cos cache shared across nodes "
          "must not hand the second node the first's", fused_by="none (state, not fusion)"))
PATTERNS.append(Pattern(
    "rope_seq", _COMMON | {"p0": P("first position (positions p0, p0+1, ...)", int),
                           "lay": P("layout label of the rotated input: contiguous, pad[...], offs[...]", str)},
    _rope_seq, ("f32",),
    notes="one ROPE node; conformance/test_graph_state.py runs sequences of it in one device process",
    fused_by="none (state, not fusion)"))

"""RoPE chains into the KV cache: RMS_NORM → MUL → ROPE (→ VIEW → SET_ROWS) and ROPE → VIEW → SET_ROWS.

As llama.cpp builds them (node order from ``ggml_build_forward_expand`` over the cache write):

* ``rms_norm_mul_rope``: a per-head Q/K norm (Qwen3, OLMo-2, Gemma-3) ``rope(rms_norm(x)·w, pos)``
  over ``x`` [head_dim, n_head, n_tokens]; with ``set_rows`` the rotated K is viewed as
  [head_dim·n_head, n_tokens] and written into rows of an F16 cache [head_dim·n_head, n_kv] at
  I64 or I32 slot indices: test-backend-ops' ``test_rms_norm_mul_rope``; Vulkan and CUDA fuse the
  whole chain (RMS_NORM+MUL+ROPE+VIEW+SET_ROWS).
* ``rope_set_rows``: K without a norm: test-backend-ops' ``test_rope_set_rows``; Vulkan and CUDA
  fuse ROPE+VIEW+SET_ROWS (the matcher must check node order: llama.cpp #17322).

The cache is a graph input that SET_ROWS writes in place (``written``): the SET_ROWS node (a view of
the whole cache) is judged, so rows that must stay untouched are checked too.
"""

from __future__ import annotations

from golden.case import Ne, TensorSpec
from golden.graphs.graph import CaseParams, Graph, GraphInput, GraphNode, Pattern
from golden.spec import P

PATTERNS: list[Pattern] = []
MODES = (0, 2)  # NORMAL (llama), NEOX (Qwen, Gemma)


def _rope_params(case: CaseParams, head_dim: int) -> tuple[tuple[str, object], ...]:
    mode, n_dims = case.param("mode"), case.param("n_dims", head_dim)
    if mode not in MODES:
        raise ValueError(f"{case.pattern}: mode must be 0 (NORMAL) or 2 (NEOX), not {mode!r}")
    if not (0 < n_dims <= head_dim and n_dims % 2 == 0):
        raise ValueError(f"{case.pattern}: n_dims must be even and 2..head_dim ({head_dim}), not {n_dims}")
    return (("n_dims", n_dims), ("mode", mode), ("n_ctx_orig", 0), ("freq_base", case.param("freq_base")),
            ("freq_scale", 1.0), ("ext_factor", 0.0), ("attn_factor", 1.0), ("beta_fast", 32.0),
            ("beta_slow", 1.0), ("freq_factors", False))


def _into_cache(case: CaseParams, inputs: list[GraphInput], nodes: list[GraphNode], rotated: str,
                ne: Ne) -> tuple[str, ...]:
    """VIEW the rotated K as rows and SET_ROWS it into an F16 cache; the cache write's node names."""
    head_dim, n_head, n_tokens = ne[0], ne[1], ne[2]
    n_kv, idx = case.param("n_kv"), case.param("idx")
    if idx not in ("i64", "i32"):
        raise ValueError(f"{case.pattern}: idx must be i64 or i32, not {idx!r}")
    if n_kv < n_tokens:
        raise ValueError(f"{case.pattern}: n_kv ({n_kv}) must hold the {n_tokens} tokens")
    row = head_dim * n_head
    rows: Ne = (row, n_tokens, 1, 1)
    inputs += [GraphInput("cache", TensorSpec("f16", (row, n_kv, 1, 1), name="cache"), written=True),
               GraphInput("slots", TensorSpec(idx, (n_tokens, 1, 1, 1), name="slots"), fill=f"rows:{n_kv}")]
    nodes += [GraphNode("k_rows", "VIEW", (rotated,), rows,
                        (("ne", rows), ("nb", (4, 4 * row, 4 * row * n_tokens, 4 * row * n_tokens)), ("offset", 0))),
              GraphNode("k_cache", "SET_ROWS", ("cache", "k_rows", "slots"), (row, n_kv, 1, 1), dst="f16")]
    return ("k_rows", "k_cache")


def _shape(case: CaseParams) -> Ne:
    head_dim, n_head, n_tokens = case.param("head_dim"), case.param("n_head"), case.param("n_tokens")
    return (head_dim, n_head, n_tokens, 1)


def _rms_norm_mul_rope(case: CaseParams) -> Graph:
    ne = _shape(case)
    rope = _rope_params(case, ne[0])
    inputs = [GraphInput("x", TensorSpec("f32", ne, name="x")),
              GraphInput("w", TensorSpec("f32", (ne[0], 1, 1, 1), name="w")),
              GraphInput("pos", TensorSpec("i32", (ne[2], 1, 1, 1), name="pos"), fill="positions")]
    nodes = [GraphNode("n0", "RMS_NORM", ("x",), ne, (("eps", case.param("eps")),)),
             GraphNode("n1", "MUL", ("n0", "w"), ne), GraphNode("n2", "ROPE", ("n1", "pos"), ne, rope)]
    span: tuple[str, ...] = ("n0", "n1", "n2")
    if case.param("set_rows"):
        span += _into_cache(case, inputs, nodes, "n2", ne)
    elif case.param("n_kv") is not None or case.param("idx") is not None:
        raise ValueError("rms_norm_mul_rope: n_kv and idx go with set_rows=True")
    return Graph(tuple(inputs), tuple(nodes), (nodes[-1].name,), (span,))


def _rope_set_rows(case: CaseParams) -> Graph:
    ne = _shape(case)
    inputs = [GraphInput("k", TensorSpec("f32", ne, name="k")),
              GraphInput("pos", TensorSpec("i32", (ne[2], 1, 1, 1), name="pos"), fill="positions")]
    nodes = [GraphNode("n0", "ROPE", ("k", "pos"), ne, _rope_params(case, ne[0]))]
    span = ("n0", *_into_cache(case, inputs, nodes, "n0", ne))
    return Graph(tuple(inputs), tuple(nodes), ("k_cache",), (span,))


_HEAD = {"head_dim": P("elements per head (ne0)", int), "n_head": P("heads (ne1)", int),
         "n_tokens": P("tokens (ne2): 1 is decode", int), "mode": P("ROPE mode: 0 NORMAL or 2 NEOX", int),
         "n_dims": P("rotated dims (even, ≤ head_dim)", int), "freq_base": P("θ base (f32)")}
_CACHE = {"n_kv": P("cache slots (rows of the F16 cache)", int, optional=True),
          "idx": P("slot index type: i64 or i32", str, optional=True)}
PATTERNS.append(Pattern(
    "rms_norm_mul_rope", {"type": P("dtype of x (f32)", str), **_HEAD, "eps": P("RMS_NORM epsilon (f32, > 0)"),
                          "set_rows": P("then VIEW → SET_ROWS into an F16 cache", bool), **_CACHE},
    _rms_norm_mul_rope, ("f32",), notes="per-head Q/K norm, then RoPE (then the K-cache write)",
    fused_by="Vulkan, CUDA (with and without the cache write)"))
PATTERNS.append(Pattern(
    "rope_set_rows", {"type": P("dtype of k (f32)", str), **_HEAD,
                      "n_kv": P("cache slots (rows of the F16 cache)", int),
                      "idx": P("slot index type: i64 or i32", str)},
    _rope_set_rows, ("f32",), notes="RoPE on K, written into the F16 KV cache", fused_by="Vulkan, CUDA"))


# ---- in-place ROPE on a non-contiguous view of the K cache (the KV-cache shift) -------------------------

def _rope_inplace_view(case: CaseParams) -> Graph:
    """llama.cpp's ``build_rope_shift``: ``ggml_rope_ext_inplace`` on a view of the K cache that takes the
    first ``n_rot`` elements of every head of every cell (strides of the whole head and the whole cell, so
    not contiguous when n_rot < head_dim), rotated by each cell's shift; GLM-4 turned incoherent after a
    context shift when Vulkan mishandled it (llama.cpp #19292, tests in #19296)."""
    head_dim, n_head, n_kv, n_rot = (case.param(k) for k in ("head_dim", "n_head", "n_kv", "n_rot"))
    t = case.param("type")
    if not (0 < n_rot <= head_dim and n_rot % 2 == 0):
        raise ValueError(f"rope_inplace_view: n_rot must be even and 2..head_dim ({head_dim}), not {n_rot}")
    es = {"f32": 4, "f16": 2}.get(t)
    if es is None:
        raise ValueError(f"rope_inplace_view: type must be f32 or f16, not {t!r}")
    row = head_dim * n_head
    view: Ne = (n_rot, n_head, n_kv, 1)
    inputs = (GraphInput("cache", TensorSpec(t, (row, n_kv, 1, 1), name="cache"), written=True),
              GraphInput("shift", TensorSpec("i32", (n_kv, 1, 1, 1), name="shift"), fill="positions"))
    rope = tuple((k, n_rot if k == "n_dims" else v) for k, v in _rope_params(case, n_rot))
    nodes = (GraphNode("k_view", "VIEW", ("cache",), view,
                       (("ne", view), ("nb", (es, es * head_dim, es * row, es * row * n_kv)), ("offset", 0)), dst=t),
             GraphNode("k_shifted", "ROPE", ("k_view", "shift"), view, rope, form="inplace", dst=t))
    return Graph(inputs, nodes, ("k_shifted",), ())


PATTERNS.append(Pattern(
    "rope_inplace_view",
    {"type": P("K cache dtype: f16 (llama.cpp's default) or f32", str), "head_dim": P("elements per head", int),
     "n_head": P("KV heads", int), "n_kv": P("cache cells, all shifted", int),
     "n_rot": P("rotated elements of each head (even; < head_dim makes the view non-contiguous)", int),
     "mode": P("ROPE mode: 0 NORMAL or 2 NEOX", int), "freq_base": P("θ base (f32)")},
    _rope_inplace_view, ("f16", "f32"), notes="KV-cache shift: in-place RoPE on a strided view of the cache",
    fused_by="none (an in-place kernel on a strided view)"))

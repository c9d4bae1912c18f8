"""Graph cases: a small DAG of ggml nodes built from a named pattern, and its golden.

A :class:`GraphCase` is a pattern name, the pattern's params (dtype, ne, eps, broadcast and argument
order variants, chain length...) and the data seed. Its id is one line that cannot be read as an op
id (op ids start ``OP(``, graph ids ``GRAPH[pattern](``)::

    GRAPH[rms_norm_mul](type=f32,ne=[4096,1,1,1],w=row,order=xw,eps=1e-06,data=uniform:5)

The pattern registry (``golden/graphs/registry.py``: the ``PATTERNS`` lists of
``golden/graphs/patterns/``) expands a case into a
:class:`Graph`: the inputs with their :class:`TensorSpec` s, the nodes in the order llama.cpp's
graphs produce them (the order a backend's fusion matcher sees), which nodes are outputs, and the
spans a backend may fuse. Each node is an op of the catalogue: :meth:`Graph.node_case` gives the
:class:`OpCase` of one node, so its golden, validator and tolerance row are the op tier's own.

The golden (:func:`evaluate_graph`) runs node by node, rounding each intermediate to the dtype ggml
stores it in; the bound on each node is its own tolerance row plus the bounds of its sources carried
through the node to first order (docs/graph-error-model.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from golden import catalogue, dtypes, formats
from golden.case import OpCase, _fmt, _split_top, parse_value
from golden.graphs.graph import VIEW_OPS, Graph, GraphInput, GraphNode, Pattern
from golden.graphs.registry import get_pattern
from golden.tolerance import Tolerance

GRAPH_PREFIX = "GRAPH["


@dataclass(frozen=True)
class GraphCase:
    pattern: str
    params: tuple[tuple[str, Any], ...]
    data_seed: int = 0
    distribution: str = "uniform"

    @property
    def params_dict(self) -> dict[str, Any]:
        return dict(self.params)

    def param(self, name: str, default: Any = None) -> Any:
        return self.params_dict.get(name, default)

    @property
    def op(self) -> str:  # what records and --op selection call it: the pattern, upper case like an op
        return self.pattern.upper()

    @functools.cached_property
    def case_id(self) -> str:
        body = [f"{k}={_fmt(v)}" for k, v in self.params]
        body.append(f"data={self.distribution}:{self.data_seed}")
        return f"{GRAPH_PREFIX}{self.pattern}]({','.join(body)})"

    @functools.cached_property
    def graph(self) -> Graph:
        pattern = get_pattern(self.pattern)
        check_params(pattern, self)
        return pattern.expand(self)

    def node_case(self, node: GraphNode) -> OpCase:
        return self.graph.node_case(node, self.data_seed, self.distribution)


def check_params(pattern: Pattern, case: GraphCase) -> None:
    given = case.params_dict
    unknown = sorted(set(given) - set(pattern.params))
    if unknown:
        raise ValueError(f"graph pattern {pattern.name}: unknown parameter(s) {', '.join(unknown)} "
                         f"(known: {', '.join(pattern.params)})")
    missing = [n for n, p in pattern.params.items() if n not in given and not p.optional]
    if missing:
        raise ValueError(f"graph pattern {pattern.name}: missing parameter(s) {', '.join(missing)}")
    for name, value in given.items():
        pattern.params[name].check(f"GRAPH[{pattern.name}]", name, value)


def is_graph_id(text: str) -> bool:
    return text.strip().startswith(GRAPH_PREFIX)


def parse_graph_id(text: str) -> GraphCase:
    """The inverse of :attr:`GraphCase.case_id`; ValueError for a malformed id or unknown pattern."""
    text = text.strip()
    head, paren, body = text.partition("](")
    if not text.startswith(GRAPH_PREFIX) or not paren or not body.endswith(")"):
        raise ValueError(f"not a graph case id (expected GRAPH[pattern](key=value,...)): {text!r}")
    name = head[len(GRAPH_PREFIX):]
    try:
        get_pattern(name)
    except KeyError as exc:
        raise ValueError(str(exc.args[0])) from None
    params: list[tuple[str, Any]] = []
    distribution, seed = "uniform", 0
    for item in _split_top(body[:-1]):
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"graph case id field {item!r} has no '='")
        if key == "data":
            distribution, _, s = value.rpartition(":")
            seed = int(s)
        else:
            params.append((key, parse_value(value)))
    case = GraphCase(name, tuple(params), seed, distribution)
    case.graph  # noqa: B018 (expands: a bad parameter is a ValueError here, not on the device)
    return case


# ---- golden ---------------------------------------------------------------------------------------

def exact_graph_inputs(case: GraphCase, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The golden's view of the inputs: float64 (quantized weights dequantized), index inputs as ints."""
    out = []
    for i, x in zip(case.graph.inputs, inputs, strict=True):
        if dtypes.is_quantized(i.spec.dtype):
            x = formats.dequantize(np.asarray(x, np.uint8).ravel(), i.spec.dtype, i.spec.nelements)
            out.append(np.asarray(x, np.float64).reshape(i.spec.np_shape))
        else:
            out.append(np.asarray(x) if i.spec.dtype in dtypes.INDEX_TYPES else np.asarray(x, np.float64))
    return out


@dataclass
class GraphGolden:
    """Per node: the exact value on the golden's rounded sources, that value as ggml stores it, and
    the bound any correct implementation of the chain stays within (own row + propagated)."""

    exact: dict[str, np.ndarray] = field(default_factory=dict)
    stored: dict[str, np.ndarray] = field(default_factory=dict)
    allowed: dict[str, np.ndarray] = field(default_factory=dict)


RowFor = Callable[[OpCase], Tolerance]


def as_value(graph_input: GraphInput, x: np.ndarray) -> np.ndarray:
    """An input as the per-op goldens take it: indices as integers (MUL_MAT_ID indexes with them)."""
    x = np.asarray(x)
    return x.astype(np.int64) if graph_input.spec.dtype in dtypes.INDEX_TYPES else x


def evaluate_graph(case: GraphCase, inputs: list[np.ndarray], row_for: RowFor | None = None) -> GraphGolden:
    """``inputs``: float64 logical values of the graph inputs, in ``graph.inputs`` order. ``row_for``
    gives a node's own tolerance row (default: the catalogue's; a backend's documented deviation may
    replace it, as it does for an op case)."""
    row_for = row_for or catalogue.tolerance_of
    graph = case.graph
    values: dict[str, np.ndarray] = {i.name: as_value(i, x) for i, x in zip(graph.inputs, inputs, strict=True)}
    deltas: dict[str, np.ndarray | None] = {i.name: None for i in graph.inputs}  # inputs are exact as stored
    out = GraphGolden()
    for node in graph.nodes:
        node_case = case.node_case(node)
        xs = [values[s] for s in node.srcs]
        exact = catalogue.evaluate(node_case, xs)
        own = row_for(node_case).allowed(node_case, xs, exact, node.dst)
        carried = propagate(node_case, xs, [deltas[s] for s in node.srcs], exact)
        allowed = own + carried
        stored = dtypes.round_to(exact, node.dst)
        if node.dst in dtypes.INDEX_TYPES:  # indices feed later nodes as integers
            stored = np.asarray(stored).astype(dtypes.STORAGE_DTYPE[node.dst])
        out.exact[node.name], out.stored[node.name], out.allowed[node.name] = exact, stored, allowed
        values[node.name] = stored
        # a consumer sees the device's value, within ``allowed`` of the exact one, while the golden
        # feeds it the stored (rounded) one: their distance adds half a spacing of the storage type (an
        # index is stored exactly; a view moves stored values without rounding them again)
        rounding = 0.0 if node.dst in dtypes.INDEX_TYPES or node.op in VIEW_OPS else 0.5 * dtypes.ulp(
            np.abs(np.where(np.isfinite(exact), exact, 0.0)), node.dst)
        deltas[node.name] = allowed + rounding
    return out


# ---- first-order propagation of source errors through one node ----------------------------------------
# rule(case, xs, deltas, golden) -> the output error caused by sources off by ``deltas`` (None: exact)
Rule = Callable[[OpCase, list[np.ndarray], list[np.ndarray | None], np.ndarray], np.ndarray]
PROPAGATION: dict[str, Rule] = {}


def tile_to(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """ggml's broadcast of a source (repeat whole copies along each dim) to the output's shape."""
    x = np.asarray(x, np.float64)
    reps = tuple(o // s for o, s in zip(shape, x.shape, strict=True))
    return np.tile(x, reps) if any(r != 1 for r in reps) else x


def _abs(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return np.abs(np.where(np.isfinite(x), x, 0.0))


def _zero_or(d: np.ndarray | None, like: np.ndarray) -> np.ndarray:
    return np.zeros(like.shape) if d is None else tile_to(d, like.shape)


def propagate(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], golden: np.ndarray) -> np.ndarray:
    if all(d is None for d in deltas):
        return np.zeros(np.shape(golden))
    rule = PROPAGATION.get(case.op)
    if rule is None:
        raise NotImplementedError(f"no error propagation rule for {case.op} in golden/graphs/case.py: a graph pattern "
                                  "may feed it only exact graph inputs")
    return np.broadcast_to(rule(case, xs, deltas, golden), np.shape(golden))


def _rule(op: str) -> Callable[[Rule], Rule]:
    def add(fn: Rule) -> Rule:
        PROPAGATION[op] = fn
        return fn
    return add


@_rule("ADD")
def _add(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], g: np.ndarray) -> np.ndarray:
    # d(a+b) = da + db
    return _zero_or(deltas[0], g) + _zero_or(deltas[1], g)


@_rule("MUL")
def _mul(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], g: np.ndarray) -> np.ndarray:
    # d(ab) = b·da + a·db (+ da·db, second order)
    a, b = tile_to(_abs(xs[0]), g.shape), tile_to(_abs(xs[1]), g.shape)
    return _zero_or(deltas[0], g) * b + a * _zero_or(deltas[1], g)


@_rule("SCALE")
def _scale(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], g: np.ndarray) -> np.ndarray:
    # d(s·x + b) = s·dx
    return abs(case.param("s")) * _zero_or(deltas[0], g)


@_rule("TANH")
def _tanh(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], g: np.ndarray) -> np.ndarray:
    # tanh' = 1 − tanh² ≤ 1
    return (1.0 - np.tanh(_abs(xs[0])) ** 2) * _zero_or(deltas[0], g)


@_rule("RMS_NORM")
def _rms_norm(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], g: np.ndarray) -> np.ndarray:
    # y_i = x_i / r, r = sqrt(mean(x²) + eps): dy_i = dx_i / r − x_i · mean(x·dx) / r³
    x = _abs(xs[0])
    d = _zero_or(deltas[0], x)
    r = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(case.param("eps")))
    with np.errstate(divide="ignore", invalid="ignore"):
        return d / r + x * np.mean(x * d, axis=-1, keepdims=True) / r**3


@_rule("MUL_MAT")
def _mul_mat(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], g: np.ndarray) -> np.ndarray:
    # d(A·B) = |A|·dB + dA·|B| (bilinear: the op's own golden on magnitudes)
    spec = catalogue.get("MUL_MAT")
    out = np.zeros(g.shape)
    if deltas[1] is not None:
        out = out + spec.golden([_abs(xs[0]), np.broadcast_to(deltas[1], np.shape(xs[1]))], case)
    if deltas[0] is not None:
        out = out + spec.golden([np.broadcast_to(deltas[0], np.shape(xs[0])), _abs(xs[1])], case)
    return out


@_rule("SWIGLU")
def _swiglu(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], g: np.ndarray) -> np.ndarray:
    # split form y = silu(x)·u: dy = silu'(x)·u·dx + silu(x)·du, silu'(x) = σ(x)(1 + x(1 − σ(x)))
    if case.form != "split":
        raise NotImplementedError("SWIGLU propagation is written for the split form")
    x = np.asarray(xs[0], np.float64)
    with np.errstate(over="ignore"):
        s = 1.0 / (1.0 + np.exp(-x))
    dsilu = _abs(s * (1.0 + x * (1.0 - s)))
    return dsilu * _abs(xs[1]) * _zero_or(deltas[0], g) + _abs(x * s) * _zero_or(deltas[1], g)


@_rule("SILU")
def _silu(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], g: np.ndarray) -> np.ndarray:
    # silu' = σ(x)(1 + x(1 − σ(x))), and |silu''| ≤ 1/2 bounds the rest by d²/4 (Taylor with remainder)
    x = np.asarray(xs[0], np.float64)
    d = _zero_or(deltas[0], g)
    with np.errstate(over="ignore"):
        s = 1.0 / (1.0 + np.exp(-x))
    return _abs(s * (1.0 + x * (1.0 - s))) * d + 0.25 * d * d


@_rule("SIGMOID")
def _sigmoid(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], g: np.ndarray) -> np.ndarray:
    # σ' = σ(1 − σ), |σ''| ≤ 1/(6√3) < 0.1: |dy| ≤ σ'(x)·d + 0.05·d² (Taylor with remainder); σ is also
    # 1/4-Lipschitz, so d/4 bounds it too (the router's gating under the logits' MUL_MAT error)
    x = np.asarray(xs[0], np.float64)
    d = _zero_or(deltas[0], g)
    with np.errstate(over="ignore"):
        s = 1.0 / (1.0 + np.exp(-x))
    return np.minimum(s * (1.0 - s) * d + 0.05 * d * d, 0.25 * d)


@_rule("SOFTPLUS")
def _softplus(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], g: np.ndarray) -> np.ndarray:
    # softplus' = σ(x) ∈ (0, 1), softplus'' = σ(1 − σ) ≤ 1/4: |dy| ≤ σ(x)·d + d²/8; and 1-Lipschitz: ≤ d
    x = np.asarray(xs[0], np.float64)
    d = _zero_or(deltas[0], g)
    with np.errstate(over="ignore"):
        s = 1.0 / (1.0 + np.exp(-x))
    return np.minimum(s * d + 0.125 * d * d, d)


# ---- views, selection and the TOPK_MOE chain -----------------------------------------------------------------

@_rule("VIEW")
@_rule("RESHAPE")
@_rule("PERMUTE")
@_rule("TRANSPOSE")
def _view(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], g: np.ndarray) -> np.ndarray:
    # a view moves values without arithmetic: each element's error is its source element's
    return catalogue.get(case.op).golden([_zero_or(deltas[0], np.asarray(xs[0]))], case)


# ---- movement: the error moves with the data ------------------------------------------------------------

def _moves(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], g: np.ndarray) -> np.ndarray:
    if case.dst in dtypes.INDEX_TYPES:
        return np.zeros(np.shape(g))
    # CONT/CPY/DUP copy elements (CPY may round: its own row): each output
    # element is off by what the element it copies is off by. The op's golden applied to the sources'
    # errors (index sources as they are, an exact data source as zeros) moves them where the data goes.
    moved = [np.asarray(x) if s.dtype in dtypes.INDEX_TYPES else
             (np.zeros(np.shape(x)) if d is None else np.broadcast_to(d, np.shape(x)))
             for s, x, d in zip(case.inputs, xs, deltas, strict=True)]
    return np.abs(catalogue.get(case.op).golden(moved, case))


for _op in ("CONT", "CPY", "DUP"):
    PROPAGATION[_op] = _moves


@_rule("SOFT_MAX")
def _soft_max(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], g: np.ndarray) -> np.ndarray:
    # y = softmax(s·x + m): dy_i = s·y_i·(dx_i − Σ_j y_j dx_j), so |dy_i| ≤ |s|·y_i·(δ_i + Σ_j y_j δ_j);
    # the mask (and sinks) are graph inputs, exact
    if any(d is not None for d in deltas[1:]):
        raise NotImplementedError("SOFT_MAX propagation covers an exact mask")
    y = _abs(g)
    d = _zero_or(deltas[0], y)
    return abs(case.param("scale", 1.0)) * y * (d + np.sum(y * d, axis=-1, keepdims=True))


@_rule("FLASH_ATTN_EXT")
def _flash_attn_ext(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], g: np.ndarray) -> np.ndarray:
    # o_i = Σ_j p_ij v_j, p = softmax(ℓ) over the keys (a sink joins the denominator only), ℓ_ij =
    # c(scale·q_i·k_j) + slope_h·m_ij with c the softcap C·tanh(·/C) (|c'| ≤ 1) or the identity. First order:
    # |dℓ_ij| ≤ |scale|·(|k_j|·δq_i + |q_i|·δk_j) + slope_h·δm_ij, and do_i = Σ_j p_ij dℓ_ij (v_j − o_i) +
    # Σ_j p_ij dv_j (also with a sink, whose logit is exact), so
    # |do_i| ≤ Σ_j p_ij |dℓ_ij| |v_j − o_i| + Σ_j p_ij δv_j.
    from golden.attention import attention_logits, attention_weights
    from golden.softmax import alibi_slopes

    has_mask, has_sinks = bool(case.param("mask")), bool(case.param("sinks"))
    if has_sinks and deltas[-1] is not None:
        raise NotImplementedError("FLASH_ATTN_EXT propagation takes exact sinks")
    q, k, v = (np.asarray(x, np.float64) for x in xs[:3])  # numpy (b, h, n, d), (b, hk, kv, d), (b, hv, kv, dv)
    dq, dk, dv = (_zero_or(d, x) for d, x in zip(deltas[:3], (q, k, v), strict=True))
    n_head, n_q = q.shape[1], q.shape[2]
    scale, max_bias = abs(case.param("scale")), case.param("max_bias")
    mask = xs[3] if has_mask else None
    sinks = np.asarray(xs[-1], np.float64).reshape(-1) if has_sinks else None
    logits = attention_logits(q, k, mask, case.param("scale"), max_bias, case.param("logit_softcap")).total
    p = attention_weights(logits, sinks)
    rep_k, rep_v = n_head // k.shape[1], n_head // v.shape[1]
    k, dk = np.repeat(k, rep_k, axis=1), np.repeat(dk, rep_k, axis=1)
    v, dv = np.repeat(v, rep_v, axis=1), np.repeat(dv, rep_v, axis=1)
    dl = scale * (dq @ np.swapaxes(np.abs(k), -1, -2) + np.abs(q) @ np.swapaxes(dk, -1, -2))
    if has_mask and deltas[3] is not None:  # a mask computed in the graph (llama.cpp's F32 mask cast to F16)
        dm = np.broadcast_to(deltas[3], np.shape(xs[3]))[:, :, :n_q, :]
        dm = dm[np.arange(q.shape[0]) % dm.shape[0]][:, np.arange(n_head) % dm.shape[1]]
        dl = dl + alibi_slopes(n_head, float(np.float32(max_bias))).reshape(1, n_head, 1, 1) * dm
    o = p @ v
    spread = np.abs(v[:, :, None, :, :] - o[:, :, :, None, :])  # (b, h, n, kv, dv)
    do = np.einsum("bhnj,bhnjd->bhnd", p * dl, spread) + p @ dv
    return np.swapaxes(do, 1, 2)  # ggml's result is [dv, h, n, b]: numpy (b, n, h, dv)


@_rule("ARGSORT")
def _argsort(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], g: np.ndarray) -> np.ndarray:
    # discrete: a position whose value is within the values' errors of a neighbour's in the sorted row
    # may hold either index in a correct implementation (inf: any index); elsewhere the index is exact
    x = np.asarray(xs[0], np.float64)
    d = _zero_or(deltas[0], x)
    order = np.asarray(g, np.int64)
    v, dv = np.take_along_axis(x, order, axis=-1), np.take_along_axis(d, order, axis=-1)
    close = np.abs(np.diff(v, axis=-1)) <= dv[..., 1:] + dv[..., :-1]  # pair (p, p+1) may swap
    pad = np.zeros(close.shape[:-1] + (1,), bool)
    ambiguous = np.concatenate([close, pad], axis=-1) | np.concatenate([pad, close], axis=-1)
    return np.where(ambiguous, np.inf, 0.0)


@_rule("MUL_MAT_ID")
def _mul_mat_id(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], g: np.ndarray) -> np.ndarray:
    # per routed pair as MUL_MAT: |W_e|·δb + δW_e·|b| (the op's own golden on magnitudes, same ids)
    spec = catalogue.get("MUL_MAT_ID")
    out = np.zeros(g.shape)
    if deltas[1] is not None:
        out = out + spec.golden([_abs(xs[0]), np.broadcast_to(deltas[1], np.shape(xs[1])), xs[2]], case)
    if deltas[0] is not None:
        out = out + spec.golden([np.broadcast_to(deltas[0], np.shape(xs[0])), _abs(xs[1]), xs[2]], case)
    if deltas[2] is not None:  # an expert id that may differ (an ARGSORT near tie): that slot may be anything
        wrong = np.broadcast_to(deltas[2], np.shape(xs[2])) >= 0.5
        out = np.where(np.reshape(wrong, np.shape(g)[:-1] + (1,)), np.inf, out)
    return out


@_rule("GET_ROWS")
def _get_rows(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], g: np.ndarray) -> np.ndarray:
    # the rows' own errors, gathered; an index that may not be exact (an ARGSORT tie) may fetch any row
    out = np.zeros(np.shape(g))
    if deltas[0] is not None:
        out = out + catalogue.get("GET_ROWS").golden([np.broadcast_to(deltas[0], np.shape(xs[0])), xs[1]], case)
    if deltas[1] is not None:
        wrong_row = np.reshape(np.broadcast_to(deltas[1], np.shape(xs[1])) >= 0.5, np.shape(g)[:-1] + (1,))
        out = np.where(wrong_row, np.inf, out)
    return out


@_rule("SUM_ROWS")
def _sum_rows(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], g: np.ndarray) -> np.ndarray:
    # d(Σx) ≤ Σ|dx|
    return np.sum(_zero_or(deltas[0], np.asarray(xs[0])), axis=-1, keepdims=True)


@_rule("CLAMP")
def _clamp(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], g: np.ndarray) -> np.ndarray:
    # clamp is 1-Lipschitz
    return _zero_or(deltas[0], g)


@_rule("DIV")
def _div(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], g: np.ndarray) -> np.ndarray:
    # |a/b − (a+da)/(b+db)| = |da·b − a·db| / |b(b+db)| ≤ (|da||b| + |a||db|) / (|b|(|b| − |db|)), exactly
    # (not first order) while |db| < |b|; beyond that the quotient is unbounded
    a, b = tile_to(_abs(xs[0]), g.shape), tile_to(_abs(xs[1]), g.shape)
    da, db = _zero_or(deltas[0], g), _zero_or(deltas[1], g)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        bound = (da * b + a * db) / (b * (b - db))
    return np.where(db < b, bound, np.inf)


# ---- ROPE and SET_ROWS (the K-cache write) ---------------------------------------------------------------

@_rule("ROPE")
def _rope(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], g: np.ndarray) -> np.ndarray:
    # a rotation scaled by mscale, linear in x: |dy_first|, |dy_second| ≤ mscale·(|dx_first| + |dx_second|);
    # elements in no pair are copied (positions and freq factors are exact graph inputs)
    from golden.rope import _angle_params, rope_angles, rope_geometry

    if any(d is not None for d in deltas[1:]):
        raise NotImplementedError("ROPE propagation takes exact positions and freq factors")
    geometry = rope_geometry(case, xs[1])
    _, mscale = rope_angles(geometry.positions, case.param("n_dims"), exponents=geometry.exponents,
                            **_angle_params(case))
    d = _zero_or(deltas[0], g).copy()
    pair = abs(float(np.max(np.abs(mscale)))) * (d[geometry.first] + d[geometry.second])
    d[geometry.first], d[geometry.second] = pair, pair
    return d


@_rule("SET_ROWS")
def _set_rows(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], g: np.ndarray) -> np.ndarray:
    # the source rows' errors land in their rows of the destination (an exact graph input); converting a
    # value off by d to the destination type may land on the next representable value: + one spacing
    if deltas[0] is not None or deltas[2] is not None:
        raise NotImplementedError("SET_ROWS propagation takes an exact destination and exact indices")
    if deltas[1] is None:
        return np.zeros(np.shape(g))
    from golden.kvcache import set_rows

    src = np.broadcast_to(deltas[1], np.shape(xs[1]))
    moved = set_rows(np.zeros(np.shape(xs[0])), src, xs[2], "f32") * (1.0 + 2.0**-22)  # f32 may round it down
    # (each of the two roundings is within half a spacing at the larger of the two magnitudes)
    return np.where(moved > 0, moved + dtypes.ulp(np.abs(g) + moved, case.dst), 0.0)


@_rule("ADD_ID")
def _add_id(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], g: np.ndarray) -> np.ndarray:
    # d(a + b[ids]) = da + db[ids] (the op's own golden on the errors, same ids); an expert id that may
    # differ (an ARGSORT near tie) may add any bias row: that slot may be anything
    out = np.zeros(np.shape(g))
    if deltas[0] is not None or deltas[1] is not None:
        da = np.zeros(np.shape(xs[0])) if deltas[0] is None else np.broadcast_to(deltas[0], np.shape(xs[0]))
        db = np.zeros(np.shape(xs[1])) if deltas[1] is None else np.broadcast_to(deltas[1], np.shape(xs[1]))
        out = out + catalogue.get("ADD_ID").golden([da, db, xs[2]], case)
    if deltas[2] is not None:
        wrong = np.broadcast_to(deltas[2], np.shape(xs[2])) >= 0.5
        out = np.where(np.reshape(wrong, np.shape(g)[:-1] + (1,)), np.inf, out)
    return out


@_rule("SQRT")
def _sqrt(case: OpCase, xs: list[np.ndarray], deltas: list[np.ndarray | None], g: np.ndarray) -> np.ndarray:
    # √ is concave and increasing: |√(x ± d) − √x| ≤ √x − √max(x − d, 0), exactly (not first order)
    x = np.maximum(np.asarray(xs[0], np.float64), 0.0)
    d = _zero_or(deltas[0], g)
    with np.errstate(invalid="ignore"):
        return np.sqrt(x) - np.sqrt(np.maximum(x - d, 0.0))

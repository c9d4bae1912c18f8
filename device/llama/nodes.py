"""A captured node as an op case: the inverse of the op builders in ``device/ggml/ops_*.py``.

:func:`node_case` reads a node's op, its op_params (ggml's encoding, the same in the releases bound
here) and its sources' types, shapes and strides, and returns the :class:`golden.case.OpCase` that
builds the same op in the op tier, with the logical input values the node computed from. A node that
only re-describes memory (VIEW, RESHAPE, PERMUTE, TRANSPOSE) computes nothing: it has no case (None). A node
whose op or op_params the translation does not know is ``NotJudged`` with the reason; it is never a pass.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from device.llama.capture import BLOCK, CapturedNode, CapturedTensor
from golden import catalogue
from golden.case import CONTIGUOUS, Layout, OpCase, TensorSpec

VIEW_OPS = frozenset({"VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE", "NONE"})
GLU_OPS = frozenset({"REGLU", "GEGLU", "SWIGLU", "GEGLU_ERF", "GEGLU_QUICK"})


@dataclass(frozen=True)
class NodeCase:
    case: OpCase
    inputs: list[np.ndarray]  # the node's sources as stored (quantized: raw blocks), in the case's order
    output: np.ndarray  # the device's output values (numpy order)
    layout_exact: bool  # every input's layout is exactly expressible as a Layout (else: contiguous in the id)


@dataclass(frozen=True)
class NotJudged:
    reason: str  # this node's reason (it may name the node's tensors)
    kind: str = ""  # the reason without this node's names: what the run's summary counts nodes by

    @property
    def summary(self) -> str:
        return self.kind or self.reason


def _ints(node: CapturedNode) -> tuple[int, ...]:
    return struct.unpack("<16i", node.op_params)


def _floats(node: CapturedNode) -> tuple[float, ...]:
    return tuple(float(np.float32(v)) for v in struct.unpack("<16f", node.op_params))


def layout_of(t: CapturedTensor) -> Layout | None:
    """The Layout (a permutation of a padded packed allocation) with ``t``'s strides, or None when there is
    none (the repro id then says contiguous; the .npz holds the node's own values either way)."""
    if t.dtype in BLOCK:
        block_elems, block_bytes = BLOCK[t.dtype]
        row = t.ne[0] // block_elems * block_bytes
        packed = t.nb[1] == row and t.nb[2] == row * t.ne[1] and t.nb[3] == t.nb[2] * t.ne[2]
        return CONTIGUOUS if packed else None
    size = ELEMENT_BYTES.get(t.dtype)
    if size is None:
        return None
    # stored dim i is logical dim order[i]: the dims that vary, sorted by stride, in the places of the dims
    # that vary; size-1 dims stay where they are (their strides mean nothing)
    varying = [d for d in range(4) if t.ne[d] > 1]
    by_stride = iter(sorted(varying, key=lambda d: (t.nb[d], d)))
    order = [next(by_stride) if t.ne[d] > 1 else d for d in range(4)]
    pad = [0, 0, 0, 0]
    previous: int | None = None  # the stored position of the last varying dim
    for i, d in enumerate(order):
        if t.ne[d] == 1:
            continue
        if previous is None:
            if t.nb[d] != size:
                return None
        else:
            below = order[previous]
            if t.nb[d] % t.nb[below] or t.nb[d] < t.nb[below] * t.ne[below]:
                return None
            pad[previous] = t.nb[d] // t.nb[below] - t.ne[below]
        previous = i
    return Layout(perm=tuple(order), pad=tuple(pad))  # type: ignore[arg-type]


ELEMENT_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4, "i64": 8, "i16": 2, "i8": 1}


def _spec(t: CapturedTensor, layouts_ok: list[bool]) -> TensorSpec:
    layout = layout_of(t)
    layouts_ok.append(layout is not None)
    return TensorSpec(t.dtype, t.ne, layout or CONTIGUOUS)


Translate = Callable[[CapturedNode], tuple[str, list[CapturedTensor], dict[str, object], str] | NotJudged]


def _plain(op: str, n_srcs: int) -> Translate:
    def translate(node: CapturedNode) -> tuple[str, list[CapturedTensor], dict[str, object], str] | NotJudged:
        srcs = [s for s in node.srcs[:n_srcs] if s is not None]
        return op, srcs, {}, ""
    return translate


def _norm(node: CapturedNode) -> tuple[str, list[CapturedTensor], dict[str, object], str] | NotJudged:
    return node.op, [node.srcs[0]], {"eps": _floats(node)[0]}, ""  # type: ignore[list-item]


def _rope(node: CapturedNode) -> tuple[str, list[CapturedTensor], dict[str, object], str] | NotJudged:
    i, f = _ints(node), _floats(node)
    srcs = [s for s in node.srcs[:2] if s is not None]
    params: dict[str, object] = {
        "n_dims": i[1], "mode": i[2], "n_ctx_orig": i[4], "freq_base": f[5], "freq_scale": f[6], "ext_factor": f[7],
        "attn_factor": f[8], "beta_fast": f[9], "beta_slow": f[10],
        "freq_factors": len(node.srcs) > 2 and node.srcs[2] is not None}
    if params["freq_factors"]:
        srcs.append(node.srcs[2])  # type: ignore[arg-type]
    if i[2] & 8:
        params["sections"] = tuple(i[11:15])
    return "ROPE", srcs, params, ""


def _soft_max(node: CapturedNode) -> tuple[str, list[CapturedTensor], dict[str, object], str] | NotJudged:
    f = _floats(node)
    mask = len(node.srcs) > 1 and node.srcs[1] is not None
    sinks = len(node.srcs) > 2 and node.srcs[2] is not None
    srcs = [s for s in node.srcs[:3] if s is not None]
    return "SOFT_MAX", srcs, {"scale": f[0], "max_bias": f[1], "mask": mask, "sinks": sinks}, ""


def _scale(node: CapturedNode) -> tuple[str, list[CapturedTensor], dict[str, object], str] | NotJudged:
    f = _floats(node)
    params: dict[str, object] = {"s": f[0]}
    if f[1] != 0.0:
        params["bias"] = f[1]
    return "SCALE", [node.srcs[0]], params, ""  # type: ignore[list-item]


def _glu(node: CapturedNode) -> tuple[str, list[CapturedTensor], dict[str, object], str] | NotJudged:
    swapped = bool(_ints(node)[1])
    srcs = [s for s in node.srcs[:2] if s is not None]
    if len(srcs) == 2:
        return node.op, srcs, {}, "split"
    return node.op, srcs, {"swapped": swapped} if swapped else {}, ""


def _cont(node: CapturedNode) -> tuple[str, list[CapturedTensor], dict[str, object], str] | NotJudged:
    src = node.srcs[0]
    assert src is not None
    params: dict[str, object] = {} if src.ne == node.out.ne else {"ne": tuple(node.out.ne)}
    return "CONT", [src], params, ""


def _cpy(node: CapturedNode) -> tuple[str, list[CapturedTensor], dict[str, object], str] | NotJudged:
    # llama.cpp before SET_ROWS (b5640) stores K and V into a view of the cache with CPY: the source's values
    # in logical order, converted to the view's type; the view's own strides are read back by values()
    src = node.srcs[0]
    assert src is not None
    return "CPY", [src], {"dst_ne": tuple(node.out.ne)}, ""


def _set_rows(node: CapturedNode) -> tuple[str, list[CapturedTensor], dict[str, object], str] | NotJudged:
    if len(node.srcs) < 3 or node.srcs[2] is None:
        return NotJudged("SET_ROWS without its destination as src[2] (older ggml): the rows kept are unknown")
    # the destination as the node's output holds it: the rows it keeps are its own, the rows set are judged
    dst = CapturedTensor(node.out.name, node.out.dtype, node.out.ne, node.out.nb, node.out.raw, node.out.address,
                         node.out.buffer, node.out.op)
    return "SET_ROWS", [dst, node.srcs[0], node.srcs[1]], {}, ""  # type: ignore[list-item]


def _clamp(node: CapturedNode) -> tuple[str, list[CapturedTensor], dict[str, object], str] | NotJudged:
    f = _floats(node)
    return "CLAMP", [node.srcs[0]], {"min": f[0], "max": f[1]}, ""  # type: ignore[list-item]


def _flash_attn_ext(node: CapturedNode) -> tuple[str, list[CapturedTensor], dict[str, object], str] | NotJudged:
    f, i = _floats(node), _ints(node)
    precisions = {0: "default", 10: "f32"}  # enum ggml_prec
    if i[3] not in precisions:
        return NotJudged(f"FLASH_ATTN_EXT with precision {i[3]}, which the golden's case does not name")
    mask = len(node.srcs) > 3 and node.srcs[3] is not None
    sinks = len(node.srcs) > 4 and node.srcs[4] is not None
    srcs = [s for s in node.srcs[:5] if s is not None]
    return "FLASH_ATTN_EXT", srcs, {"scale": f[0], "max_bias": f[1], "logit_softcap": f[2],
                                    "prec": precisions[i[3]], "mask": mask, "sinks": sinks}, ""


def _argsort(node: CapturedNode) -> tuple[str, list[CapturedTensor], dict[str, object], str] | NotJudged:
    return "ARGSORT", [node.srcs[0]], {"order": "desc" if _ints(node)[0] else "asc"}, ""  # type: ignore[list-item]


TRANSLATIONS: dict[str, Translate] = {
    "ADD": _plain("ADD", 2), "MUL": _plain("MUL", 2), "DIV": _plain("DIV", 2), "SUB": _plain("SUB", 2),
    "MUL_MAT": _plain("MUL_MAT", 2), "MUL_MAT_ID": _plain("MUL_MAT_ID", 3), "GET_ROWS": _plain("GET_ROWS", 2),
    "SUM_ROWS": _plain("SUM_ROWS", 1), "SILU": _plain("SILU", 1), "GELU": _plain("GELU", 1),
    "SIGMOID": _plain("SIGMOID", 1), "TANH": _plain("TANH", 1), "SQR": _plain("SQR", 1), "SQRT": _plain("SQRT", 1),
    "RMS_NORM": _norm, "NORM": _norm, "ROPE": _rope, "SOFT_MAX": _soft_max, "SCALE": _scale, "CONT": _cont, "CPY": _cpy,
    "SET_ROWS": _set_rows, "ARGSORT": _argsort, "CLAMP": _clamp, "FLASH_ATTN_EXT": _flash_attn_ext,
    "DUP": _plain("DUP", 1),
    **{op: _glu for op in GLU_OPS},
}


def node_case(node: CapturedNode) -> NodeCase | NotJudged | None:
    """The op case of a captured node; None for a view node (computes nothing)."""
    if node.op in VIEW_OPS:
        return None
    translate = TRANSLATIONS.get(node.op)
    if translate is None:
        return NotJudged(f"no translation of ggml's {node.op} node to an op case")
    if node.op not in catalogue.OPS:
        return NotJudged(f"{node.op} is not in the golden's catalogue")
    translated = translate(node)
    if isinstance(translated, NotJudged):
        return translated
    op, srcs, params, form = translated
    spec = catalogue.get(op)
    if spec.golden is None:
        return NotJudged(f"the golden has no model of {op}")
    for s in srcs:
        if not s.readable:
            return NotJudged(f"source {s.name} has ggml type {s.dtype}, which the golden does not read",
                             f"a source has ggml type {s.dtype}, which the golden does not read")
    if not node.out.readable:
        return NotJudged(f"output has ggml type {node.out.dtype}, which the golden does not read",
                         f"the output has ggml type {node.out.dtype}, which the golden does not read")
    layouts_ok: list[bool] = []
    specs = tuple(_spec(s, layouts_ok) for s in srcs)
    ordered = tuple((k, params[k]) for k in spec.params if k in params)
    # the id's data part is for the op tier's repro (its own drawn data); the node's own values go to the .npz
    case = OpCase(op, specs, ordered, node.out.dtype, form, 0, "uniform")
    return NodeCase(case, [s.values() for s in srcs], node.out.values(), all(layouts_ok))

"""The description of one op case, shared by the golden model, every device and the suite.

A case is pure data: the op name, each input's dtype/shape/layout, the op parameters and the
output dtype. Its ``case_id`` (``OP(type=...,ne=[...],...)``) is the one identity string used for
pytest ids, ``-k`` selection, results records, reports and repro lines.

Shapes are always in ggml order (``ne[0]`` innermost). A numpy array holding a tensor's logical
values has the reversed shape ``(ne3, ne2, ne1, ne0)``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

Ne = tuple[int, int, int, int]
_MISSING: Any = object()


@dataclass(frozen=True)
class Layout:
    """How a tensor's logical values sit in the device buffer.

    The stored tensor is a contiguous allocation of shape ``stored_ne + pad`` elements per dim; the
    logical tensor is the view of ``stored_ne`` elements at element ``offset`` of it (padded
    strides, like test-backend-ops' ``v=1``), then ``ggml_permute(perm)`` of that view.
    ``stored_ne`` is the logical ``ne`` taken back through the permutation.

    ``alias``: the index of an earlier input whose allocation this one is a view into (no allocation
    of its own): the same geometry, laid over that input's bytes (overlapping sources of a binary op;
    MLA's V as the first 512 of each 576-element K row). Its values are whatever those bytes hold.
    """

    perm: Ne = (0, 1, 2, 3)
    pad: Ne = (0, 0, 0, 0)
    offset: int = 0
    alias: int | None = None

    @property
    def is_contiguous(self) -> bool:
        return self.perm == (0, 1, 2, 3) and self.pad == (0, 0, 0, 0) and self.offset == 0 and self.alias is None

    def label(self) -> str:
        if self.is_contiguous:
            return "contiguous"
        parts = [] if self.alias is None else [f"alias[{self.alias}]"]
        if self.perm != (0, 1, 2, 3):
            parts.append("perm[" + ",".join(map(str, self.perm)) + "]")
        if self.pad != (0, 0, 0, 0):
            parts.append("pad[" + ",".join(map(str, self.pad)) + "]")
        if self.offset:
            parts.append(f"offs[{self.offset}]")
        return "/".join(parts)

    @classmethod
    def from_label(cls, label: str) -> Layout:
        if label == "contiguous":
            return cls()
        fields: dict[str, tuple[int, ...]] = {}
        for part in label.split("/"):
            key, _, rest = part.partition("[")
            fields[key] = tuple(int(v) for v in rest.rstrip("]").split(","))
        return cls(
            perm=fields.get("perm", (0, 1, 2, 3)),  # type: ignore[arg-type]
            pad=fields.get("pad", (0, 0, 0, 0)),  # type: ignore[arg-type]
            offset=fields.get("offs", (0,))[0],
            alias=fields["alias"][0] if "alias" in fields else None,
        )


CONTIGUOUS = Layout()


@dataclass(frozen=True)
class TensorSpec:
    """One input tensor: ggml dtype name (``f32 f16 bf16 i32 q4_0 q8_0``), logical ne, layout."""

    dtype: str
    ne: Ne
    layout: Layout = CONTIGUOUS
    name: str = ""  # tensor name on the device; llama-style names reach name-matched paths (CANN NZ)

    @property
    def nelements(self) -> int:
        n = 1
        for d in self.ne:
            n *= d
        return n

    @property
    def np_shape(self) -> tuple[int, int, int, int]:
        return tuple(reversed(self.ne))  # type: ignore[return-value]


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (tuple, list)):
        return "[" + ",".join(_fmt(v) for v in value) + "]"
    return str(value)


@dataclass(frozen=True)
class OpCase:
    """One op applied to concrete tensor specs and parameters.

    ``params`` is a tuple of ``(name, value)`` pairs in the catalogue's order so the case stays
    hashable and its id stable; use :meth:`param` / :attr:`params_dict` to read them.
    ``form`` selects a constructor form where one op has several (``pad_ext``, ``interpolate``).
    """

    op: str
    inputs: tuple[TensorSpec, ...]
    params: tuple[tuple[str, Any], ...] = ()
    dst: str = "f32"
    form: str = ""
    data_seed: int = 0
    distribution: str = "uniform"

    @property
    def params_dict(self) -> dict[str, Any]:
        return dict(self.params)

    def param(self, name: str, default: Any = _MISSING) -> Any:
        """The value of parameter ``name``; a name the case lacks is a KeyError unless a default is given
        (so a misspelt name is never read as None)."""
        for key, value in self.params:
            if key == name:
                return value
        if default is _MISSING:
            have = ", ".join(k for k, _ in self.params) or "none"
            raise KeyError(f"{self.op} case has no parameter {name!r} (it has: {have})")
        return default

    @functools.cached_property
    def case_id(self) -> str:  # cached: the harness, the worker's history and the record all ask for it
        parts = []
        for i, t in enumerate(self.inputs):
            tag = "" if len(self.inputs) == 1 else str(i)
            parts.append(f"type{tag}={t.dtype}")
            parts.append(f"ne{tag}=[{','.join(map(str, t.ne))}]")
            if not t.layout.is_contiguous:
                parts.append(f"lay{tag}={t.layout.label()}")
            if t.name:
                parts.append(f"name{tag}={t.name}")
        parts.append(f"dst={self.dst}")
        if self.form:
            parts.append(f"form={self.form}")
        parts.extend(f"{k}={_fmt(v)}" for k, v in self.params)
        parts.append(f"data={self.distribution}:{self.data_seed}")
        return f"{self.op}({','.join(parts)})"


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p]


def parse_value(text: str) -> Any:
    """A parameter value as :func:`_fmt` wrote it: int, float (incl. nan/inf), bool, list or str."""
    if text.startswith("[") and text.endswith("]"):
        return tuple(parse_value(v) for v in _split_top(text[1:-1]))
    if text in ("True", "False"):
        return text == "True"
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def parse_case_id(case_id: str) -> OpCase:
    """The inverse of :attr:`OpCase.case_id`: rebuild the exact case from its identity string."""
    op, paren, body = case_id.strip().partition("(")
    if not paren or not body.endswith(")") or not op:
        raise ValueError(f"not a case id (expected OP(key=value,...)): {case_id!r}")
    fields = []
    for item in _split_top(body[:-1]):
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"case id field {item!r} has no '='")
        fields.append((key, value))
    tensors: dict[str, dict[str, Any]] = {}
    params: list[tuple[str, Any]] = []
    dst, form, distribution, seed = "f32", "", "uniform", 0
    seen_dst = False  # tensor fields come before dst=, params after it (a param may be called "ne")
    for key, value in fields:
        for prefix in ("type", "ne", "lay", "name"):
            idx = key[len(prefix):]
            if not seen_dst and key.startswith(prefix) and (idx == "" or idx.isdigit()):
                tensors.setdefault(idx or "0", {})[prefix] = value
                break
        else:
            if key == "dst":
                seen_dst = True
                dst = value
            elif key == "form":
                form = value
            elif key == "data":
                distribution, _, s = value.rpartition(":")
                seed = int(s)
            else:
                params.append((key, parse_value(value)))
    inputs = []
    for idx in sorted(tensors, key=int):
        t = tensors[idx]
        ne = tuple(int(v) for v in t["ne"].strip("[]").split(","))
        inputs.append(TensorSpec(t["type"], ne, Layout.from_label(t.get("lay", "contiguous")), t.get("name", "")))  # type: ignore[arg-type]
    return OpCase(op, tuple(inputs), tuple(params), dst, form, seed, distribution)

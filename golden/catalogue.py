"""The op catalogue: the list of family modules, and lookups over the ops they define.

Each family module (``golden/<family>.py``) holds its ops' golden functions with their
:class:`golden.spec.OpSpec` beside them in ``SPECS``. This module finds the families (every module
of the package with a ``SPECS`` list), so adding an op or a family needs no edit here.
``conform ops`` prints the catalogue, and tests/test_catalogue_consistency.py checks that every op
has its golden, ggml builder, strategy, input maker and comparator where it needs them.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import numpy as np

from golden.case import OpCase
from golden.spec import InputLayouts, OpList, OpSpec, Signature
from golden.tolerance import Tolerance


def _family_modules() -> tuple[ModuleType, ...]:
    """Every module of this package that defines ops (a ``SPECS`` list), in name order."""
    import golden

    found = []
    for info in sorted(pkgutil.iter_modules(golden.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"golden.{info.name}")
        if isinstance(getattr(module, "SPECS", None), OpList):
            found.append(module)
    return tuple(found)


FAMILIES = _family_modules()

OPS: dict[str, OpSpec] = {}
for _family in FAMILIES:
    for _spec in _family.SPECS:
        if _spec.name in OPS:
            raise RuntimeError(f"op {_spec.name} is defined twice ({OPS[_spec.name].family}, {_spec.family})")
        OPS[_spec.name] = _spec

__all__ = ["OPS", "OpSpec", "Signature", "InputLayouts", "get", "implemented", "signature_of", "tolerance_of",
           "golden_inputs", "evaluate", "row", "row_id"]


def signature_of(case: OpCase) -> Signature:
    return Signature(tuple(t.dtype for t in case.inputs), case.dst)


def tolerance_of(case: OpCase) -> Tolerance:
    return get(case.op).tolerance_for(case.dst, signature_of(case).label())


def row_id(op: str, dtypes: dict[str, str]) -> str | None:
    """The id ("OP[key]") of the tolerance row for an op and a record's dtypes ({"src0": .., "dst": ..}),
    or None where this catalogue has no such op or row (a record from another checkout)."""
    spec = OPS.get(op.upper())
    dst = dtypes.get("dst")
    if spec is None or not isinstance(dst, str):
        return None
    sources = tuple(dtypes[f"src{i}"] for i in range(len(dtypes)) if isinstance(dtypes.get(f"src{i}"), str))
    try:
        return f"{spec.name}[{spec.tolerance_key(dst, Signature(sources, dst).label())}]"
    except KeyError:
        return None


def row(row_id: str) -> Tolerance | None:
    """The tolerance row with this id ("GELU[f16]"), or None where this catalogue has none."""
    name, _, key = row_id.partition("[")
    spec = OPS.get(name)
    return spec.tolerance.get(key.removesuffix("]")) if spec is not None else None


def get(name: str) -> OpSpec:
    try:
        return OPS[name.upper()]
    except KeyError:
        raise KeyError(f"unknown op {name!r}; known ops: {', '.join(sorted(OPS))}") from None


def implemented() -> list[OpSpec]:
    return [spec for spec in OPS.values() if spec.implemented]


def golden_inputs(case: OpCase, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The float64 logical values the golden sees: quantized inputs are dequantized first."""
    from golden import dtypes

    out = []
    for spec, x in zip(case.inputs, inputs, strict=True):
        if spec.dtype in ("q4_0", "q8_0"):  # exact in float64 straight from the blocks (golden/quant.py)
            from golden import quant

            x = quant.dequantize(np.asarray(x, np.uint8).ravel(), spec.dtype, spec.nelements,
                                 np.float64).reshape(spec.np_shape)
        elif dtypes.is_quantized(spec.dtype):
            from golden import formats

            x = formats.dequantize(np.asarray(x, np.uint8).ravel(), spec.dtype, spec.nelements).reshape(spec.np_shape)
        out.append(np.asarray(x) if spec.dtype in dtypes.INDEX_TYPES else np.asarray(x, dtype=np.float64))
    return out


def evaluate(case: OpCase, inputs: list[np.ndarray]) -> np.ndarray:
    """The exact golden result (float64, numpy order) of ``case`` on its inputs' logical values."""
    spec = get(case.op)
    spec.check_params(case)
    if spec.validate is not None:
        spec.validate(case, inputs)
    return spec.golden([np.asarray(x) for x in inputs], case)

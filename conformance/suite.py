"""The catalogue-driven suite: one parametrised Hypothesis test per test group, over every
catalogue op × dtype signature whose case entry (``conformance/cases``) names that group.

Test ids carry the op in lower case and the dtype signature (``test_unary[gelu_quick-f32]``,
``test_binary[add-f16_f32]``) so ``-k gelu_quick`` and ``-k "add and f16"`` select as expected.
Quantized signatures (Q4_0/Q8_0 sources or destinations) form the group ``quantized``. Each group's
test is collected in the module that has always held it (ids are stable across releases of this
harness); groups new since then are collected in ``conformance/test_ops.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance import cases
from golden import catalogue
from golden.spec import Signature

QUANTIZED_GROUP = "quantized"
# test module (conformance/test_<name>.py) of each group that predates the catalogue-driven suite
GROUP_MODULE = {
    "binary": "elementwise", "unary": "elementwise",
    "norm": "numerics", "soft_max": "numerics", "diag_mask_inf": "numerics", "rope": "numerics",
    "mul_mat": "numerics", "im2col": "numerics", "pool_2d": "numerics", "timestep_embedding": "numerics",
    "layout_ops": "movement", "cpy": "movement", "resizing": "movement", "gather_scatter": "movement",
    "sequences": "movement", QUANTIZED_GROUP: "quant_ops",
}  # fmt: skip
DEFAULT_MODULE = "ops"
# A drawn case a known bug of the device covers judges nothing: the example draws again (after that
# case, and its companion in a layout the bug does not cover, are recorded), up to this many cases
DRAWS_PER_EXAMPLE = 4


def group_of(op: str, signature: Signature) -> str:
    return QUANTIZED_GROUP if signature.quantized else cases.lookup(op).group


def parameters(group: str) -> list[Any]:
    """One pytest param per (op, signature) of the group, with ids like ``gelu_quick-f32``."""
    params = []
    for spec in catalogue.OPS.values():
        for signature in spec.all_signatures:
            if group_of(spec.name, signature) == group:
                params.append(pytest.param(spec.name, signature, id=f"{spec.name.lower()}-{signature.label()}"))
    return params


def groups() -> list[str]:
    found: dict[str, None] = {}
    for spec in catalogue.OPS.values():
        for signature in spec.all_signatures:
            found[group_of(spec.name, signature) or DEFAULT_MODULE] = None
    return list(found)


def _group_test(group: str) -> Callable[..., None]:
    def test(conform: Any, op: str, sig: Signature, data: st.DataObject) -> None:
        for _ in range(DRAWS_PER_EXAMPLE):
            if conform.check_drawn(data.draw(cases.strategy_for(op, sig), label="case")):
                break

    # a name of its own per group before hypothesis sees it: its example database is keyed on it
    test.__name__ = test.__qualname__ = f"test_{group}"
    return pytest.mark.parametrize(("op", "sig"), parameters(group))(given(data=st.data())(test))


def group_tests_for(module_name: str) -> dict[str, Callable[..., None]]:
    """The group tests a test module collects (``globals().update(group_tests_for(__name__))``)."""
    short = module_name.rsplit(".", 1)[-1].removeprefix("test_")
    return {f"test_{g}": _group_test(g) for g in groups() if GROUP_MODULE.get(g, DEFAULT_MODULE) == short}


def op_signatures(ops: tuple[str, ...] | list[str], quantized: bool = False) -> list[Any]:
    """(op, signature) params for op-specific tests (stateful sequences, fault meta-tests)."""
    return [pytest.param(name, s, id=f"{name.lower()}-{s.label()}") for name in ops
            for s in catalogue.get(name).all_signatures if s.quantized == quantized]

"""Helpers for the op test modules: parametrisation over the catalogue's dtype signatures."""

from __future__ import annotations

import pytest

from golden import catalogue


def op_signatures(ops: tuple[str, ...] | list[str]) -> list:
    """One pytest param per (op, dtype signature), with ids like ``gelu_quick-f32``.

    The id carries the op name in lower case and the dtypes, so ``-k gelu_quick`` and
    ``-k "add and f16"`` select as expected. Ops whose golden is missing are not parametrised.
    """
    params = []
    for name in ops:
        spec = catalogue.get(name)
        if not spec.implemented:
            continue
        for sig in spec.signatures:
            params.append(pytest.param(name, sig, id=f"{name.lower()}-{sig.label()}"))
    return params

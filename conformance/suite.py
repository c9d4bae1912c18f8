"""Helpers for the op test modules: parametrisation over the catalogue's dtype signatures."""

from __future__ import annotations

import pytest

from golden import catalogue, dtypes


def op_signatures(ops: tuple[str, ...] | list[str], quantized: bool = False) -> list:
    """One pytest param per (op, dtype signature), with ids like ``gelu_quick-f32``.

    The id carries the op name in lower case and the dtypes, so ``-k gelu_quick`` and
    ``-k "add and f16"`` select as expected. Ops whose golden is missing are not parametrised.
    Signatures with a quantized (Q4_0/Q8_0) source or destination are listed only with
    ``quantized=True`` (their strategies keep whole blocks); the others only without it.
    """
    params = []
    for name in ops:
        spec = catalogue.get(name)
        if not spec.implemented:
            continue
        for sig in spec.signatures:
            if any(dtypes.is_quantized(t) for t in (*sig.srcs, sig.dst)) != quantized:
                continue
            params.append(pytest.param(name, sig, id=f"{name.lower()}-{sig.label()}"))
    return params

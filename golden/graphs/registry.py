"""The pattern registry: every module of ``golden/graphs/patterns/`` with a ``PATTERNS`` list.

A new pattern module is found by name, as the op catalogue finds its family modules; a pattern is
never registered twice nor named like an op (a record's ``op`` is the pattern in upper case).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from golden import catalogue
from golden.graphs import patterns as _pattern_package
from golden.graphs.graph import Pattern


@functools.cache
def patterns() -> dict[str, Pattern]:
    table: dict[str, Pattern] = {}
    for info in sorted(pkgutil.iter_modules(_pattern_package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{_pattern_package.__name__}.{info.name}")
        for pattern in getattr(module, "PATTERNS", ()):
            if pattern.name in table:
                raise RuntimeError(f"graph pattern {pattern.name} registered twice ({info.name})")
            if pattern.name.upper() in catalogue.OPS:
                raise RuntimeError(f"graph pattern {pattern.name} would be confused with the op {pattern.name.upper()}")
            table[pattern.name] = pattern
    return table


def get_pattern(name: str) -> Pattern:
    table = patterns()
    try:
        return table[name.lower()]
    except KeyError:
        raise KeyError(f"unknown graph pattern {name!r}; known: {', '.join(sorted(table))}") from None

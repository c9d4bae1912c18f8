"""The layers import one way and no module imports itself back through others.

Layers, bottom up: ``golden`` (NumPy only), ``results`` (the results format), ``device``, ``reports``
(reads results; imports neither ``device`` nor ``conformance``), then ``conformance`` (the suite and
the ``conform`` command, which writes reports). Every import counts, also those
inside functions: a lazy import is still an arrow. Read from the source with ``ast``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("golden", "results", "device", "conformance", "reports")
# what each layer may import of the project's packages (besides itself)
ALLOWED: dict[str, frozenset[str]] = {
    "golden": frozenset(),
    "results": frozenset({"golden"}),
    "device": frozenset({"golden", "results"}),
    "conformance": frozenset({"golden", "results", "device", "reports"}),
    "reports": frozenset({"golden", "results"}),
}


def project_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imported_names(path: Path, module: str, modules: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """The project modules an import statement in ``path`` loads, with its line. A package that loads
    its modules by name (``pkgutil``, as ``conformance.cases`` does) imports all of them."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), str(path))
    if is_package and "pkgutil" in {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}:
        for name in modules:
            if name.startswith(module + "."):
                yield name, 1
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:  # `from device import worker` loads device.worker
                submodule = f"{base}.{alias.name}"
                yield (submodule if submodule in modules else base), node.lineno


def import_graph() -> dict[str, dict[str, int]]:
    modules = project_modules()
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        edges: dict[str, int] = {}
        for name, line in imported_names(path, module, modules):
            if name in modules and name != module:
                edges.setdefault(name, line)
        graph[module] = edges
    return graph


def test_no_upward_or_sideways_import() -> None:
    wrong = []
    for module, edges in import_graph().items():
        layer = module.split(".")[0]
        for target, line in edges.items():
            target_layer = target.split(".")[0]
            if target_layer != layer and target_layer not in ALLOWED[layer]:
                allowed = sorted(ALLOWED[layer]) or "nothing"
                wrong.append(f"{module}:{line} imports {target} ({layer} may use {allowed})")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's components of more than one module: each is an import circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


# Circles being removed elsewhere, each with who removes it; an entry that no longer holds fails too.
KNOWN_CIRCLES: set[tuple[str, ...]] = set()


def test_no_import_circle() -> None:
    circles = {tuple(c) for c in strongly_connected(import_graph())}
    new = circles - KNOWN_CIRCLES
    assert not new, "import circles:\n" + "\n".join(" <-> ".join(c) for c in sorted(new))
    gone = KNOWN_CIRCLES - circles
    assert not gone, f"no longer a circle, remove from KNOWN_CIRCLES: {sorted(gone)}"


@pytest.mark.parametrize("circle", [["a", "b"], ["a", "b", "c"]])
def test_the_circle_finder_finds_circles(circle: list[str]) -> None:
    graph = {name: {circle[(i + 1) % len(circle)]: 1} for i, name in enumerate(circle)} | {"lone": {"a": 1}}
    assert strongly_connected(graph) == [sorted(circle)]

"""The pattern registry drives the graph tier: every pattern has each piece it needs in every layer, and a
missing piece is a failure that names it and the README step that adds it (README "Adding a graph
pattern"), never a bare KeyError that takes down the tests of every other pattern."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.graph_strategies import MissingGraphPiece, graph_strategy, has_strategy
from conformance.graphs import make_graph_inputs
from device.ggml.graph import builders
from device.ggml.ops_movement import VIEWS
from golden import catalogue
from golden.case import TensorSpec
from golden.graphs.case import PROPAGATION, GraphCase, evaluate_graph, exact_graph_inputs
from golden.graphs.graph import Graph, GraphInput, GraphNode
from golden.graphs.registry import patterns
from tests.graph_examples import EXAMPLES, example, of_pattern

STEPS = 'README "Adding a graph pattern"'


def node_pieces(pattern: str, graph: Graph) -> list[str]:
    """What the graph's nodes lack: a catalogue op, a ggml constructor, a propagation rule where a node
    reads another node's output (an error carried in must be carried through)."""
    missing = []
    for node in graph.nodes:
        where = f"{pattern}, node {node.label}"
        if node.op not in catalogue.OPS:
            missing.append(f"{where}: {node.op} is not an op of the catalogue (golden/<family>.py)")
        if node.op not in VIEWS and node.op not in builders():
            missing.append(f"{where}: no ggml constructor for {node.op} (BUILDERS in device/ggml/ops_<family>.py)")
        fed = [s for s in node.srcs if not graph.is_input(s)]
        if fed and node.op not in PROPAGATION:
            missing.append(f"{where} reads {', '.join(fed)} but golden/graphs/case.py has no propagation rule for "
                           f"{node.op}: add @_rule({node.op!r}) ({STEPS}, step 4)")
    return missing


def missing_pieces(pattern: str) -> list[str]:
    found = patterns()[pattern]
    missing = []
    if not found.signatures:
        missing.append(f"{pattern}: no signatures (the values of its type param) in its Pattern ({STEPS}, step 1)")
    if not has_strategy(pattern):
        missing.append(f"{pattern}: no parameter strategy: @_params({pattern!r}) in conformance/graph_strategies.py "
                       f"({STEPS}, step 2)")
    names = of_pattern(pattern)
    if not names:
        missing.append(f"{pattern}: no named example: add '{pattern}/<what it shows>' to EXAMPLES in "
                       f"tests/graph_examples.py ({STEPS}, step 3)")
    for name in names:
        missing += node_pieces(pattern, example(name).graph)
    return missing


@pytest.mark.parametrize("pattern", sorted(patterns()))
def test_every_pattern_has_its_pieces(pattern: str) -> None:
    missing = missing_pieces(pattern)
    assert not missing, "\n".join(missing)


def test_every_example_is_named_for_its_pattern_and_its_golden_runs() -> None:
    for name in EXAMPLES:
        case = example(name)
        assert name.split("/", 1)[0] == case.pattern and "/" in name, f"{name}: names {case.pattern}'s example"
        # the propagation rules' preconditions hold on the example's own inputs
        evaluate_graph(case, exact_graph_inputs(case, make_graph_inputs(case)))


def _drawn() -> st.SearchStrategy[GraphCase]:
    return st.one_of([graph_strategy(n, s) for n, p in sorted(patterns().items()) for s in p.signatures
                      if has_strategy(n)])


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(case=_drawn())
def test_drawn_cases_have_every_node_piece(case: GraphCase) -> None:
    """What the strategies draw (other variants than the examples: a bias, a softcap, a cache) still has a
    constructor and a rule for every node."""
    missing = node_pieces(case.pattern, case.graph)
    assert not missing, "\n".join(missing)


@pytest.fixture
def lonely() -> Iterator[str]:
    """A pattern registered with nothing else: an ABS after an ABS (ABS has no propagation rule)."""
    def expand(case: Any) -> Graph:
        spec = TensorSpec("f32", (8, 1, 1, 1), name="x")
        return Graph((GraphInput("x", spec),), (GraphNode("a", "ABS", ("x",), spec.ne),
                                                GraphNode("b", "ABS", ("a",), spec.ne)), ("b",))

    table = patterns()
    table["lonely"] = dataclasses.replace(table["softcap"], name="lonely", expand=expand)
    try:
        yield "lonely"
    finally:
        del table["lonely"]
        graph_strategy.cache_clear()


def test_a_missing_strategy_and_example_are_named(lonely: str) -> None:
    missing = "\n".join(missing_pieces(lonely))
    assert "lonely: no parameter strategy: @_params('lonely') in conformance/graph_strategies.py" in missing
    assert "lonely: no named example: add 'lonely/<what it shows>' to EXAMPLES in tests/graph_examples.py" in missing
    with pytest.raises(MissingGraphPiece, match="graph pattern lonely: the suite lacks its parameter strategy"):
        graph_strategy(lonely, "f32")


def test_a_missing_propagation_rule_is_named(lonely: str) -> None:
    graph = GraphCase(lonely, (("type", "f32"), ("ne", (8, 1, 1, 1)), ("cap", 1.0))).graph
    missing = node_pieces(lonely, graph)
    assert missing == ["lonely, node b:ABS reads a but golden/graphs/case.py has no propagation rule for ABS: add "
                       f"@_rule('ABS') ({STEPS}, step 4)"]


def test_a_missing_strategy_fails_its_own_suite_test_only(lonely: str) -> None:
    from conformance.test_graphs import _parameters

    ids = [p.id for p in _parameters()]
    assert "lonely-f32" in ids and len(ids) > 1  # the others are still parameters, collected as before

"""Faulty plug-ins for state between nodes and between graphs: real ggml:CPU with a planted cache.

``stale_rope_cache`` stands for ggml-cann's ROPE sin/cos cache (#15629; aclnn_ops.cpp 0.20.2): it
lives in the backend context and is rebuilt only when ``n_dims``, ``freq_base`` (or the sections)
change, so a second ROPE node with equal ``n_dims``/``freq_base`` is rotated with the first node's
positions, ``freq_scale`` and ``ext_factor``. Here, within each graph compute, a ROPE node whose
(n_dims, freq_base, mode) matches an earlier node's is computed with that node's positions and params.
The suite must fail ``rope_pair`` and name the second ROPE node (the blocked run's first wrong node).

``address_keyed_graph_cache`` stands for ggml-cann's ACL graph cache matching graphs by tensor
address (#16166): a graph whose tensors sit where the previous graph's did is replayed as captured,
with the earlier graph's op params, on the new data. The harness frees a graph's buffers and
allocates the next graph's of equal sizes, so addresses repeat exactly when the ops and shapes do:
that is this plug-in's key. (A change of strides alone replays correctly here: the model keeps the
captured params, not the captured strides.) The state sequences must fail it, and the failing
record must say "only after the sequence".
"""

from __future__ import annotations

from typing import Any

import numpy as np

from device.base import GraphRunResult, as_output
from golden import catalogue
from golden.graphs.case import GraphCase, evaluate_graph
from tests.plugins import planted
from tests.plugins.faulty_graph import GraphFault


class StaleRopeCache(GraphFault):
    fault = "stale_rope_cache"
    description = "ggml:CPU whose ROPE sin/cos cache is keyed on n_dims, freq_base and mode only"

    def run_graph(self, case: GraphCase, inputs: list[np.ndarray]) -> GraphRunResult:
        result = super().run_graph(case, inputs)
        graph = case.graph
        given = {i.name: np.asarray(x, np.float64) for i, x in zip(graph.inputs, inputs, strict=True)}
        for run, values in result.nodes.items():
            cache: dict[tuple[Any, ...], tuple[np.ndarray, Any]] = {}  # one graph compute's cache
            for node in graph.nodes:
                if node.op != "ROPE" or node.name not in values or not all(s in given for s in node.srcs):
                    continue
                node_case = case.node_case(node)
                key = (node_case.param("n_dims"), node_case.param("freq_base"), node_case.param("mode"))
                if key not in cache:
                    cache[key] = (given[node.srcs[1]], node_case)
                    continue
                positions, first = cache[key]  # the first node's sin/cos: its positions and params
                stale = catalogue.evaluate(first, [given[node.srcs[0]], positions])
                values[node.name] = as_output(stale, node.dst)
            result.nodes[run] = values
        return result


class AddressKeyedGraphCache(GraphFault):
    fault = "address_keyed_graph_cache"
    description = "ggml:CPU with a graph cache keyed on tensor addresses that replays the captured graph"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._captured: dict[tuple[Any, ...], GraphCase] = {}

    def run_graph(self, case: GraphCase, inputs: list[np.ndarray]) -> GraphRunResult:
        result = super().run_graph(case, inputs)
        graph = case.graph
        addresses = (case.pattern, tuple((i.spec.dtype, i.spec.ne) for i in graph.inputs),
                     tuple((n.op, n.ne) for n in graph.nodes))
        captured = self._captured.setdefault(addresses, case)
        if captured.params == case.params:
            return result  # the same graph on new data: a replay is right
        replayed = evaluate_graph(captured, [np.asarray(x, np.float64) for x in inputs])
        for values in result.nodes.values():
            for name in values:
                values[name] = as_output(replayed.exact[name], graph.node(name).dst)
        return result


@planted("test_graph and rope_pair", "ggml-cann #15629: ROPE's sin/cos cache shared across nodes with equal "
         "n_dims/freq_base")
def stale_rope_cache(options: dict[str, Any]) -> StaleRopeCache:
    return StaleRopeCache("CPU", options.get("ggml_lib"))


@planted("test_graph_state_sequence", "ggml-cann #16166: the ACL graph cache matched graphs by tensor address and "
         "replayed a stale graph")
def address_keyed_graph_cache(options: dict[str, Any]) -> AddressKeyedGraphCache:
    return AddressKeyedGraphCache("CPU", options.get("ggml_lib"))

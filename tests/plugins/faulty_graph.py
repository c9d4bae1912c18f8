"""Faulty plug-ins of the graph tier: real ggml:CPU, with one fused kernel planted wrong.

``fused_rms_norm_eps`` stands for llama.cpp #14540: Vulkan's fused RMS_NORM+MUL read eps from the
wrong place and Mistral-7B became incoherent, while every single-op RMS_NORM case passed. Here the
graph's fused run (only the outputs flagged, where a backend fuses) computes RMS_NORM→MUL with eps
taken from the weight's first element; the fusion-blocked and graph-allocator runs are the CPU's own.
The suite must fail it and say "fails only when fused", naming the RMS_NORM→MUL span.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from device.base import Capability, GraphRun, GraphRunResult, as_output
from device.ggml.device import GgmlDevice
from golden.graphs.case import GraphCase, evaluate_graph
from tests.plugins import planted


def _fuses_rms_norm_mul(case: GraphCase) -> bool:
    nodes = case.graph.nodes
    return any(a.op == "RMS_NORM" and b.op == "MUL" and a.name in b.srcs and a.name not in case.graph.outputs
               for a, b in zip(nodes, nodes[1:], strict=False))


class GraphFault(GgmlDevice):
    """ggml:CPU running graph cases, named after the fault a subclass plants in its graph runs."""

    fault = ""
    description = ""

    @property
    def capabilities(self) -> frozenset[Capability]:
        return frozenset({Capability.GRAPH})

    def info(self) -> dict[str, Any]:
        return super().info() | {"spec": f"faulty:{self.fault}", "name": f"faulty:{self.fault}",
                                 "description": self.description}


class FusedEpsFromWeight(GraphFault):
    fault = "fused_rms_norm_eps"
    description = "ggml:CPU with a fused RMS_NORM+MUL that reads eps from the weight"

    def run_graph(self, case: GraphCase, inputs: list[np.ndarray]) -> GraphRunResult:
        result = super().run_graph(case, inputs)
        if not _fuses_rms_norm_mul(case) or GraphRun.FUSED.value not in result.nodes:
            return result
        names = [i.name for i in case.graph.inputs]
        weight = np.asarray(inputs[names.index("w")], np.float64)
        wrong_eps = float(np.float32(abs(weight.flat[0]) or 1.0))
        wrong = GraphCase(case.pattern, tuple((k, wrong_eps if k == "eps" else v) for k, v in case.params),
                          case.data_seed, case.distribution)
        values = evaluate_graph(wrong, [np.asarray(x, np.float64) for x in inputs])
        result.nodes[GraphRun.FUSED.value] = {
            name: as_output(values.exact[name], case.graph.node(name).dst) for name in case.graph.outputs}
        return result


@planted("test_graph and rms_norm_mul and not add",
         "llama.cpp #14540: Vulkan's fused RMS_NORM+MUL read eps from the wrong place")
def fused_rms_norm_eps(options: dict[str, Any]) -> FusedEpsFromWeight:
    return FusedEpsFromWeight("CPU", options.get("ggml_lib"))

"""Graph cases on a ggml backend: the pattern's nodes built with the op tier's constructors, run three ways.

* ``fused``: every tensor in its own buffer, only the graph's outputs flagged; inside
  ``ggml_backend_graph_compute`` the backend is free to fuse every chain its matcher accepts
  (``ggml_can_fuse``: consecutive nodes, one use each, not views, not outputs).
* ``blocked``: the same graph with every node flagged ``ggml_set_output``, which stops every backend
  from fusing; each node's result is read back, so each node can be judged on the device's own inputs.
* ``gallocr``: the inputs in a buffer of their own; the nodes placed by ggml's graph allocator, which
  reuses an intermediate's memory for a later node (in place where the op allows), as a model run does.

Each run gets a fresh build: output flags stay on a tensor once set.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from device.base import GraphRun, GraphRunResult, output_dtype
from device.ggml.graph import Builder, GraphBuilder, GraphBuildError, InputTensor, SymbolMissing
from device.ggml.lib import GgmlLib, TensorP
from device.ggml.ops_movement import VIEWS
from device.ggml.prepared import Allocation, PreparedGraph, declined, set_output
from golden.graphs.case import GraphCase


class GraphHost(Protocol):
    """What a graph run needs of its ggml device (``GgmlDevice``): the library, the backend, the
    device's name and its per-op constructors."""

    lib: GgmlLib
    backend: Any
    name: str

    def builder_for(self, op: str) -> Builder: ...


def build(device: GraphHost, case: GraphCase, run: GraphRun) -> tuple[PreparedGraph, dict[str, TensorP]]:
    """The case's graph for one run, ready to allocate; also its node tensors by name."""
    lib, graph = device.lib, case.graph
    g_in = GraphBuilder(lib, n_tensors=4 * len(graph.inputs) + 4)
    g_nodes: GraphBuilder | None = None
    try:
        inputs = [InputTensor(g_in, i.spec, k) for k, i in enumerate(graph.inputs)]
        g_nodes = GraphBuilder(lib, n_tensors=4 * len(graph.nodes) + 16)
        tensors: dict[str, TensorP] = {i.name: t.tensor for i, t in zip(graph.inputs, inputs, strict=True)}
        nodes: dict[str, TensorP] = {}
        for node in graph.nodes:
            srcs, node_case = [tensors[s] for s in node.srcs], case.node_case(node)
            if node.op in VIEWS:  # a view node is the view itself (the op tier's builder adds a ggml_cont)
                t = VIEWS[node.op](g_nodes, srcs[0], node_case)
            else:
                t = device.builder_for(node.op)(g_nodes, srcs, node_case)
            if not t:
                raise GraphBuildError(f"{node.op} constructor returned NULL for node {node.name}")
            lib.ggml_set_name(t, node.name.encode())
            tensors[node.name] = nodes[node.name] = t
        # the graph-allocator run flags what it reads back: with the view sources left to the allocator (as
        # llama.cpp leaves them) an output view that is not read there is not flagged either
        flagged = (list(nodes) if run is GraphRun.BLOCKED else
                   list(graph.allocator_outputs() if run is GraphRun.GALLOCR else graph.outputs))
        for name in flagged:
            set_output(g_nodes, nodes[name])
            view_src = nodes[name].contents.view_src
            if run is GraphRun.GALLOCR and view_src and graph.hold_view_sources:
                # an output view keeps its source's memory: the allocator frees (and reuses) a source
                # that is not flagged once its views are consumed; not in the fused run, where the
                # flag would stop the backend fusing through the source
                set_output(g_nodes, view_src)
        allocation = Allocation.GALLOCR if run is GraphRun.GALLOCR else Allocation.OWN
        prepared = PreparedGraph(lib, device.backend, device.name, g_in, inputs, [nodes[o] for o in graph.outputs],
                                 node_ctx=g_nodes, graph_size=max(64, 2 * len(graph.nodes)), allocation=allocation)
    except BaseException:
        if g_nodes is not None:
            g_nodes.free()
        g_in.free()
        raise
    return prepared, nodes


def run_graph(device: GraphHost, case: GraphCase, inputs: list[np.ndarray]) -> GraphRunResult:
    result = GraphRunResult()
    graph = case.graph
    for run in GraphRun:
        try:
            prepared, nodes = build(device, case, run)
        except SymbolMissing as exc:  # a release without ggml_set_output / the graph allocator
            result.not_run[run.value] = str(exc)
            continue
        with prepared:
            if run is GraphRun.FUSED:
                refused = prepared.supported(list(nodes.values()))
                if refused is not None:
                    raise declined(device.lib, refused, f"node {refused.contents.name.decode()}")
            prepared.allocate()
            result.placement[run.value] = {name: (int(t.contents.data or 0), int(device.lib.ggml_nbytes(t)))
                                           for name, t in nodes.items()}
            prepared.upload(inputs)
            elapsed = prepared.compute()
            wanted = ([n.name for n in graph.nodes if graph.read_back(n.name)] if run is GraphRun.BLOCKED
                      else list(graph.allocator_outputs() if run is GraphRun.GALLOCR else graph.outputs))
            result.nodes[run.value] = {
                name: prepared.read(nodes[name], as_output=True).astype(output_dtype(graph.node(name).dst), copy=False)
                for name in wanted
            }
            result.inputs_intact[run.value] = prepared.inputs_back()[1]
            result.extra[f"{run.value}_compute_s"] = elapsed
    return result

"""Faulty plug-ins of the graph tier for two more fusion bugs: real ggml:CPU with one fused kernel
planted wrong in the run where a backend fuses.

* ``bias_fused_as_plain`` stands for llama.cpp #17080 (stable-diffusion's black images): CUDA fused
  MUL_MAT with a *broadcast* bias ADD as if the bias were a plain vector. Here the fused run adds the
  bias's first row to every token whenever the bias is not a plain vector; the fusion-blocked and
  graph-allocator runs are the CPU's own, so the suite must say "fails only when fused" and name the
  MUL_MAT→ADD span.
* ``topk_moe_output_over_input`` stands for Vulkan #19768 (and CUDA #19916's gate/up/GLU, the same
  class): with the graph allocator reusing buffers in place, the fused TOPK_MOE kernel's weights
  were written over the router logits it was still reading when there was more than one row. Here
  the graph-allocator run computes the chain with its rows in reverse order (as independent
  workgroups may), each row's k weights written at the start of the logits' memory, ``k`` floats
  per row, before the lower rows read their logits. The fused and blocked runs are the CPU's own,
  so the suite must say "fails only under ggml's graph allocator".
"""

from __future__ import annotations

from typing import Any

import numpy as np

from device.base import GraphRun, GraphRunResult, as_output
from golden.graphs.case import GraphCase, evaluate_graph
from tests.plugins import planted
from tests.plugins.faulty_graph import GraphFault


def _outputs(case: GraphCase, inputs: list[np.ndarray]) -> dict[str, np.ndarray]:
    values = evaluate_graph(case, [np.asarray(x, np.float64) for x in inputs])
    return {name: as_output(values.stored[name], case.graph.node(name).dst) for name in case.graph.outputs}


class BiasFusedAsPlain(GraphFault):
    fault = "bias_fused_as_plain"
    description = "ggml:CPU whose fused MUL_MAT+ADD adds a broadcast bias as a plain vector (its first row)"

    def run_graph(self, case: GraphCase, inputs: list[np.ndarray]) -> GraphRunResult:
        result = super().run_graph(case, inputs)
        if case.pattern != "mul_mat_add" or case.param("bias") == "vec" or GraphRun.FUSED.value not in result.nodes:
            return result
        names = [i.name for i in case.graph.inputs]
        k = names.index("bias")
        bias = np.asarray(inputs[k])
        plain = list(inputs)
        plain[k] = np.broadcast_to(bias[..., :1, :], bias.shape).astype(bias.dtype)  # row 0 for every token
        result.nodes[GraphRun.FUSED.value] = _outputs(case, plain)
        return result


class TopkMoeOutputOverInput(GraphFault):
    fault = "topk_moe_output_over_input"
    description = "ggml:CPU whose fused TOPK_MOE writes its weights over the logits it reads (buffers reused)"

    def run_graph(self, case: GraphCase, inputs: list[np.ndarray]) -> GraphRunResult:
        result = super().run_graph(case, inputs)
        if not case.pattern.startswith("topk_moe") or GraphRun.GALLOCR.value not in result.nodes:
            return result
        n_expert, k, n_tokens = case.param("n_expert"), case.param("k"), case.param("n_tokens")
        memory = np.asarray(inputs[0], np.float32).reshape(-1).copy()  # the logits' buffer, row after row
        rows: dict[str, list[np.ndarray]] = {name: [] for name in case.graph.outputs}
        for t in reversed(range(n_tokens)):
            logits = memory[t * n_expert:(t + 1) * n_expert].reshape(1, 1, 1, n_expert)
            one = GraphCase(case.pattern, tuple((p, 1 if p == "n_tokens" else v) for p, v in case.params),
                            case.data_seed, case.distribution)
            out = _outputs(one, [logits, *inputs[1:]])
            for name, value in out.items():
                rows[name].append(value)
            weights = out[case.graph.outputs[0]].reshape(-1).astype(np.float32)
            memory[t * k:(t + 1) * k] = weights  # the row's weights land where the gallocr put them
        result.nodes[GraphRun.GALLOCR.value] = {
            name: np.concatenate(rows[name][::-1], axis=-2) for name in case.graph.outputs}
        return result


@planted("test_graph and mul_mat_add",
         "llama.cpp #17080: CUDA fused a broadcast bias ADD after MUL_MAT as a plain bias")
def bias_fused_as_plain(options: dict[str, Any]) -> BiasFusedAsPlain:
    return BiasFusedAsPlain("CPU", options.get("ggml_lib"))


@planted("test_graph and topk_moe",
         "llama.cpp #19768: Vulkan's fused TOPK_MOE output overlapped its input with several rows")
def topk_moe_output_over_input(options: dict[str, Any]) -> TopkMoeOutputOverInput:
    return TopkMoeOutputOverInput("CPU", options.get("ggml_lib"))

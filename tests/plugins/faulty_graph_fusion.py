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
  so the suite must say "fails only under ggml's graph allocator". It stands in for the bug on every
  graph-allocator run of the logits-input form, where the real allocator never overlaps them.
* ``topk_moe_weights_over_freed_logits`` is the same kernel acting only where ggml's allocator really put
  the weights over the logits: in llama.cpp's construction (``router=mul_mat``: the logits a MUL_MAT
  node, so their block is freed once read; only the outputs flagged) the real ``ggml_gallocr`` run
  places the last weights node in the logits' freed block for many parameter combinations; where it
  does and there is more than one row, the kernel's weights (rows in reverse order) land on logits not
  yet read. With the logits a graph input, or one row, it is the CPU's own result.
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
        if (not case.pattern.startswith("topk_moe") or case.param("router", "input") != "input"
                or GraphRun.GALLOCR.value not in result.nodes):
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


def _one_row_from_logits(case: GraphCase) -> GraphCase:
    """The same router for one token, the logits a graph input (the fused kernel's view of one row)."""
    params = tuple((p, 1 if p == "n_tokens" else v) for p, v in case.params if p not in ("router", "n_embd"))
    return GraphCase(case.pattern, params, case.data_seed, case.distribution)


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


class TopkMoeWeightsOverFreedLogits(GraphFault):
    fault = "topk_moe_weights_over_freed_logits"
    description = ("ggml:CPU whose fused TOPK_MOE writes its weights over the router logits it still reads, where "
                   "the graph allocator reused the logits' freed block for them")

    def run_graph(self, case: GraphCase, inputs: list[np.ndarray]) -> GraphRunResult:
        result = super().run_graph(case, inputs)
        placed = result.placement.get(GraphRun.GALLOCR.value, {})
        if (case.pattern != "topk_moe" or case.param("router") != "mul_mat" or case.param("n_tokens") < 2
                or GraphRun.GALLOCR.value not in result.nodes):
            return result
        out = case.graph.outputs[0]
        if out not in result.nodes[GraphRun.GALLOCR.value]:
            # a view output (scale 1.0: the RESHAPE of the weights) is not read back under the allocator, which
            # may reuse its source: nothing this run returns holds the kernel's writes (it was a KeyError here)
            return result
        logits_at, weights_at = placed["logits"], placed[out]
        if not _overlap(logits_at, weights_at):
            return result  # the allocator kept them apart: the kernel's writes harm nothing
        n_expert, k, n_tokens = case.param("n_expert"), case.param("k"), case.param("n_tokens")
        base = min(logits_at[0], weights_at[0])
        memory = np.zeros((max(sum(logits_at), sum(weights_at)) - base) // 4, np.float32)
        lo, wo = (logits_at[0] - base) // 4, (weights_at[0] - base) // 4
        golden = evaluate_graph(case, [np.asarray(x, np.float64) for x in inputs])
        memory[lo:lo + n_expert * n_tokens] = np.asarray(golden.stored["logits"], np.float32).reshape(-1)
        bias = [inputs[[i.name for i in case.graph.inputs].index("expert_bias")]] if case.param("bias") else []
        one, rows = _one_row_from_logits(case), {}
        for t in reversed(range(n_tokens)):  # independent workgroups, the last row first
            row = memory[lo + t * n_expert:lo + (t + 1) * n_expert].reshape(1, 1, 1, n_expert).copy()
            weights = _outputs(one, [row, *bias])[one.graph.outputs[0]].reshape(-1).astype(np.float32)
            rows[t] = weights
            memory[wo + t * k:wo + (t + 1) * k] = weights  # where the allocator put this row's weights
        shape = np.shape(result.nodes[GraphRun.GALLOCR.value][out])
        result.nodes[GraphRun.GALLOCR.value][out] = np.stack([rows[t] for t in range(n_tokens)]).reshape(shape)
        return result


@planted("test_graph and mul_mat_add",
         "llama.cpp #17080: CUDA fused a broadcast bias ADD after MUL_MAT as a plain bias")
def bias_fused_as_plain(options: dict[str, Any]) -> BiasFusedAsPlain:
    return BiasFusedAsPlain("CPU", options.get("ggml_lib"))


@planted("test_graph and topk_moe",
         "llama.cpp #19768: Vulkan's fused TOPK_MOE output overlapped its input with several rows")
def topk_moe_output_over_input(options: dict[str, Any]) -> TopkMoeOutputOverInput:
    return TopkMoeOutputOverInput("CPU", options.get("ggml_lib"))


@planted("test_graph and topk_moe",
         "llama.cpp #19768 as llama.cpp's graph meets it: the fused TOPK_MOE's weights written over router logits "
         "not yet read, in the block ggml's allocator freed after the router MUL_MAT")
def topk_moe_weights_over_freed_logits(options: dict[str, Any]) -> TopkMoeWeightsOverFreedLogits:
    return TopkMoeWeightsOverFreedLogits("CPU", options.get("ggml_lib"))

"""Faulty plug-ins of the graph tier that act only inside a model block: real ggml:CPU, with the block's
fused and graph-allocator runs (only the outputs flagged, where a backend fuses) computed wrong; the
fusion-blocked run is the CPU's own, so no single node is wrong on the device's own inputs.

* ``block_gate_up_swapped``: the SwiGLU of ``llama_layer`` and ``moe_ffn`` takes gate and up the other way
  round (silu(up)·gate), as a fused gate/up/GLU kernel with its operands swapped would.
* ``block_attention_scale_dropped``: ``llama_layer``'s attention without its 1/sqrt(hd) scale.
* ``block_expert_dropped``: ``moe_ffn`` adds up k − 1 of its k expert outputs (the last one left out).
* ``block_stale_weights``: a fused block kernel's weight cache (repacked weights, as backends keep them per
  tensor) keyed on the weight's name and shape and never invalidated: a later graph of ``llama_layer`` or
  ``moe_ffn`` whose weight matrices have the shapes of an earlier graph's (in the same device process) is
  computed with the earlier graph's weight values. A new model (or a test with new weights) of the same
  shapes is where a real cache of this kind goes stale; ``test_graph_block_sequence`` (conformance/
  test_graph_state.py) computes exactly that on a freshly opened device, so the catch is deterministic and
  confirmed "only after the sequence". ``test_graph`` runs its examples one after another in one worker
  too (a fresh one only after a failure) and catches it as well, but by history: shrunk, it ends Flaky.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from device.base import GraphRun, GraphRunResult, as_output
from golden.graphs.case import GraphCase, GraphGolden, evaluate_graph, exact_graph_inputs
from tests.plugins import planted
from tests.plugins.faulty_graph import GraphFault

Wrong = Callable[[GraphCase, list[np.ndarray]], "np.ndarray | None"]
FUSING_RUNS = (GraphRun.FUSED.value, GraphRun.GALLOCR.value)


class BlockFault(GraphFault):
    """The fused and graph-allocator runs' output replaced by ``wrong(case, exact inputs)`` (None: as is)."""

    wrong: Wrong

    def info(self) -> dict[str, Any]:
        # the CPU's own name, so its documented deviations (FLASH_ATTN_EXT's F16 accumulator under prec f32)
        # still hold for the nodes the fault leaves alone
        return super().info() | {"name": "CPU"}

    def run_graph(self, case: GraphCase, inputs: list[np.ndarray]) -> GraphRunResult:
        result = super().run_graph(case, inputs)
        value = type(self).wrong(case, exact_graph_inputs(case, inputs))
        if value is None:
            return result
        (out,) = case.graph.outputs
        for run in FUSING_RUNS:
            if run in result.nodes:
                result.nodes[run] = {out: as_output(value, case.graph.node(out).dst)}
        return result


def _golden(case: GraphCase, xs: list[np.ndarray]) -> GraphGolden:
    return evaluate_graph(case, xs)


def _with(case: GraphCase, xs: list[np.ndarray], change: dict[str, Callable[[np.ndarray], np.ndarray]],
          swap: tuple[str, str] | None = None) -> list[np.ndarray]:
    names = [i.name for i in case.graph.inputs]
    out = [change[n](x) if n in change else x for n, x in zip(names, xs, strict=True)]
    if swap is not None:
        a, b = names.index(swap[0]), names.index(swap[1])
        out[a], out[b] = out[b], out[a]
    return out


def _gate_up_swapped(case: GraphCase, xs: list[np.ndarray]) -> np.ndarray | None:
    pair = {"llama_layer": ("w_gate", "w_up"), "moe_ffn": ("gate_exps", "up_exps")}.get(case.pattern)
    if pair is None:
        return None
    return _golden(case, _with(case, xs, {}, pair)).exact[case.graph.outputs[0]]


def _scale_dropped(case: GraphCase, xs: list[np.ndarray]) -> np.ndarray | None:
    if case.pattern != "llama_layer":
        return None
    root = math.sqrt(case.param("hd"))  # q scaled by sqrt(hd) (RoPE is linear): the logits lose 1/sqrt(hd)
    return _golden(case, _with(case, xs, {"wq": lambda w: w * root})).exact[case.graph.outputs[0]]


def _expert_dropped(case: GraphCase, xs: list[np.ndarray]) -> np.ndarray | None:
    k = case.param("k")
    if case.pattern != "moe_ffn" or k < 2:
        return None
    golden = _golden(case, xs)
    return golden.exact["slot0" if k == 2 else f"sum{k - 2}"]


def weight_inputs(case: GraphCase) -> list[int]:
    """The positions of the graph inputs that are a MUL_MAT's or MUL_MAT_ID's weights (their src0)."""
    names = [i.name for i in case.graph.inputs]
    weights = {n.srcs[0] for n in case.graph.nodes if n.op in ("MUL_MAT", "MUL_MAT_ID")}
    return [names.index(w) for w in names if w in weights]


class StaleWeights(BlockFault):
    """A block's fused and graph-allocator runs with weights from a cache keyed on (name, dtype, shape)."""

    fault = "block_stale_weights"
    description = ("ggml:CPU whose fused runs of a model block take its weights from a cache keyed on the "
                   "tensor's name and shape, never invalidated (an earlier graph's weights of the same shapes)")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cache: dict[tuple[Any, ...], np.ndarray] = {}  # lives as long as the device process

    def run_graph(self, case: GraphCase, inputs: list[np.ndarray]) -> GraphRunResult:
        result = GraphFault.run_graph(self, case, inputs)
        if case.pattern not in ("llama_layer", "moe_ffn"):
            return result
        used = list(inputs)
        stale = False
        for j in weight_inputs(case):
            spec = case.graph.inputs[j].spec
            key = (case.graph.inputs[j].name, spec.dtype, spec.ne)
            cached = self._cache.setdefault(key, np.array(inputs[j], copy=True))
            if not np.array_equal(cached, inputs[j]):
                used[j], stale = cached, True
        if not stale:
            return result
        (out,) = case.graph.outputs
        value = _golden(case, exact_graph_inputs(case, used)).exact[out]
        for run in FUSING_RUNS:
            if run in result.nodes:
                result.nodes[run] = {out: as_output(value, case.graph.node(out).dst)}
        return result


class GateUpSwapped(BlockFault):
    fault = "block_gate_up_swapped"
    description = "ggml:CPU whose fused runs of a model block swap the SwiGLU's gate and up"
    wrong = staticmethod(_gate_up_swapped)


class ScaleDropped(BlockFault):
    fault = "block_attention_scale_dropped"
    description = "ggml:CPU whose fused runs of a llama layer drop the attention scale"
    wrong = staticmethod(_scale_dropped)


class ExpertDropped(BlockFault):
    fault = "block_expert_dropped"
    description = "ggml:CPU whose fused runs of a MoE FFN leave out the last expert's output"
    wrong = staticmethod(_expert_dropped)


@planted("test_graph and (llama_layer or moe_ffn)",
         "CUDA #19916's class: a fused gate/up/GLU with its operands swapped, seen only in a model's graph")
def block_gate_up_swapped(options: dict[str, Any]) -> GateUpSwapped:
    return GateUpSwapped("CPU", options.get("ggml_lib"))


@planted("test_graph and llama_layer", "a fused attention that drops kq_scale, seen only in a model's graph")
def block_attention_scale_dropped(options: dict[str, Any]) -> ScaleDropped:
    return ScaleDropped("CPU", options.get("ggml_lib"))


@planted("test_graph and moe_ffn", "a fused MoE FFN that drops the last expert's pass, seen only in a model's graph")
def block_expert_dropped(options: dict[str, Any]) -> ExpertDropped:
    return ExpertDropped("CPU", options.get("ggml_lib"))


@planted("test_graph_block_sequence",  # test_graph's own draws catch it too, but by history (Flaky when shrunk)
         "a fused block kernel's weight cache keyed on the tensor's name/address, not invalidated when a new graph "
         "brings new weights of the same shapes (the layer computed with the previous graph's weights)")
def block_stale_weights(options: dict[str, Any]) -> StaleWeights:
    return StaleWeights("CPU", options.get("ggml_lib"))

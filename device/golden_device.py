"""``--device golden``: the oracle itself behind the Device contract, for self-checks.

It returns the exact golden value rounded once to the destination dtype (in the contract's output
array type, :func:`device.base.output_dtype`), so the suite's verdict
against it checks the golden model, the verdict and the tolerance rows for consistency.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from device.base import Capability, GraphRun, GraphRunResult, RunResult, Unsupported, as_output
from golden import catalogue, dtypes
from golden.case import OpCase
from golden.graphs.case import GraphCase, evaluate_graph, exact_graph_inputs


class GoldenDevice:
    name = "golden"
    # pure numpy: nothing can abort the process. Honoured for the built-in ``golden`` spec only: a
    # plug-in that subclasses this class still runs in a worker (see device.registry.runs_in_process).
    capabilities = frozenset({Capability.IN_PROCESS, Capability.GRAPH})

    def info(self) -> dict[str, Any]:
        return {"spec": "golden", "name": "golden", "description": "exact NumPy golden model", "backend": "golden"}

    def supports(self, case: OpCase) -> bool | None:
        return catalogue.get(case.op).implemented

    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        spec = catalogue.get(case.op)
        if not spec.implemented:
            raise Unsupported(f"{case.op}: golden not implemented")
        exact = catalogue.evaluate(case, catalogue.golden_inputs(case, inputs))
        if dtypes.is_quantized(case.dst):
            from golden import formats

            if len(case.inputs) == 1 and case.inputs[0].dtype == case.dst:
                blocks = np.asarray(inputs[0], dtype=np.uint8)  # same-type copy: the blocks themselves
            else:  # ggml's reference quantizer on the exact values, one block at a time
                values = np.asarray(exact, dtype=np.float32)
                block = dtypes.block_size(case.dst)
                blocks = formats.quantize(values.reshape(-1, block), case.dst).reshape(-1)
                if 0 in spec.inplace_inputs and case.inputs[0].dtype == case.dst:
                    # written in place (SET_ROWS): rows the op leaves alone keep their bytes (random blocks
                    # need not survive a quantizer round trip)
                    before = np.asarray(inputs[0], dtype=np.uint8).reshape(-1)
                    old = formats.dequantize(before, case.dst, values.size).reshape(-1, values.shape[-1])
                    row_bytes = dtypes.row_size(case.dst, values.shape[-1])
                    kept = (old == values.reshape(old.shape)).all(axis=1)
                    blocks = np.where(np.repeat(kept, row_bytes), before[:blocks.size], blocks)
            return RunResult(blocks.reshape(-1), [np.array(x) for x in inputs])
        if case.dst in dtypes.INDEX_TYPES:
            return RunResult(np.asarray(exact).astype(dtypes.STORAGE_DTYPE[case.dst]),
                             [np.array(x) for x in inputs])
        return RunResult(as_output(exact, case.dst), [np.array(x) for x in inputs])

    def run_graph(self, case: GraphCase, inputs: list[np.ndarray]) -> GraphRunResult:
        """Every run gives the golden's node values as ggml stores them (nothing fuses, nothing aliases)."""
        graph = case.graph
        golden = evaluate_graph(case, exact_graph_inputs(case, inputs))
        result = GraphRunResult()
        for run in GraphRun:
            wanted = ([n.name for n in graph.nodes] if run is GraphRun.BLOCKED else
                      list(graph.allocator_outputs() if run is GraphRun.GALLOCR else graph.outputs))
            result.nodes[run.value] = {name: as_output(golden.exact[name], graph.node(name).dst) for name in wanted}
            result.inputs_intact[run.value] = [True] * len(graph.inputs)
        return result

    def close(self) -> None:
        pass


def open_golden_device(options: dict[str, Any]) -> GoldenDevice:
    return GoldenDevice()

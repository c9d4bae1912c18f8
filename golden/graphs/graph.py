"""The data a graph pattern expands into: inputs, nodes in llama.cpp's node order, outputs, fusable spans.

Pure data with no registry, so pattern modules (``golden/graphs/patterns/``) import only this module
and the registry (``golden/graphs/registry.py``) imports them: no import circle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from golden.case import CONTIGUOUS, Ne, OpCase, TensorSpec
from golden.spec import Param


class CaseParams(Protocol):
    """What a pattern's expansion reads of its case: the pattern name and its params."""

    @property
    def pattern(self) -> str: ...

    def param(self, name: str, default: Any = None) -> Any: ...


BLOCK_NMSE_FACTOR = 4.0  # NMSE is quadratic: twice the blocked run's error amplitude (the model tier's factor)
BLOCK_NMSE_FLOOR = 1e-10  # an RMS error of 1e-5 of the output's RMS: ~100 f32 ulps, far under any dropped term
VIEW_OPS = frozenset({"VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"})  # nodes that are ggml views, not kernels
# ops whose ggml constructor returns a view of src0 with the op on it (ggml_clamp): the kernel writes its
# result over its source, so the source's memory holds the op's result once the graph ran
IN_PLACE_OPS = frozenset({"CLAMP"})


@dataclass(frozen=True)
class GraphInput:
    """``fill``: how an integer input is made ("" floats from the case's distribution; "positions":
    token positions for ROPE; "rows:N": distinct row indices below N, as a KV cache's slots; "topk:N":
    for each column, ne0 distinct indices below N, as a router's chosen experts).
    ``written``: a node writes this input in place by design (SET_ROWS into a KV cache): its bytes
    are not expected back unchanged; the node's output (a view of it) is judged instead.
    ``values`` fixes its contents (numpy order, flattened), e.g. the positions or the causal mask a
    pattern's params imply, so the case id alone says which positions a ROPE node reads."""

    name: str
    spec: TensorSpec
    fill: str = ""
    written: bool = False
    values: tuple[float, ...] | None = None
    scale: float = 1.0  # drawn values are multiplied by it: a model's weights ~ 1/sqrt(fan-in), not O(1)
    spaced: bool = False  # each row a shuffle of evenly spaced values: no near-ties for a sort to break


@dataclass(frozen=True)
class GraphNode:
    """One node: a catalogue op applied to named sources (graph inputs or earlier nodes)."""

    name: str
    op: str
    srcs: tuple[str, ...]
    ne: Ne  # the node's output shape (ggml order)
    params: tuple[tuple[str, Any], ...] = ()
    form: str = ""
    dst: str = "f32"  # the dtype ggml stores the node's result in

    @property
    def label(self) -> str:
        return f"{self.name}:{self.op}"


@dataclass(frozen=True)
class Graph:
    """An expanded pattern: pure data, in llama.cpp's node order."""

    inputs: tuple[GraphInput, ...]
    nodes: tuple[GraphNode, ...]
    outputs: tuple[str, ...]
    spans: tuple[tuple[str, ...], ...] = ()  # node names a backend may fuse into one kernel
    # the graph-allocator run flags an output view's source as an output too, so that the view can be
    # read back after the run; False: only the outputs are flagged, as llama.cpp flags them, and an output
    # view whose source the allocator may reuse is not read back in that run
    hold_view_sources: bool = True
    # a model block, whose propagated bound grows over tens of nodes: the runs where a backend fuses (fused,
    # gallocr) are also held to the blocked run on the same device, NMSE against the golden within this factor
    # of the blocked run's (plus BLOCK_NMSE_FLOOR); None: the bound alone (docs/graph-error-model.md)
    nmse_vs_blocked: float | None = None

    def spec_of(self, name: str) -> TensorSpec:
        """The tensor a source name stands for: a graph input as given, a node as a packed tensor."""
        for i in self.inputs:
            if i.name == name:
                return i.spec
        node = self.node(name)
        return TensorSpec(node.dst, node.ne, CONTIGUOUS, node.name)

    def node(self, name: str) -> GraphNode:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"graph has no node {name!r}")

    def read_back(self, name: str) -> bool:
        """Whether a node's memory holds its own value after the graph ran: not a view of an input that
        a node writes in place (the view reads the new contents, so the blocked run cannot judge it)."""
        node = self.node(name)
        if self.overwritten_in_place(name):
            return False  # an in-place node (CLAMP) wrote its own result over this node's memory
        return not (node.op in VIEW_OPS and any(i.name == node.srcs[0] and i.written for i in self.inputs))

    def overwritten_in_place(self, name: str) -> bool:
        """Whether a later in-place node (``IN_PLACE_OPS``) writes its result over this node's memory."""
        return any(n.op in IN_PLACE_OPS and n.srcs[:1] == (name,) for n in self.nodes)

    def allocator_outputs(self) -> tuple[str, ...]:
        """The outputs the graph-allocator run can read back: all, unless an output view's source is
        left to the allocator (``hold_view_sources`` False), whose memory may be reused after its last reader."""
        if self.hold_view_sources:
            return self.outputs
        return tuple(o for o in self.outputs if self.node(o).op not in VIEW_OPS or self._last_kernel_viewed(o))

    def _last_kernel_viewed(self, name: str) -> bool:
        """Whether a view's memory (its source's, through any views) is a graph input's or a node's after
        which only views follow: nothing is allocated after that block is freed, so it holds its value."""
        source = name
        while not self.is_input(source) and self.node(source).op in VIEW_OPS:
            source = self.node(source).srcs[0]
        if self.is_input(source):
            return True
        names = [n.name for n in self.nodes]
        return all(n.op in VIEW_OPS for n in self.nodes[names.index(source) + 1:])

    def is_input(self, name: str) -> bool:
        return any(i.name == name for i in self.inputs)

    def node_case(self, node: GraphNode, data_seed: int = 0, distribution: str = "uniform") -> OpCase:
        return OpCase(node.op, tuple(self.spec_of(s) for s in node.srcs), node.params, node.dst, node.form,
                      data_seed, distribution)

    def span_label(self, span: tuple[str, ...]) -> str:
        return "→".join(self.node(n).label for n in span)

    def spans_into(self, output: str) -> list[tuple[str, ...]]:
        """The fusable spans that end in (or contain) ``output``."""
        return [s for s in self.spans if output in s]


@dataclass(frozen=True)
class Pattern:
    """One registered pattern: its params (with meaning and type) and how it expands."""

    name: str
    params: dict[str, Param]
    expand: Callable[[CaseParams], Graph]
    signatures: tuple[str, ...]  # values of the ``type`` param: one test per pattern × signature
    notes: str = ""
    fused_by: str = ""  # which backends fuse it (graph-and-fusion.md §1.2), for the docs and report



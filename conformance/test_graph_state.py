"""State between graphs: sequences of ROPE graphs in one device process.

A backend that keeps state in its context (ggml-cann's ROPE sin/cos cache, its ACL graph cache keyed
on tensor addresses) can answer a graph with what it computed for the one before. Each example draws
a ``rope_seq`` graph and 1..6 graphs after it, each differing from the one before only in its data,
``freq_scale``, ``ext_factor``, its positions or the input's strides (or not at all), and runs them in
order on a freshly opened device: same shapes throughout, so a cache keyed on shapes or addresses hits.

A failing graph is confirmed by rerunning it alone in a fresh device process; its record's
``extra.state`` holds the sequence and ``confirmation``: ``reproduces alone`` (a plain bug of that
graph) or ``only after the sequence`` (state left by the earlier graphs). The failure heads with the
graph, then the sequence and a ``conform repro --sequence`` line. Two ROPE nodes in one graph
(``rope_pair``) are drawn by ``test_graph`` like every pattern.

``test_graph_block_sequence`` does the same for the model blocks (``llama_layer``, ``moe_ffn``): a block,
then 1..2 graphs of it with new weights of the same shapes (and, half the time, another token count), as
llama.cpp computes graph after graph in one backend and a new model of one architecture brings new
weights of the same shapes: a weight cache keyed on a tensor's name or address that is not invalidated
gives the later graphs the first one's weights.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.graph_strategies import BLOCK_PATTERNS, block_sequence, state_sequence
from conformance.graphs import MESSAGE_LIMIT, evaluate_graph_case
from conformance.harness import CaseFailed, Harness
from conformance.test_stateful import SequenceFailed, sequence_message
from golden.graphs.case import GraphCase
from results.record import CaseRecord

ALONE, AFTER = "reproduces alone", "only after the sequence"


def confirm_alone(harness: Harness, case: GraphCase) -> CaseRecord:
    """``case`` rerun in a fresh device process (its record is not written: it is evidence)."""
    fresh = Harness(harness.device_spec, harness.options, timeout=harness.timeout, keep_artefacts=False)
    try:
        return evaluate_graph_case(fresh, case)
    finally:
        fresh.close()


def annotate_step(harness: Harness, case: GraphCase, sequence: tuple[str, ...], record: CaseRecord) -> None:
    """Mark a sequence step's record; a failing step after others is confirmed in a fresh process."""
    state: dict[str, Any] = {"step": len(sequence), "of_sequence": list(sequence)}
    if record.failing and len(sequence) > 1:
        alone = confirm_alone(harness, case)
        state["confirmation"] = ALONE if alone.failing else AFTER
        state["alone_outcome"] = alone.outcome.value
        record.message = (f"{state['confirmation']} (rerun alone in a fresh process: {alone.outcome.value}; "
                          f"graph {len(sequence)} of a sequence in one device process, extra.state): "
                          f"{record.message}")[:MESSAGE_LIMIT]
    record.extra = (record.extra or {}) | {"state": state}


def run_state_sequence(harness: Harness, cases: list[GraphCase]) -> None:
    """Run ``cases`` in order on a freshly opened device; the first failure raises SequenceFailed."""
    __tracebackhide__ = True
    harness.reopen_device()
    ids: list[str] = []
    for case in cases:
        ids.append(case.case_id)
        sequence = tuple(ids)

        def evaluate(case: GraphCase = case, sequence: tuple[str, ...] = sequence) -> CaseRecord:
            return evaluate_graph_case(harness, case, lambda r: annotate_step(harness, case, sequence, r))

        try:
            harness.check_evaluated(case.case_id, evaluate)
        except CaseFailed as exc:
            raise SequenceFailed(sequence_message(str(exc), ids, harness), sequence) from None


@given(data=st.data())
def test_graph_state_sequence(conform: Any, data: st.DataObject) -> None:
    """Consecutive graphs that differ only in data, freq_scale, ext_factor, positions or strides must
    each get their own result."""
    run_state_sequence(conform, data.draw(state_sequence(), label="graph sequence"))


@pytest.mark.parametrize("pattern", BLOCK_PATTERNS)
@given(data=st.data())
def test_graph_block_sequence(conform: Any, pattern: str, data: st.DataObject) -> None:
    """Consecutive graphs of one block with new weights of the same shapes must each get their own result."""
    run_state_sequence(conform, data.draw(block_sequence(pattern), label="block sequence"))

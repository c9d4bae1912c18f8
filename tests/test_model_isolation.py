"""``conform model`` runs the model in a child process: a device that aborts mid-graph is reported as a crash
at the node it was computing (from the progress the child wrote), never as a result; a DeviceError in the
child is the one-line bad-input message."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import TextIO

import pytest

from conformance.cli.model import PARTIAL_RESULT, Crash, ModelUsageError, run_isolated
from device.base import DeviceError


def _aborts_in_a_node(progress: TextIO, index: int) -> object:
    progress.write("stage\tcapture run on CANN0 (every node observed)\n")
    for i in range(index + 1):
        progress.write(f"node\t{i}\t0\tMUL_MAT\tffn_up-{i}\n")
        progress.flush()
    os.abort()


def _aborts_in_a_decode(progress: TextIO, then_a_node: bool) -> object:
    """Two steps observed, then step 2's llama_decode (after a context shift's edits) dies before any node of
    it begins, or (``then_a_node``) in its first node."""
    progress.write("stage\tcapture run on CPU (every node observed)\n")
    for step in range(2):
        progress.write(f"decode\t{step}\t1\t\n")
        progress.write(f"node\t{step}\t{step}\tMUL_MAT\tresult_output\n")
    progress.write("decode\t2\t1\tseq_rm(seq 0, pos [1, 4)); seq_add(seq 0, pos [4, 8), -3)\n")
    if then_a_node:
        progress.write("node\t2\t2\tROPE\tcache_k_l0 (view) (view)\n")
    progress.flush()
    os.abort()


def _dies_in_the_fused_run(progress: TextIO, folder: str) -> object:
    """The nodes judged and kept (as _check_in_child keeps them), then the fused run dies in its first decode."""
    progress.write("stage\tcapture run on Vulkan0 (every node observed)\n")
    progress.write("decode\t0\t6\t\nnode\t0\t0\tMUL_MAT\tffn_up-0\n")
    (Path(folder) / PARTIAL_RESULT).write_bytes(pickle.dumps({"nodes": ["judged"]}))
    progress.write("stage\tfused run on Vulkan0 (no callback)\ndecode\t0\t6\t\n")
    progress.flush()
    os.abort()


def _refuses(progress: TextIO) -> object:
    raise DeviceError("libllama.so: struct layout mismatch: n_threads moved")


def _answers(progress: TextIO, value: int) -> object:
    return {"value": value}


def test_a_crash_is_named_by_the_node_it_happened_in(tmp_path: Path) -> None:
    outcome = run_isolated(_aborts_in_a_node, (7,), tmp_path)
    assert isinstance(outcome, Crash)
    assert outcome.verdict == "CRASH at node 7 (ffn_up-7, MUL_MAT, step 0)"
    assert "signal 6" in outcome.detail and "capture run on CANN0" in outcome.detail


def test_a_crash_inside_llama_decode_is_named_by_its_step_and_its_kv_edits(tmp_path: Path) -> None:
    """Before, this read ``CRASH at node 1 (result_output, MUL_MAT, step 1)``: a node of the step before, which
    had completed (libllama 0.25.1 dies so building the K shift for a q8_0 K cache)."""
    outcome = run_isolated(_aborts_in_a_decode, (False,), tmp_path)
    assert isinstance(outcome, Crash)
    assert outcome.verdict == "CRASH in llama_decode of step 2, before its first node (a context shift)"
    assert ("in llama_decode of step 2 (1 token(s)) before any node of it ran, after the KV-cache edits "
            "seq_rm(seq 0, pos [1, 4)); seq_add(seq 0, pos [4, 8), -3)") in outcome.detail
    in_a_node = run_isolated(_aborts_in_a_decode, (True,), tmp_path)
    assert isinstance(in_a_node, Crash)
    assert in_a_node.verdict == "CRASH at node 2 (cache_k_l0 (view) (view), ROPE, step 2)"


def test_node_verdicts_judged_before_a_crash_in_the_fused_run_come_back_with_it(tmp_path: Path) -> None:
    """b8121's Vulkan0 shifts a q8_0 K cache node by node but corrupts its heap in the fused run: the node
    verdicts were lost with the process; now they come back beside the crash."""
    outcome = run_isolated(_dies_in_the_fused_run, (str(tmp_path),), tmp_path)
    assert isinstance(outcome, Crash) and outcome.partial == {"nodes": ["judged"]}
    assert outcome.verdict == "CRASH in llama_decode of step 0, before its first node"
    assert "during the fused run on Vulkan0 (no callback)" in outcome.detail
    assert json.dumps(outcome.record()) and not (tmp_path / PARTIAL_RESULT).exists()
    # a crash before the nodes were judged has none
    assert isinstance(crash := run_isolated(_aborts_in_a_node, (3,), tmp_path), Crash) and crash.partial is None


def test_a_device_error_in_the_child_is_bad_input_and_an_answer_comes_back(tmp_path: Path) -> None:
    with pytest.raises(ModelUsageError, match="struct layout mismatch"):
        run_isolated(_refuses, (), tmp_path)
    assert run_isolated(_answers, (41,), tmp_path) == {"value": 41}

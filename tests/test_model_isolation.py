"""``conform model`` runs the model in a child process: a device that aborts mid-graph is reported as a crash
at the node it was computing (from the progress the child wrote), never as a result; a DeviceError in the
child is the one-line bad-input message."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TextIO

import pytest

from conformance.cli.model import Crash, ModelUsageError, run_isolated
from device.base import DeviceError


def _aborts_in_a_node(progress: TextIO, index: int) -> object:
    progress.write("stage\tcapture run on CANN0 (every node observed)\n")
    for i in range(index + 1):
        progress.write(f"node\t{i}\t0\tMUL_MAT\tffn_up-{i}\n")
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


def test_a_device_error_in_the_child_is_bad_input_and_an_answer_comes_back(tmp_path: Path) -> None:
    with pytest.raises(ModelUsageError, match="struct layout mismatch"):
        run_isolated(_refuses, (), tmp_path)
    assert run_isolated(_answers, (41,), tmp_path) == {"value": 41}

"""What ``conform model`` shows while it runs: the model process's progress lines, live on stderr.

The model runs in a spawned child (``conformance/cli/model.py``, ``run_isolated``) that writes a line per
stage and per node to ``RUN/progress.log`` (what a crash report names) and sends each line to the parent
over a pipe as it writes it. The parent shows them: on a terminal a tqdm bar (stage, nodes, step,
nodes/s); elsewhere (a CI log, a pipe) plain lines, one per stage and per decode step of the capture, so a
log shows the run moving without a line per node. The nodes are judged and replayed by the golden as they
are captured (``conformance/model.py``), so the capture's count is the judging's too.
"""

from __future__ import annotations

import os
import sys
from multiprocessing.connection import Connection
from typing import Any, TextIO

COUNTED_STAGES = ("capture",)  # the stages whose nodes the child reports one by one
FALLBACK_COLUMNS = 100  # the bar's width on a terminal that reports none


class ProgressTee:
    """The child's progress stream: each line goes to the progress file and, as it is written, to the parent."""

    def __init__(self, file: TextIO, conn: Connection | None) -> None:
        self.file = file
        self.conn = conn
        self._pending = ""

    def write(self, text: str) -> int:
        self.file.write(text)
        if self.conn is not None:
            self._pending += text
            *lines, self._pending = self._pending.split("\n")
            for line in lines:
                try:
                    self.conn.send_bytes(line.encode())
                except OSError:  # the parent went away: the file still has every line
                    self.conn = None
                    break
        return len(text)

    def flush(self) -> None:
        self.file.flush()


def _width(stream: TextIO) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 0


def _short(stage: str) -> str:
    """A stage's name for the bar: its text before any parenthesis."""
    return stage.split(" (", 1)[0]


class ProgressDisplay:
    """Shows the child's progress lines on ``stream``: a bar on a terminal, plain lines elsewhere."""

    def __init__(self, stream: TextIO | None = None, tty: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.bar: Any = None
        self.stage = ""
        self.step = -1
        self.nodes = 0

    def line(self, text: str) -> None:
        kind, _, rest = text.partition("\t")
        if kind == "stage":
            self._stage(rest)
        elif kind == "node":
            index, step = rest.split("\t", 2)[:2]
            self._node(int(index), int(step))

    def close(self) -> None:
        self._end_stage()

    def _end_stage(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif not self.tty and self.stage.startswith("capture") and self.nodes:
            self._plain(f"captured {self.nodes} nodes in {self.step + 1} step(s)")

    def _plain(self, text: str) -> None:
        print(f"progress: {text}", file=self.stream, flush=True)  # not "conform model:": that is the error line

    def _stage(self, text: str) -> None:
        self._end_stage()
        self.stage, self.step, self.nodes = text, -1, 0
        if self.tty:
            from tqdm import tqdm

            # a terminal that reports no width (a bare pty) would get a zero-width bar: give it one
            sized = _width(self.stream) > 0
            counted = text.startswith(COUNTED_STAGES)  # the others run the graph whole: no node to count
            self.bar = tqdm(desc=_short(text), unit="node", file=self.stream, dynamic_ncols=sized,
                            ncols=None if sized else FALLBACK_COLUMNS, leave=True,
                            bar_format=None if counted else "{desc}")
        else:
            self._plain(f"stage: {text}")

    def _node(self, index: int, step: int) -> None:
        self.nodes = index + 1
        if step != self.step:
            self.step = step
            if not self.tty:
                self._plain(f"capture: step {step}, node {index}")
        if self.bar is not None:
            self.bar.set_postfix_str(f"step {step}", refresh=False)
            self.bar.update(self.nodes - self.bar.n)

"""The results file: JSON Lines, versioned, written as cases are measured.

Line 1 is a ``header`` record, then one ``case`` record per case, then (when the run ended
normally) a ``footer`` record. A file without a footer is a partial run (killed or still going);
every complete line is still a valid record because each is written whole and flushed.

See ``results/RESULTS.md`` for every field.
"""

from __future__ import annotations

import json
import math
import os
import threading
from typing import Any, TextIO

from results.outcome import Outcome

SCHEMA = "ggml-cann-conformance/results"
SCHEMA_VERSION = 1

OUTCOMES: tuple[str, ...] = tuple(outcome.value for outcome in Outcome)


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: write them as strings so every line stays strict JSON."""
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return _clean(value.item())
    return value


def dumps_record(record: dict[str, Any]) -> str:
    try:  # most records hold only JSON's own types: no need to walk them first
        return json.dumps(record, separators=(",", ":"), allow_nan=False)
    except (ValueError, TypeError):  # NaN/inf, numpy scalars
        return json.dumps(_clean(record), separators=(",", ":"), allow_nan=False)


class ResultsWriter:
    """Appends whole, flushed lines to a results file; safe to share between threads.

    Several processes (xdist workers) may append to the same file: each line is written with a
    single ``os.write`` on an ``O_APPEND`` descriptor, which the kernel keeps whole.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, record: dict[str, Any]) -> None:
        line = (dumps_record(record) + "\n").encode()
        with self._lock:
            os.write(self._fd, line)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_lines(stream: TextIO, records: list[dict[str, Any]]) -> None:
    for record in records:
        stream.write(dumps_record(record) + "\n")

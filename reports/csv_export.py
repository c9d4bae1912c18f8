"""Support matrix as llama.cpp's ``test-backend-ops support --output csv``.

The file can go into llama.cpp's ``docs/ops/`` where ``scripts/create_ops_docs.py`` turns it into
``docs/ops.md``. That script reads rows with ``csv.DictReader``, keeps ``test_mode == "support"``,
takes ``error_message`` "yes"/"no" as the support answer and groups by ``backend_reg_name``.
test-backend-ops writes one row per case and backend, every field double-quoted, with
``supported`` as "1"/"0" and ``error_message`` the same answer as "yes"/"no".
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from reports.analysis import DeviceColumn, device_columns, op_params_text
from results.load import ResultsFile, load_many
from results.outcome import Outcome

CSV_FIELDS = (
    "backend_name", "op_name", "op_params", "test_mode", "supported", "error_message", "backend_reg_name",
)


def _supported(case: dict[str, Any]) -> bool:
    """The backend's own answer; where it could not say (null), whether the case actually ran."""
    claimed = case.get("supported")
    if isinstance(claimed, bool):
        return claimed
    return case["outcome"] != Outcome.UNSUPPORTED


def support_rows(files: Iterable[ResultsFile]) -> list[tuple[str, ...]]:
    """One row per (device, case id), first record wins, in results order."""
    files = list(files)
    inventory_by_spec: dict[str, DeviceColumn] = {}
    for column in device_columns(files):
        inventory_by_spec.setdefault(column.spec, column)
    rows: list[tuple[str, ...]] = []
    seen: set[tuple[str, str]] = set()
    for results in files:
        for case in results.cases:
            key = (case["device"], case["case_id"])
            if key in seen:
                continue
            seen.add(key)
            column = inventory_by_spec.get(case["device"]) or DeviceColumn(
                key=case["device"], spec=case["device"], host="?", inventory={}
            )
            supported = _supported(case)
            rows.append((
                column.name,
                case["op"],
                op_params_text(case["case_id"]),
                "support",
                "1" if supported else "0",
                "yes" if supported else "no",
                column.backend_reg_name,
            ))
    return rows


def format_support_csv(rows: Iterable[Sequence[str]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    writer.writerows(rows)
    return buffer.getvalue()


def write_support_csv(results: Sequence[ResultsFile | str | os.PathLike[str]],
                      out_csv: str | os.PathLike[str]) -> int:
    """Write the support CSV for parsed results or results paths; returns the number of rows."""
    files = [item for item in results if isinstance(item, ResultsFile)]
    paths = [item for item in results if not isinstance(item, ResultsFile)]
    files += load_many(paths)
    rows = support_rows(files)
    Path(out_csv).write_text(format_support_csv(rows), encoding="utf-8")
    return len(rows)

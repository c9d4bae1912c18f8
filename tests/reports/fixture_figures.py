"""The figures a report shows for a results file, as plain JSON: what must not change when the
results format's code moves (tests/reports/test_old_results.py)."""

from __future__ import annotations

from typing import Any

from reports.analysis import ReportData


def report_figures(data: ReportData) -> dict[str, Any]:
    return {
        "total_cases": data.total_cases,
        "is_green": data.is_green,
        "is_partial": data.is_partial,
        "unexpected_failures": data.unexpected_failures,
        "known_failures": data.known_failures,
        "devices": {
            key: {"total": s.total, "ran": s.ran, "failing": s.failing, "known": s.known,
                  "unexpected": s.unexpected_failures, "counts": dict(sorted(s.counts.items()))}
            for key, s in sorted(data.device_summaries.items())
        },
        "ops": {name: op.cases for name, op in sorted(data.ops.items())},
        "cells": dict(sorted(data.cell_kind_counts().items())),
        "known_bugs": sorted((bug.cause.id, bug.failures, bug.passing, bug.declined) for bug in data.known_bugs),
        "clusters": sorted((c.key.op, c.key.column, c.key.kind.value, c.count) for c in data.clusters),
    }

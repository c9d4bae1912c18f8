"""A typed reading of a loaded ``case`` line, for readers that aggregate many of them (``reports/``).

:class:`CaseView` reads the fields a report counts by, once per record, into typed attributes; a
field of the wrong type reads as absent, as the dict lookups it replaces did, so files written by
any earlier writer read the same. ``raw`` keeps the line as loaded for what shows it whole (the HTML
report's case details, baselines, expectations). Unlike :class:`results.record.CaseRecord` it needs
none of the optional parts and costs one small object per record (benchmarks/bench_report.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from results.load import as_float
from results.outcome import Outcome

_OUTCOMES: dict[str, Outcome] = {outcome.value: outcome for outcome in Outcome}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(slots=True)
class CaseView:
    raw: dict[str, Any]
    case_id: str
    device: str
    op: str
    outcome: Outcome
    dtypes: dict[str, Any] | None
    duration_s: float
    supported: bool | None
    test_id: str | None
    expected_id: str | None  # the known bug the record carries ("expected"), if any
    deviation_judged: bool  # judged by the known bug's own bound (extra.known_deviation_error_ratio)
    error_ratio: float | None  # metrics.error_ratio (NaN and inf as the writer stores them)
    companion_of: str | None
    decided_by: str | None  # "catalogue:OP[key]" or "deviation:<bug id>"; None in files written before it

    @classmethod
    def of(cls, raw: dict[str, Any]) -> CaseView:
        """The view of a line ``results.load`` accepted (it checked case_id, device, op and outcome)."""
        expected = raw.get("expected")
        expected_id = expected.get("id") if isinstance(expected, dict) else None
        extra = raw.get("extra")
        metrics = raw.get("metrics")
        supported = raw.get("supported")
        dtypes = raw.get("dtypes")
        return cls(
            raw, raw["case_id"], raw["device"], raw["op"], _OUTCOMES[raw["outcome"]],
            dtypes if isinstance(dtypes, dict) else None,
            _number(raw.get("duration_s")) or 0.0,
            supported if isinstance(supported, bool) else None,
            _text(raw.get("test_id")),
            expected_id if isinstance(expected_id, str) and expected_id else None,
            isinstance(extra, dict) and "known_deviation_error_ratio" in extra,
            as_float(metrics.get("error_ratio")) if isinstance(metrics, dict) else None,
            _text(raw.get("companion_of")) or None,
            _text(raw.get("decided_by")),
        )

    @property
    def failing(self) -> bool:
        return self.outcome.failing

    @property
    def tolerance_row(self) -> str | None:
        """The catalogue's tolerance row that decided the verdict ("GELU[f16]"), if the record says."""
        if self.decided_by is not None and self.decided_by.startswith("catalogue:"):
            return self.decided_by[len("catalogue:"):]
        return None

"""The one judge of a case's output, for every tier (op cases, graph nodes, model nodes, triage's variants).

Given the case's :class:`~conformance.resolution.Resolution` (its tolerance row and the device's covering
known bugs, looked up once by the caller), :func:`judge_output` picks the verdict by one rule:

* the op's own comparator where the suite registers one (ARGSORT's permutation check, CLAMP's undefined
  choices, SET_ROWS' duplicate indices), handed the row it judges with;
* else a quantized destination's block verdict (``conformance.verdict.quant``);
* else the element-wise verdict with the row (and its aggregate criterion, where the row has one), integer
  destinations kept as integers;
* where that fails and a documented deviation of the device covers the case, the same dispatch again with the
  deviation's own bound: the case is known while it stays within it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from conformance.resolution import Resolution
from conformance.verdict import Metrics, compare
from golden import dtypes
from golden.case import OpCase
from golden.tolerance import MEMO, Tolerance


@dataclass
class Judgement:
    """The verdict on one output: against the resolution's row, and against the covering documented deviation's
    bound where the row failed (None where none covers the case, or the row passed)."""

    metrics: Metrics
    decided_by: str  # "catalogue:OP[key]" or "deviation:<known bug id>" (Resolution.decided_by)
    deviation: Metrics | None = None

    @property
    def within_deviation(self) -> bool | None:
        """True: failed the row, within the deviation's bound; False: beyond both; None: no retry was made."""
        return None if self.deviation is None else self.deviation.passed

    @property
    def deviation_held(self) -> bool:
        """Whether a covering deviation may still explain a failure (Resolution.explaining's ``deviation_held``)."""
        return self.within_deviation is not False

    @property
    def acceptable(self) -> bool:
        """Within the row, or within the device's documented deviation (a graph node judged on its own inputs)."""
        return self.metrics.passed or self.within_deviation is True

    @property
    def deciding(self) -> Metrics:
        """The metrics of the bound that decided: the deviation's where the case is within it, else the row's."""
        return self.deviation if self.deviation is not None and self.deviation.passed else self.metrics


def judge_output(case: OpCase, resolution: Resolution, inputs: list[np.ndarray], exact_inputs: list[np.ndarray],
                 golden: np.ndarray, output: np.ndarray) -> Judgement:
    """Judge ``output`` (the device's answer to ``case``) against ``golden``. ``inputs`` are the tensors as
    stored (quantized ones as raw blocks), ``exact_inputs`` their float64 values (the golden's inputs)."""
    with MEMO.scope():  # the error models of both rows share what they derive from the inputs (|a|, Σ|a||b|)
        metrics = _judged(case, resolution, resolution.tolerance, inputs, exact_inputs, golden, output)
        deviation = None
        if not metrics.passed and resolution.deviation is not None:
            deviation = _judged(case, resolution, resolution.deviation, inputs, exact_inputs, golden, output)
    return Judgement(metrics, resolution.decided_by(deviation is not None and deviation.passed), deviation)


def _judged(case: OpCase, resolution: Resolution, row: Tolerance, inputs: list[np.ndarray],
            exact_inputs: list[np.ndarray], golden: np.ndarray, output: np.ndarray) -> Metrics:
    own = resolution.entry.judge
    if own is not None:  # quantized destinations included (SET_ROWS into a Q8_0 cache)
        judged = own(case, exact_inputs, golden, output, row)
        if not isinstance(judged, Metrics):  # a harness error: the comparator broke its contract
            raise TypeError(f"the {case.op} comparator returned {type(judged).__name__}, not Metrics")
        return judged
    if dtypes.is_quantized(case.dst):
        from conformance.verdict.quant import judge_quantized

        return judge_quantized(case, inputs, golden, output)
    out = output if case.dst in dtypes.INDEX_TYPES else np.asarray(output, dtype=np.float64)
    return compare(case, exact_inputs, golden, out, row)

"""Judging one device output against the exact golden value with the op's tolerance row.

Several metrics, because one number hides things: the worst element relative to what its
tolerance allows (``error_ratio``; ≤ 1 passes), max abs/rel error, error in ULPs of the
destination, NMSE (comparable with ggml's test-backend-ops), and the NaN/±inf pattern.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from golden import dtypes
from golden.case import OpCase
from golden.tolerance import TYPICAL_FACTOR, Tolerance


@dataclass
class Metrics:
    n: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    max_ulp: float = 0.0
    nmse: float = 0.0
    nonfinite_mismatch: int = 0
    n_bad: int = 0
    worst_index: list[int] | None = None
    error_ratio: float = 0.0
    # the aggregate criterion (rows with ``typical``): RMS error / what it allows; None where not applied
    aggregate_ratio: float | None = None
    criterion: str = "element"  # which criterion decided: the one nearer its limit (or past it)
    worst_device: float | None = None
    worst_golden: float | None = None
    n_quants_differ: int | None = None  # quantized destinations: quants unlike ggml's own quantizer
    passed: bool = True
    detail: str = ""

    def as_dict(self) -> dict[str, object]:
        # a flat copy (dataclasses.asdict deep-copies, at a cost per case); worst_index is copied
        out: dict[str, object] = {k: getattr(self, k) for k in _METRIC_FIELDS}
        if self.worst_index is not None:
            out["worst_index"] = list(self.worst_index)
        if self.n_quants_differ is None:
            del out["n_quants_differ"]
        if self.aggregate_ratio is None:
            del out["aggregate_ratio"]
        return out


_METRIC_FIELDS = tuple(f.name for f in fields(Metrics) if f.name != "passed")


def _ggml_index(np_index: tuple[int, ...]) -> list[int]:
    return [int(i) for i in reversed(np_index)]


# Below half the largest finite value nothing rounds to ±inf in any float destination (f16's
# largest is 65504): only elements above it need the rounding to tell.
_OVERFLOW_FLOOR = {"f16": 32768.0, "f32": 2.0**127, "bf16": 2.0**127}


def compare(
    case: OpCase, inputs: list[np.ndarray], golden: np.ndarray, device: np.ndarray, tol: Tolerance
) -> Metrics:
    """Elementwise verdict for a float (or int) destination; golden is the exact float64 value.

    One pass per quantity over the arrays, and none over the NaN/±inf pattern when both sides are
    finite everywhere (the usual case)."""
    g = np.asarray(golden, dtype=np.float64)
    d = np.asarray(device, dtype=np.float64)
    m = Metrics(n=int(g.size))
    if g.shape != d.shape:
        if g.size == d.size:
            d = d.reshape(g.shape)
        else:
            m.passed = False
            m.error_ratio = float("inf")
            m.detail = f"shape mismatch: device {d.shape} vs golden {g.shape} (numpy order)"
            return m
    if g.size == 0:
        return m
    float_dst = case.dst in dtypes.FLOAT_TYPES
    if float_dst:
        # an exact value beyond the destination's range is ±inf once stored, as IEEE rounding gives
        with np.errstate(invalid="ignore"):
            big = np.abs(g) >= _OVERFLOW_FLOOR.get(case.dst, 0.0)
        if big.any():
            with np.errstate(invalid="ignore"):
                g = np.where(np.isinf(dtypes.round_to(g, case.dst)) & np.isfinite(g), np.sign(g) * np.inf, g)
    g_finite, d_finite = np.isfinite(g), np.isfinite(d)
    all_finite = bool(g_finite.all()) and bool(d_finite.all())
    if all_finite:
        finite = None
        bad_pattern = None
        err = np.abs(d - g)
    else:
        g_nan, d_nan = np.isnan(g), np.isnan(d)
        g_inf, d_inf = ~g_finite & ~g_nan, ~d_finite & ~d_nan
        # ±inf must match in sign; NaN must match NaN
        bad_pattern = (g_nan != d_nan) | (g_inf != d_inf) | (g_inf & d_inf & (np.sign(g) != np.sign(d)))
        m.nonfinite_mismatch = int(np.count_nonzero(bad_pattern))
        finite = g_finite & d_finite
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.where(finite, np.abs(d - g), 0.0)
    allowed = tol.allowed(case, inputs, g, case.dst)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = err / allowed
    with np.errstate(invalid="ignore"):
        nothing_allowed = ~(allowed > 0)  # zero (or a NaN bound): only an exact match passes there
    if nothing_allowed.any():
        ratio[nothing_allowed & (err == 0)] = 0.0
        ratio[nothing_allowed & (err > 0)] = np.inf
    if bad_pattern is not None:
        assert finite is not None
        ratio[~finite] = 0.0
        ratio[bad_pattern] = np.inf
    del allowed, nothing_allowed  # output-sized: freed before the next ones (model-sized cases)
    m.n_bad = int(np.count_nonzero(ratio > 1.0))
    flat_worst = int(np.argmax(ratio))
    worst = np.unravel_index(flat_worst, g.shape)
    m.worst_index = _ggml_index(tuple(int(i) for i in worst))
    m.error_ratio = float(ratio.flat[flat_worst])
    del ratio
    m.worst_device, m.worst_golden = float(d.flat[flat_worst]), float(g.flat[flat_worst])
    m.max_abs = float(err.max())
    abs_g = np.abs(g)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = err / abs_g
    nonzero = abs_g != 0 if finite is None else finite & (abs_g != 0)
    m.max_rel = float(rel.max(initial=0.0, where=nonzero))
    del abs_g, rel, nonzero
    if float_dst:
        m.max_ulp = float((err / dtypes.ulp(g, case.dst)).max())
    num = float(np.sum(err * err))
    kept = g if finite is None else np.where(finite, g, 0.0)
    denom = float(np.sum(kept * kept))
    m.nmse = num / denom if denom > 0 else num
    if tol.nmse is not None and m.nmse > tol.nmse:
        m.error_ratio = max(m.error_ratio, m.nmse / tol.nmse)
    rms = 0.0
    aggregate = tol.aggregate_allowed(case, inputs, g, case.dst, finite)
    if aggregate is not None:
        rms = float(np.sqrt(num / (m.n if finite is None else max(int(np.count_nonzero(finite)), 1))))
        m.aggregate_ratio = rms / aggregate if aggregate > 0 else (0.0 if rms == 0 else float("inf"))
    element_ratio = m.error_ratio
    if m.aggregate_ratio is not None and m.aggregate_ratio > m.error_ratio:
        # error_ratio is the verdict's ratio (as for an NMSE row); criterion says which check gave it
        m.error_ratio, m.criterion = m.aggregate_ratio, "aggregate"
    aggregate_ok = m.aggregate_ratio is None or m.aggregate_ratio <= 1.0
    m.passed = m.n_bad == 0 and (tol.nmse is None or m.nmse <= tol.nmse) and aggregate_ok
    if not m.passed and m.n_bad == 0 and not aggregate_ok:
        m.detail = (
            f"RMS error over the output {rms:.3g} is {m.aggregate_ratio:.3g}× what rounding allows "
            f"({aggregate:.3g}: {TYPICAL_FACTOR:g}·RMS of the typical rounding error), although every element "
            f"is within its worst-case bound (worst {element_ratio:.3g}× at "
            f"[{','.join(map(str, m.worst_index or []))}]): a systematic error, such as a dropped part of the "
            f"reduction; NMSE {m.nmse:.3g}"
        )
    elif not m.passed:
        where = "[" + ",".join(map(str, m.worst_index)) + "]"
        m.detail = (
            f"out{where}={m.worst_device!r}, but should be {m.worst_golden!r} "
            f"(|Δ|={abs(m.worst_device - m.worst_golden):.3g}, {m.error_ratio:.3g}× the allowed error; "
            f"{m.n_bad}/{m.n} elements out of tolerance, {m.nonfinite_mismatch} NaN/inf mismatches, "
            f"NMSE {m.nmse:.3g})"
        )
    return m


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise-equal logical values (NaN equals NaN): the input-integrity check."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        return bool(np.all((a64 == b64) | (np.isnan(a64) & np.isnan(b64))))
    return bool(np.array_equal(a, b))

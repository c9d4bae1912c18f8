"""Judging one device output against the exact golden value with the op's tolerance row.

Several metrics, because one number hides things: the worst element relative to what its
tolerance allows (``error_ratio``; ≤ 1 passes), max abs/rel error, error in ULPs of the
destination, NMSE (comparable with ggml's test-backend-ops), and the NaN/±inf pattern.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from golden import dtypes
from golden.case import OpCase
from golden.tolerance import Tolerance


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
    worst_device: float | None = None
    worst_golden: float | None = None
    n_quants_differ: int | None = None  # quantized destinations: quants unlike ggml's own quantizer
    passed: bool = True
    detail: str = ""

    def as_dict(self) -> dict[str, object]:
        return {k: v for k, v in asdict(self).items() if k != "passed" and not (k == "n_quants_differ" and v is None)}


def _ggml_index(np_index: tuple[int, ...]) -> list[int]:
    return [int(i) for i in reversed(np_index)]


def compare(
    case: OpCase, inputs: list[np.ndarray], golden: np.ndarray, device: np.ndarray, tol: Tolerance
) -> Metrics:
    """Elementwise verdict for a float (or int) destination; golden is the exact float64 value."""
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
    if case.out_dtype in dtypes.FLOAT_TYPES:
        # an exact value beyond the destination's range is ±inf once stored, as IEEE rounding gives
        with np.errstate(invalid="ignore"):
            g = np.where(np.isinf(dtypes.round_to(g, case.out_dtype)) & np.isfinite(g), np.sign(g) * np.inf, g)
    g_nan, d_nan = np.isnan(g), np.isnan(d)
    g_inf, d_inf = np.isinf(g), np.isinf(d)
    # ±inf must match in sign; NaN must match NaN
    bad_pattern = (g_nan != d_nan) | (g_inf != d_inf) | (g_inf & d_inf & (np.sign(g) != np.sign(d)))
    m.nonfinite_mismatch = int(bad_pattern.sum())
    finite = np.isfinite(g) & np.isfinite(d)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(finite, np.abs(d - g), 0.0)
    allowed = tol.allowed(case, inputs, g, case.out_dtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(finite, np.where(allowed > 0, err / allowed, np.where(err > 0, np.inf, 0.0)), 0.0)
    ratio = np.where(bad_pattern, np.inf, ratio)
    m.n_bad = int((ratio > 1.0).sum())
    flat_worst = int(np.argmax(ratio))
    worst = np.unravel_index(flat_worst, g.shape)
    m.worst_index = _ggml_index(tuple(int(i) for i in worst))
    m.error_ratio = float(ratio[worst])
    m.worst_device, m.worst_golden = float(d[worst]), float(g[worst])
    m.max_abs = float(err.max())
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(finite & (g != 0), err / np.abs(g), 0.0)
    m.max_rel = float(rel.max())
    if case.out_dtype in dtypes.FLOAT_TYPES:
        m.max_ulp = float((err / dtypes.ulp(g, case.out_dtype)).max())
    denom = float(np.sum(np.where(finite, g * g, 0.0)))
    num = float(np.sum(err * err))
    m.nmse = num / denom if denom > 0 else num
    if tol.nmse is not None and m.nmse > tol.nmse:
        m.error_ratio = max(m.error_ratio, m.nmse / tol.nmse)
    m.passed = m.n_bad == 0 and (tol.nmse is None or m.nmse <= tol.nmse)
    if not m.passed:
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

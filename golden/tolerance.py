"""Tolerance rules: how far a device result may sit from the exact golden value, and why.

Each element ``i`` may differ from the exact float64 golden value ``g_i`` by

    allowed_i = atol + rtol·|g_i| + ulp·spacing(dst, g_i) + model(case, inputs, g)_i

``ulp = 0.5`` alone means "correctly rounded to the destination type". ``model`` is an op's error
model (e.g. GELU's F16 table, a dot product growing with K). A case passes when every finite
element is within its allowance, the NaN/±inf pattern matches the golden's, and (if set) the NMSE
is at most ``nmse``. Every rule carries a one-line reason from an error model; numbers without a
reason are not allowed (the catalogue test checks that).

Where the worst case grows with a reduction length n (a dot product, a row sum, attention's keys),
a row also carries ``typical``: per element, the root-sum-square of the worst error of each rounding
on the way (√n·u·Σ|x| where the worst case is n·u·Σ|x|). Roundings of drawn data are independent
with zero mean, so a correct result's error over the output stays near that; a systematic fault
(a dropped tail of the reduction) does not. The aggregate criterion is

    RMS_i(|d_i − g_i|) ≤ TYPICAL_FACTOR · RMS_i(sqrt(typical_i² + base_i²))

over the finite elements, with base_i = atol + rtol·|g_i| + ulp·spacing(g_i), the row's part that does
not grow with n. docs/reduction-error-model.md derives TYPICAL_FACTOR and shows its margins.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from golden.case import OpCase

ErrorModel = Callable[[OpCase, list[np.ndarray], np.ndarray], np.ndarray]

F16_EPS = 2.0**-11  # unit roundoff of IEEE half
F32_EPS = 2.0**-24  # unit roundoff of IEEE single
F32_SUBNORMAL_HALF_STEP = 2.0**-150  # the largest f32 rounding error among subnormal results
# A rounding error uniform within ±e has standard deviation e/√3, so a sum of independent roundings has
# σ ≤ typical/√3; twice typical is ≥ 3.5σ for a one-element output, more for longer ones (the RMS of many
# elements concentrates) and where partial sums stay below their worst (docs/reduction-error-model.md)
TYPICAL_FACTOR = 2.0


class Calibration(StrEnum):
    """Where a row's figures come from: the op's definition alone, or also measurements of ggml's CPU
    (its tables, libm, SIMD paths, nightly margins). The report says so next to a CPU-calibrated row,
    so nobody reads a CPU calibration as a statement about the device under test."""

    DEFINITION = "definition"
    GGML_CPU = "ggml-cpu"


@dataclass(frozen=True)
class Tolerance:
    reason: str
    ulp: float = 0.0
    atol: float = 0.0
    rtol: float = 0.0
    nmse: float | None = None
    model: ErrorModel | None = None
    model_name: str = ""
    typical: ErrorModel | None = None  # the root-sum-square rounding error (aggregate criterion), or None
    typical_name: str = ""
    calibration: Calibration = Calibration.DEFINITION  # GGML_CPU where the reason quotes ggml CPU figures

    def allowed(self, case: OpCase, inputs: list[np.ndarray], golden: np.ndarray, dst_dtype: str) -> np.ndarray:
        from golden.dtypes import ulp as spacing

        g = np.abs(np.where(np.isfinite(golden), golden, 0.0))
        allowed = self.atol + self.rtol * g
        if self.ulp:
            allowed = allowed + self.ulp * spacing(g, dst_dtype)
        if self.model is not None:
            allowed = allowed + self.model(case, inputs, golden)
        return np.broadcast_to(allowed, golden.shape)

    def aggregate_allowed(self, case: OpCase, inputs: list[np.ndarray], golden: np.ndarray, dst_dtype: str,
                          finite: np.ndarray | None) -> float | None:
        """TYPICAL_FACTOR · RMS over the finite elements of sqrt(typical² + base²); None without ``typical``."""
        if self.typical is None:
            return None
        from golden.dtypes import ulp as spacing

        g = np.abs(np.where(np.isfinite(golden), golden, 0.0))
        base = self.atol + self.rtol * g
        if self.ulp:
            base = base + self.ulp * spacing(g, dst_dtype)
        typical = np.broadcast_to(self.typical(case, inputs, golden), golden.shape)
        with np.errstate(invalid="ignore", over="ignore"):
            per_element = typical * typical + base * base
            if finite is not None:
                per_element = per_element[finite]
        if per_element.size == 0:
            return None
        return TYPICAL_FACTOR * float(np.sqrt(np.mean(per_element)))

    def describe(self) -> dict[str, object]:
        d: dict[str, object] = {"reason": self.reason}
        for key in ("ulp", "atol", "rtol"):
            if getattr(self, key):
                d[key] = getattr(self, key)
        if self.nmse is not None:
            d["nmse"] = self.nmse
        if self.model is not None:
            d["model"] = self.model_name or self.model.__name__
        if self.typical is not None:
            d["aggregate"] = f"RMS error ≤ {TYPICAL_FACTOR:g}·RMS({self.typical_name or self.typical.__name__})"
        if self.calibration is not Calibration.DEFINITION:
            d["calibration"] = self.calibration.value
        return d


EXACT = Tolerance("bit-exact: the op moves or selects values without arithmetic")
ROUNDED = Tolerance("one rounding of the exact result to the destination type", ulp=0.5)


def rounded_via_f32(reason: str = "") -> Tolerance:
    """Computed in f32, then rounded once more to a narrower destination (F16/BF16). The f32 rounding
    is u·|g| relative, or up to 2^-150 absolute where the f32 result is subnormal; either can move a
    value onto a tie of the destination, which then rounds away from the exact value."""
    return Tolerance(
        reason or "computed in f32 (≤0.5 ulp_f32, 2^-150 where subnormal), then rounded to the destination "
                  "type (0.5 ulp)",
        ulp=0.5,
        rtol=F32_EPS,
        atol=F32_SUBNORMAL_HALF_STEP,
    )


# --- shared pieces of error models (op-specific models live beside their ops) -------------------


class DerivedMemo:
    """Arrays derived from large arrays, within one verdict (:meth:`scope`), keyed by those arrays' identity.

    An op's error model and its typical (aggregate) model both derive |a| and Σ|a||b| from the same inputs: for a
    model's weight products (a 49152×576 output matrix in float64 is 226 MB) each pass over the weights is what
    judging a node costs. Inside a scope the second model gets the first one's arrays (read-only); an entry goes
    when its key arrays are freed (weakref.finalize: no stale entry under a reused id) and every entry when the
    scope closes, so nothing outlives the verdict. Outside a scope nothing is kept."""

    MIN_SIZE = 1 << 16  # smaller arrays are cheaper to recompute than to track

    def __init__(self) -> None:
        self._values: dict[tuple[str, tuple[int, ...]], np.ndarray] = {}
        self.nonnegative: set[int] = set()  # ids of live memoised |x| (no NaN, no -0.0): np.abs leaves them as they are
        self._depth = 0

    @contextmanager
    def scope(self) -> Iterator[None]:
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if not self._depth:
                self._values.clear()
                self.nonnegative.clear()

    def get(self, tag: str, keys: tuple[np.ndarray, ...]) -> np.ndarray | None:
        return self._values.get((tag, tuple(id(k) for k in keys))) if self._depth else None

    def put(self, tag: str, keys: tuple[np.ndarray, ...], value: np.ndarray, nonnegative: bool = False) -> np.ndarray:
        if not self._depth:
            return value
        key = (tag, tuple(id(k) for k in keys))
        value.flags.writeable = False  # shared by every caller in the scope
        self._values[key] = value
        for k in keys:
            weakref.finalize(k, self._values.pop, key, None)
        if nonnegative:
            self.nonnegative.add(id(value))
            weakref.finalize(value, self.nonnegative.discard, id(value))
        return value

    def worth(self, *arrays: object) -> bool:
        return bool(self._depth) and all(isinstance(a, np.ndarray) and a.size >= self.MIN_SIZE for a in arrays)


MEMO = DerivedMemo()


def finite_abs(x: np.ndarray) -> np.ndarray:
    """|x| with non-finite values as 0: the magnitude an error bound may scale with. For a large float64 array in
    a verdict's :meth:`DerivedMemo.scope` the result is memoised (read-only) while ``x`` lives."""
    if not (MEMO.worth(x) and x.dtype == np.float64):
        x = np.asarray(x, dtype=np.float64)
        return np.abs(np.where(np.isfinite(x), x, 0.0))
    known = MEMO.get("finite_abs", (x,))
    if known is not None:
        return known
    out = np.abs(x)  # the same values as |where(isfinite(x), x, 0)| where x is finite: one pass fewer
    if not math.isfinite(float(out.max())):  # NaN or inf somewhere (the max of |x| propagates NaN)
        out[~np.isfinite(out)] = 0.0
    return MEMO.put("finite_abs", (x,), out, nonnegative=True)

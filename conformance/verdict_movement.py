"""ARGSORT's verdict: the device's indices must form, per row, a permutation of 0..ne0−1 that
puts the row's values in the golden order. Tied values may come in any order (ggml's CPU uses the
unstable std::sort), so the indices themselves are not compared.

Importing this module registers the comparator in ``conformance.verdict.COMPARATORS``.
"""

from __future__ import annotations

import numpy as np

from conformance.verdict import COMPARATORS, Metrics
from golden.case import OpCase


def _ggml_index(flat: int, shape: tuple[int, ...]) -> list[int]:
    return [int(i) for i in reversed(np.unravel_index(flat, shape))]


def judge_argsort(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray, device: np.ndarray) -> Metrics:
    x = np.asarray(inputs[0], dtype=np.float64)
    g = np.asarray(golden, dtype=np.int64)
    d = np.asarray(device, dtype=np.int64)
    m = Metrics(n=int(g.size))
    if d.shape != g.shape:
        m.passed, m.error_ratio = False, float("inf")
        m.detail = f"shape mismatch: device {d.shape} vs golden {g.shape} (numpy order)"
        return m
    if g.size == 0:
        return m
    ne0 = g.shape[-1]
    in_range = (d >= 0) & (d < ne0)
    is_perm = np.all(np.sort(np.where(in_range, d, -1), axis=-1) == np.arange(ne0), axis=-1, keepdims=True)
    want = np.take_along_axis(x, g, axis=-1)
    got = np.take_along_axis(x, np.where(in_range, d, 0), axis=-1)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    bad = ~(in_range & same & is_perm)
    m.n_bad = int(bad.sum())
    m.passed = m.n_bad == 0
    if not m.passed:
        flat = int(np.argmax(bad.ravel()))
        m.worst_index = _ggml_index(flat, g.shape)
        m.error_ratio = float("inf")
        m.worst_device, m.worst_golden = float(d.flat[flat]), float(g.flat[flat])
        rows_not_perm = int((~is_perm).sum())
        where = "[" + ",".join(map(str, m.worst_index)) + "]"
        m.detail = (
            f"out{where}={int(d.flat[flat])} selects value {float(got.flat[flat])!r}, but the sorted row has "
            f"{float(want.flat[flat])!r} there (golden index {int(g.flat[flat])}); {m.n_bad}/{m.n} positions wrong, "
            f"{rows_not_perm} row(s) not a permutation of 0..{ne0 - 1}"
        )
    return m


COMPARATORS["ARGSORT"] = judge_argsort

"""Deliberately wrong devices for the construction ops and the PAD/UPSCALE modes: the golden oracle
with one op computed the way a backend author could plausibly get it wrong. Each is a planted fault
that the ci profile of the selected tests must catch (tests/test_planted_faults.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from device.base import RunResult
from device.golden_device import GoldenDevice
from golden import construction, dtypes, resample
from golden.case import OpCase
from tests.plugins import FaultyDevice, planted


def _with_params(case: OpCase, **changes: Any) -> OpCase:
    return replace(case, params=tuple((k, changes.get(k, v)) for k, v in case.params))


def _computed(case: OpCase, inputs: list[np.ndarray], out: np.ndarray) -> RunResult:
    return RunResult(dtypes.round_to(out, case.dst), [np.array(x) for x in inputs])


# ---- TRI ------------------------------------------------------------------------------------------
_DIAGONAL_FLIPPED = {"lower": "lower_diag", "lower_diag": "lower", "upper": "upper_diag", "upper_diag": "upper"}
_TRIANGLE_FLIPPED = {"lower": "upper", "lower_diag": "upper_diag", "upper": "lower", "upper_diag": "lower_diag"}


def _tri_diagonal_off_by_one(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """The diagonal on the wrong side: a Tril/Triu offset of 0 where −1 was meant (and back)."""
    return golden.run(_with_params(case, tri_type=_DIAGONAL_FLIPPED[case.param("tri_type")]), inputs)


def _tri_rows_for_columns(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """Rows and columns confused (ggml's i0 is the column): every type keeps the other triangle."""
    return golden.run(_with_params(case, tri_type=_TRIANGLE_FLIPPED[case.param("tri_type")]), inputs)


@planted("construction and tri", "TRI keeps the diagonal where it should drop it and back (Tril(0) for Tril(-1))")
def tri_diagonal_off_by_one(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("tri_diagonal_off_by_one", "TRI", _tri_diagonal_off_by_one)


@planted("construction and tri", "TRI with rows and columns swapped: the upper triangle for LOWER")
def tri_rows_for_columns(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("tri_rows_for_columns", "TRI", _tri_rows_for_columns)


# ---- PAD_REFLECT_1D, PAD circular, SET ------------------------------------------------------------
def _pad_reflect_repeats_edge(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """Symmetric padding ([b, a, a, b, c, d, d, c]) where ggml reflects without the edge."""
    widths = [(0, 0)] * 3 + [(case.param("p0"), case.param("p1"))]
    return _computed(case, inputs, np.pad(np.asarray(inputs[0], np.float64), widths, mode="symmetric"))


def _pad_circular_as_zeros(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """The circular flag (op_params[8]) ignored: zeros where the torus wraps."""
    plain = {"circular": "", "pad_ext_circular": "pad_ext"}.get(case.form, case.form)
    return golden.run(replace(case, form=plain), inputs)


def _set_offset_in_elements(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """The view's byte offset taken as an element offset (×4 too far for F32/I32), clamped to fit."""
    es = dtypes.type_size(case.inputs[0].dtype)
    nb = [n // es for n in (es, case.param("nb1"), case.param("nb2"), case.param("nb3"))]
    b_ne = case.inputs[1].ne
    room = case.inputs[0].nelements - (sum((b_ne[d] - 1) * nb[d] for d in range(4)) + 1)
    offset = min(int(case.param("offset")), room)  # in elements now
    out = construction.set_view(np.asarray(inputs[0]), np.asarray(inputs[1]), nb, offset)
    return RunResult(out.astype(np.int32) if case.dst == "i32" else dtypes.round_to(out, case.dst),
                     [np.array(x) for x in inputs])


@planted("construction and pad_reflect", "PAD_REFLECT_1D repeating the edge element (symmetric, not reflect)")
def pad_reflect_repeats_edge(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("pad_reflect_repeats_edge", "PAD_REFLECT_1D", _pad_reflect_repeats_edge)


@planted("resizing and pad", "PAD claimed with its circular flag ignored (zero padding instead of wrapping)")
def pad_circular_as_zeros(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("pad_circular_as_zeros", "PAD", _pad_circular_as_zeros)


@planted("construction and set", "SET taking the byte offset as an element offset")
def set_offset_in_elements(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("set_offset_in_elements", "SET", _set_offset_in_elements)


# ---- UPSCALE --------------------------------------------------------------------------------------
def _bilinear_matrix(n_in: int, n_out: int) -> np.ndarray:
    """Bilinear weights sampling at x = i·in/out: the half-pixel offset forgotten."""
    x = np.arange(n_out) * n_in / n_out
    left = np.clip(np.floor(x).astype(np.int64), 0, n_in - 1)
    right = np.clip(left + 1, 0, n_in - 1)
    frac = np.clip(x - left, 0.0, 1.0)
    w = np.zeros((n_out, n_in))
    np.add.at(w, (np.arange(n_out), left), 1 - frac)
    np.add.at(w, (np.arange(n_out), right), frac)
    return w


def _upscale_no_half_pixel(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    mode = resample.ScaleMode.of(case)
    if mode != resample.ScaleMode("bilinear"):
        return golden.run(case, inputs)
    ne_in, ne_out = case.inputs[0].ne, resample.out_shape(case)
    planes = resample._planes(np.asarray(inputs[0], np.float64), ne_out)
    out = np.einsum("ai,...ij,bj->...ab", _bilinear_matrix(ne_in[1], ne_out[1]), planes,
                    _bilinear_matrix(ne_in[0], ne_out[0]))
    return _computed(case, inputs, out)


def _upscale_antialias_ignored(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """GGML_SCALE_FLAG_ANTIALIAS dropped: plain bilinear sampling, aliasing when downsampling."""
    return golden.run(_with_params(case, antialias=False), inputs)


@planted("upscale", "bilinear UPSCALE without the half-pixel offset (x = i·in/out, not (i + ½)·in/out − ½)")
def upscale_bilinear_no_half_pixel(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("upscale_bilinear_no_half_pixel", "UPSCALE", _upscale_no_half_pixel)


@planted("upscale", "UPSCALE claimed with its antialias flag ignored (plain bilinear when downsampling)")
def upscale_antialias_ignored(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("upscale_antialias_ignored", "UPSCALE", _upscale_antialias_ignored)

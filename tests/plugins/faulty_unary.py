"""Unary and math ops wrong the way a backend author could ship them (issue 13): each stands for a
real kind of bug, and the ci profile of the op's tests must catch it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from device.base import RunResult
from device.golden_device import GoldenDevice
from golden import catalogue, dtypes
from golden.case import OpCase
from tests.plugins import FaultyDevice, planted

F32 = np.float32


def _computed(fn: Callable[[OpCase, list[np.ndarray]], np.ndarray]):
    """A distortion that computes the whole output with ``fn`` (on the inputs' logical values)."""

    def distortion(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        xs = catalogue.golden_inputs(case, inputs)
        with np.errstate(all="ignore"):
            out = np.asarray(fn(case, xs), dtype=np.float64)
        return RunResult(dtypes.round_to(out, case.dst), [np.array(x) for x in inputs])

    return distortion


def _softplus_no_threshold(case: OpCase, xs: list[np.ndarray]) -> np.ndarray:
    """logf(1 + expf(x)) for every x: expf overflows above 88.72 and the result is inf, not x."""
    x = xs[0].astype(F32)
    return np.log(F32(1) + np.exp(x))


def _sgn_copysign(case: OpCase, xs: list[np.ndarray]) -> np.ndarray:
    """``x == 0 ? 0 : copysignf(1, x)``: NaN is not 0, so SGN(NaN) is ±1 where ggml gives 0."""
    x = xs[0]
    return np.where(x == 0, 0.0, np.copysign(1.0, x))


def _elu_alpha_zero(case: OpCase, xs: list[np.ndarray]) -> np.ndarray:
    """α read from op_params, where ggml_elu stores none: α = 0, so the negative side is 0 (a ReLU)."""
    x = xs[0]
    return np.where(x > 0, x, 0.0 * np.expm1(x))


def _log_negative_minus_inf(case: OpCase, xs: list[np.ndarray]) -> np.ndarray:
    """log with x ≤ 0 sent to −inf (one 'x <= 0' guard for both): log(−1) is −inf instead of NaN."""
    x = xs[0]
    return np.where(x <= 0, -np.inf, np.log(np.where(x > 0, x, 1.0)))


def _exp_flush_subnormal(case: OpCase, xs: list[np.ndarray]) -> np.ndarray:
    """expf in flush-to-zero mode: results below FLT_MIN (x < −87.34) come out as 0."""
    y = np.exp(xs[0])
    return np.where(np.abs(y) < 2.0**-126, 0.0, y)


def _sin_short_reduction(case: OpCase, xs: list[np.ndarray]) -> np.ndarray:
    """sinf whose argument reduction subtracts k·π/2 with π/2 as two f32 constants (48 bits, Cody–Waite,
    products kept exact as with FMA) and no Payne–Hanek fallback: right for moderate |x|, digits lost
    for large arguments and those nearest multiples of π/2."""
    x = xs[0]
    c1 = float(F32(np.pi / 2))
    c2 = float(F32(np.pi / 2 - c1))
    k = np.rint(x * (2 / np.pi))
    r = (x - k * c1) - k * c2
    quadrant = np.mod(np.where(np.isfinite(k), k, 0.0), 4.0)
    return np.select([quadrant == 0, quadrant == 1, quadrant == 2], [np.sin(r), np.cos(r), -np.sin(r)],
                     -np.cos(r))


def _sub_swapped(case: OpCase, xs: list[np.ndarray]) -> np.ndarray:
    """b − a: the operands handed to the backend's subtract kernel in the wrong order."""
    return -catalogue.evaluate(case, xs)


def _add1_half_scalar_as_f32(case: OpCase, xs: list[np.ndarray]) -> np.ndarray:
    """An F16/BF16 b read as f32 (as ggml's own f32 path does): its two bytes and two zero bytes make a
    subnormal, so almost nothing is added."""
    a, b = xs
    if case.inputs[1].dtype == "f32":
        return catalogue.evaluate(case, xs)
    bits = dtypes.to_storage(np.asarray(b).reshape(-1)[:1], case.inputs[1].dtype).view(np.uint16)
    wrong_b = np.array([bits[0], 0], dtype=np.uint16).view(np.float32)[0]  # little-endian low half
    return a + float(wrong_b)


@planted("[softplus-", "SOFTPLUS as logf(1 + expf(x)) without ggml's x > 20 threshold: inf for x > 88.72")
def softplus_no_threshold(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("softplus_no_threshold", "SOFTPLUS", _computed(_softplus_no_threshold))


@planted("[sgn-", "SGN through copysignf: SGN(NaN) = ±1 where ggml defines 0")
def sgn_copysign(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("sgn_copysign", "SGN", _computed(_sgn_copysign))


@planted("[elu-", "ELU with α taken from unset op params (α = 0): the negative side is 0")
def elu_alpha_zero(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("elu_alpha_zero", "ELU", _computed(_elu_alpha_zero))


@planted("[log-", "LOG returning −inf for negative inputs instead of NaN")
def log_negative_minus_inf(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("log_negative_minus_inf", "LOG", _computed(_log_negative_minus_inf))


@planted("[exp-", "EXP in flush-to-zero mode: subnormal results become 0")
def exp_flush_subnormal(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("exp_flush_subnormal", "EXP", _computed(_exp_flush_subnormal))


@planted("[sin-", "SIN with a two-constant f32 argument reduction: wrong for large arguments")
def sin_short_reduction(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("sin_short_reduction", "SIN", _computed(_sin_short_reduction))


@planted("[sub-", "SUB with its operands swapped (b − a)")
def sub_swapped(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("sub_swapped", "SUB", _computed(_sub_swapped))


@planted("[add1-", "ADD1 reading an F16/BF16 scalar b as f32")
def add1_half_scalar_as_f32(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("add1_half_scalar_as_f32", "ADD1", _computed(_add1_half_scalar_as_f32))

"""Deliberately wrong devices for CONV_TRANSPOSE_1D, SSM_CONV, GATED_LINEAR_ATTN and SOLVE_TRI: the
golden oracle with one op computed the way a plausible kernel bug would compute it. The ci
profile must catch each (tests/test_planted_faults.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from device.base import RunResult
from device.golden_device import GoldenDevice
from golden import dtypes, ssm
from golden.case import OpCase
from tests.plugins import FaultyDevice, planted


def _output(case: OpCase, inputs: list[np.ndarray], values: np.ndarray) -> RunResult:
    return RunResult(dtypes.round_to(values, case.dst), [np.array(x) for x in inputs])


def _ssm_conv_kernel_reversed(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """The kernel applied flipped (c[r, d_conv − 1 − j] meets column t + j), as a true convolution
    would flip it; ggml's SSM_CONV is a correlation over the stored order."""
    flipped = np.ascontiguousarray(np.asarray(inputs[1])[..., ::-1])
    result = golden.run(case, [inputs[0], flipped])
    return replace(result, inputs_after=[np.array(x) for x in inputs])


def _gla(case: OpCase, inputs: list[np.ndarray], decay: bool, decay_after_output: bool) -> np.ndarray:
    """The recurrence with the gate left out, or applied after the output has read the state."""
    n_seqs = case.inputs[4].ne[1]
    k, v, q, g = (np.asarray(x, np.float64)[0].reshape(n_seqs, -1, *np.shape(x)[2:]) for x in inputs[:4])
    heads, size = k.shape[2], k.shape[3]
    state = np.asarray(inputs[4], np.float64).reshape(n_seqs, heads, size, size)
    scale = float(case.param("scale"))
    outputs = np.empty_like(v)
    for t in range(k.shape[1]):
        gate = g[:, t, :, :, None] if decay else 1.0
        kv = k[:, t, :, :, None] * v[:, t, :, None, :]
        state = state + kv if decay_after_output else state * gate + kv
        outputs[:, t] = np.einsum("nhij,nhi->nhj", state, q[:, t] * scale)
        if decay_after_output:
            state = state * gate
    rows = np.concatenate([outputs.reshape(-1, heads * size), state.reshape(-1, heads * size)])
    return rows[None, None]


def _gla_no_decay(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    return _output(case, inputs, _gla(case, inputs, decay=False, decay_after_output=False))


def _gla_decay_after_output(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    return _output(case, inputs, _gla(case, inputs, decay=True, decay_after_output=True))


def _solve_tri_upper(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """Reads a[j, i] for a[i, j]: the upper triangle, as a kernel with row and column strides swapped."""
    a = np.swapaxes(np.asarray(inputs[0], np.float64), -1, -2)
    return _output(case, inputs, ssm.forward_substitution(a, inputs[1]))


def _solve_tri_unit_diagonal(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """Solves as if the diagonal were 1 (the unitriangular variant, uni = True, taken for the default)."""
    a = np.array(inputs[0], np.float64)
    n = a.shape[-1]
    a[..., np.arange(n), np.arange(n)] = 1.0
    return _output(case, inputs, ssm.forward_substitution(a, inputs[1]))


def _conv_transpose_stride_on_input(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """Gathers output p from input (p − k)·s0 instead of scattering input l to l·s0 + k: the stride
    applied on the input side (identical when s0 = 1)."""
    kernel = np.asarray(inputs[0], np.float64)[0]  # (C_in, C_out, K)
    data = np.asarray(inputs[1], np.float64)[0, 0]  # (C_in, L)
    s0 = case.param("s0")
    n_out = (data.shape[1] - 1) * s0 + kernel.shape[2]
    out = np.zeros((kernel.shape[1], n_out))
    reach = np.arange(-(-data.shape[1] // s0))  # p − k = j reads input j·s0 while that is inside
    for tap in range(kernel.shape[2]):
        out[:, tap + reach] += kernel[:, :, tap].T @ data[:, reach * s0]
    return _output(case, inputs, out.reshape(1, 1, *out.shape))


@planted("ssm_conv", "SSM_CONV applying its kernel reversed (a flipped convolution instead of ggml's correlation)")
def ssm_conv_kernel_reversed(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("ssm_conv_kernel_reversed", "SSM_CONV", _ssm_conv_kernel_reversed)


@planted("gated_linear_attn", "GATED_LINEAR_ATTN without the gate decay on the state")
def gla_no_decay(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("gla_no_decay", "GATED_LINEAR_ATTN", _gla_no_decay)


@planted("gated_linear_attn", "GATED_LINEAR_ATTN applying the gate decay after the output reads the state")
def gla_decay_after_output(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("gla_decay_after_output", "GATED_LINEAR_ATTN", _gla_decay_after_output)


@planted("solve_tri", "SOLVE_TRI reading the upper triangle (row and column strides swapped)")
def solve_tri_upper(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("solve_tri_upper", "SOLVE_TRI", _solve_tri_upper)


@planted("solve_tri", "SOLVE_TRI ignoring the diagonal (solving the unitriangular system)")
def solve_tri_unit_diagonal(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("solve_tri_unit_diagonal", "SOLVE_TRI", _solve_tri_unit_diagonal)


@planted("conv_transpose_1d", "CONV_TRANSPOSE_1D with the stride applied on the input side")
def conv_transpose_stride_on_input(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("conv_transpose_stride_on_input", "CONV_TRANSPOSE_1D", _conv_transpose_stride_on_input)

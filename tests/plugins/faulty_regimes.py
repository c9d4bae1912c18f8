"""Faults wrong only inside one declared regime (``OpSpec.regimes``), two ops per regime
class: rows reduced tile by tile without a carry (past 512 or 1,024 elements), state not carried
from one 64-token chunk to the next, integers compared or copied through f32 (beyond 2^24), grids
with no grid-stride loop (ABS, ADD, DUP; GET_ROWS past 65,535 indices) and partial last tiles
skipped (SOLVE_TRI, MUL_MAT's K, ROPE's head).
Outside its regime each is the golden device exactly, so only a strategy that reaches the regime
catches it (``tests/test_planted_faults.py`` runs the ci profile on each).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from device.base import RunResult
from device.golden_device import GoldenDevice
from golden import catalogue, matmul, ssm
from golden.case import OpCase
from golden.rope import ROPE_HEAD_TILE
from golden.spec import CHUNK_TOKENS, ELEMENT_BLOCK, GRID_BLOCKS, GRID_ROWS
from golden.ssm import SOLVE_TRI_RHS_TILE
from tests.plugins import FaultyDevice, planted


def _exact(case: OpCase, inputs: list[np.ndarray]) -> list[np.ndarray]:
    return catalogue.golden_inputs(case, inputs)


def _output(result: RunResult, values: np.ndarray) -> RunResult:
    return replace(result, output=np.asarray(values).reshape(np.shape(result.output)))


# ---- rows reduced per tile, no carry between tiles --------------------------------------------------
NORM_TILE = 512
SCAN_TILE = 1024


def _rms_norm_per_tile(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """Each 512-element tile of a row normalised by its own mean square: the tiles' partial sums are
    never combined."""
    result = golden.run(case, inputs)
    (x,) = _exact(case, inputs)
    if x.shape[-1] <= NORM_TILE:
        return result
    eps = float(case.param("eps"))
    out = np.empty_like(x)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for lo in range(0, x.shape[-1], NORM_TILE):
            tile = x[..., lo:lo + NORM_TILE]
            out[..., lo:lo + NORM_TILE] = tile / np.sqrt(np.mean(tile * tile, axis=-1, keepdims=True) + eps)
    return _output(result, out)


@planted("rms_norm", "RMS_NORM normalises each 512-element tile by its own sum of squares (no carry between tiles)")
def rms_norm_per_tile(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("rms_norm_per_tile", "RMS_NORM", _rms_norm_per_tile)


def _cumsum_per_tile(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """The prefix sum restarts at every 1,024-element tile: the running total is not carried."""
    result = golden.run(case, inputs)
    (x,) = _exact(case, inputs)
    if x.shape[-1] <= SCAN_TILE:
        return result
    out = np.empty_like(x)
    with np.errstate(invalid="ignore", over="ignore"):
        for lo in range(0, x.shape[-1], SCAN_TILE):
            out[..., lo:lo + SCAN_TILE] = np.cumsum(x[..., lo:lo + SCAN_TILE], axis=-1)
    return _output(result, out)


@planted("cumsum", "CUMSUM scans each 1,024-element tile on its own (the running total is not carried)")
def cumsum_per_tile(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("cumsum_per_tile", "CUMSUM", _cumsum_per_tile)


# ---- state not carried between chunks ---------------------------------------------------------------
def _ssm_conv_chunks_from_zero(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """Tokens processed in chunks of 64, each chunk's window starting from zeros instead of the last
    d_conv − 1 columns of the chunk before (the first chunk gets the given carried columns)."""
    result = golden.run(case, inputs)
    sx, c = _exact(case, inputs)
    d_conv, n_t = c.shape[-1], sx.shape[-1] - c.shape[-1] + 1
    if n_t <= CHUNK_TOKENS or d_conv == 1:
        return result
    out = np.array(ssm.ssm_conv(sx, c))
    for lo in range(CHUNK_TOKENS, n_t, CHUNK_TOKENS):
        window = sx[..., lo:lo + d_conv - 1 + CHUNK_TOKENS].copy()
        window[..., :d_conv - 1] = 0.0
        out[:, :, lo:lo + CHUNK_TOKENS] = ssm.ssm_conv(window, c)
    return _output(result, out)


@planted("ssm_conv", "SSM_CONV restarts each 64-token chunk from a zero window (conv state not carried)")
def ssm_conv_chunks_from_zero(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("ssm_conv_chunks_from_zero", "SSM_CONV", _ssm_conv_chunks_from_zero)


def _gla_chunks_from_initial_state(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """Each sequence in chunks of 64 tokens, every chunk starting again from the sequence's initial
    state rather than the state the chunk before left."""
    xs = _exact(case, inputs)
    n_seqs = case.inputs[4].ne[1]
    if case.inputs[0].ne[2] // n_seqs <= CHUNK_TOKENS:
        return golden.run(case, inputs)
    result = golden.run(case, inputs)
    heads, size = case.inputs[0].ne[1], case.inputs[0].ne[0]
    k, v, q, g = (np.asarray(x, np.float64)[0].reshape(n_seqs, -1, heads, size) for x in xs[:4])
    initial = np.asarray(xs[4], np.float64).reshape(n_seqs, heads, size, size)
    scale = float(case.param("scale"))
    outputs, state = np.empty_like(v), initial
    with np.errstate(invalid="ignore", over="ignore"):
        for t in range(k.shape[1]):
            if t % CHUNK_TOKENS == 0:
                state = initial
            state = state * g[:, t, :, :, None] + k[:, t, :, :, None] * v[:, t, :, None, :]
            outputs[:, t] = np.einsum("nhij,nhi->nhj", state, q[:, t] * scale)
    rows = np.concatenate([outputs.reshape(-1, heads * size), state.reshape(-1, heads * size)])
    return _output(result, rows)


@planted("gated_linear_attn", "GATED_LINEAR_ATTN starts every 64-token chunk from the initial state (the state "
                              "is not carried between chunks)")
def gla_chunks_from_initial_state(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("gla_chunks_from_initial_state", "GATED_LINEAR_ATTN", _gla_chunks_from_initial_state)


# ---- integers through f32 ---------------------------------------------------------------------------
def _count_equal_through_f32(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """Elements compared after a cast to f32: integers that differ beyond 2^24 can compare equal."""
    result = golden.run(case, inputs)
    a, b = (np.asarray(x).astype(np.float32) for x in inputs)
    return _output(result, np.array(np.count_nonzero(a == b), dtype=np.asarray(result.output).dtype))


@planted("count_equal", "COUNT_EQUAL compares through f32 (I32 values past 2^24 that differ compare equal)")
def count_equal_through_f32(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("count_equal_through_f32", "COUNT_EQUAL", _count_equal_through_f32)


def _concat_through_f32(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """An I32 concat that moves values through an f32 register: integers past 2^24 lose low bits."""
    result = golden.run(case, inputs)
    out = np.asarray(result.output)
    if out.dtype != np.int32:
        return result
    with np.errstate(invalid="ignore"):
        moved = out.astype(np.float32).astype(np.float64)
    return _output(result, np.clip(moved, np.iinfo(np.int32).min, np.iinfo(np.int32).max).astype(np.int32))


@planted("concat and i32", "CONCAT moves I32 values through f32 (integers past 2^24 lose their low bits)")
def concat_through_f32(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("concat_through_f32", "CONCAT", _concat_through_f32)


# ---- grid limits: one block per element group, no grid-stride loop ----------------------------------
def _leaves_past_the_grid_unwritten(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """Elements past the first 65,536 (the blocks one grid dimension holds) are never written: the
    output keeps what the buffer held (zeros here)."""
    result = golden.run(case, inputs)
    out = np.array(result.output).reshape(-1)
    if out.size <= GRID_BLOCKS:
        return result
    out[GRID_BLOCKS:] = 0
    return _output(result, out)


@planted("[abs-", "ABS: one block per element, no grid-stride loop: past 65,536 elements nothing is written")
def abs_past_the_grid(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("abs_past_the_grid", "ABS", _leaves_past_the_grid_unwritten)


@planted("[add-", "ADD: one block per element, no grid-stride loop: past 65,536 elements nothing is written")
def add_past_the_grid(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("add_past_the_grid", "ADD", _leaves_past_the_grid_unwritten)


@planted("[dup-", "DUP: one block per element, no grid-stride loop: past 65,536 elements nothing is written")
def dup_past_the_grid(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("dup_past_the_grid", "DUP", _leaves_past_the_grid_unwritten)


def _get_rows_past_the_grid(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """The indices along a grid dimension of 65,535 blocks: rows for indices past it are never
    gathered (zeros)."""
    result = golden.run(case, inputs)
    if case.inputs[1].ne[0] <= 65535:
        return result
    out = np.array(result.output)  # numpy (ne12, ne11, n_rows, ne0)
    out[..., 65535:, :] = 0
    return _output(result, out)


@planted("get_rows", "GET_ROWS launches one block per index along a 65,535-block grid dimension: rows past it "
                     "are never gathered")
def get_rows_past_the_grid(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("get_rows_past_the_grid", "GET_ROWS", _get_rows_past_the_grid)


# ---- partial tiles: the last, partial tile skipped ------------------------------------------------------
def _solve_tri_skips_partial_rhs_tile(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """Right-hand sides solved 32 columns at a time, the loop running k // 32 tiles: with k > 32 and
    k % 32 != 0 the last, partial tile's columns are never written (zeros)."""
    result = golden.run(case, inputs)
    k = case.inputs[1].ne[0]
    if k <= SOLVE_TRI_RHS_TILE or k % SOLVE_TRI_RHS_TILE == 0:
        return result
    out = np.array(result.output)  # numpy (B3, B2, n, k)
    out[..., (k // SOLVE_TRI_RHS_TILE) * SOLVE_TRI_RHS_TILE:] = 0
    return _output(result, out)


@planted("solve_tri", "SOLVE_TRI runs k // 32 right-hand-side tiles: a partial last tile (k > 32, k % 32 != 0) skipped")
def solve_tri_skips_partial_tile(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("solve_tri_skips_partial_tile", "SOLVE_TRI", _solve_tri_skips_partial_rhs_tile)


def _solve_tri_skips_partial_row_tile(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """Rows of the triangle substituted 32 at a time, n // 32 tiles: with n > 32 and n % 32 != 0 the
    last rows' solutions are never written (zeros)."""
    result = golden.run(case, inputs)
    n = case.inputs[0].ne[0]
    if n <= SOLVE_TRI_RHS_TILE or n % SOLVE_TRI_RHS_TILE == 0:
        return result
    out = np.array(result.output)  # numpy (B3, B2, n, k)
    out[..., (n // SOLVE_TRI_RHS_TILE) * SOLVE_TRI_RHS_TILE:, :] = 0
    return _output(result, out)


@planted("solve_tri", "SOLVE_TRI substitutes n // 32 row tiles: a partial last row tile (n > 32, n % 32 != 0) skipped")
def solve_tri_skips_partial_row_tile(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("solve_tri_skips_partial_row_tile", "SOLVE_TRI", _solve_tri_skips_partial_row_tile)


def _mul_mat_skips_partial_k_tile(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """Dot products over K // 256 whole 256-wide tiles: with K > 256 and K % 256 != 0 the last,
    partial tile's terms are never added."""
    result = golden.run(case, inputs)
    k = case.inputs[0].ne[0]
    if k <= matmul.K_TILE or k % matmul.K_TILE == 0:
        return result
    a, b = _exact(case, inputs)
    whole = (k // matmul.K_TILE) * matmul.K_TILE
    return _output(result, matmul.mul_mat(a[..., :whole], b[..., :whole]))


@planted("test_mul_mat and mul_mat-", "MUL_MAT runs K // 256 tiles of the dot product: a partial last K tile "
                                     "(K > 256, K % 256 != 0) is dropped")
def mul_mat_skips_partial_k_tile(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("mul_mat_skips_partial_k_tile", "MUL_MAT", _mul_mat_skips_partial_k_tile)


def _rope_skips_partial_head_tile(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """A row's pairs rotated 512 elements per block, ne0 // 512 blocks: with a head of more than 512
    elements, not a multiple of 512, the last elements are left as they came in."""
    result = golden.run(case, inputs)
    ne0 = case.inputs[0].ne[0]
    if ne0 <= ROPE_HEAD_TILE or ne0 % ROPE_HEAD_TILE == 0:
        return result
    x = _exact(case, inputs)[0]
    out = np.array(result.output, dtype=np.float64)
    whole = (ne0 // ROPE_HEAD_TILE) * ROPE_HEAD_TILE
    out[..., whole:] = x[..., whole:]
    return _output(result, out)


@planted("rope", "ROPE rotates a row 512 elements per block, ne0 // 512 blocks: a partial last block (head > 512, "
                 "head % 512 != 0) is copied unrotated")
def rope_skips_partial_head_tile(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("rope_skips_partial_head_tile", "ROPE", _rope_skips_partial_head_tile)


# ---- rows, weight rows, groups and systems past one grid dimension; partly filled last blocks ----------
def _rows_past_the_grid(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """One block per row along a 65,535-block grid dimension, no second dimension: rows past it are
    never written (zeros here)."""
    result = golden.run(case, inputs)
    rows = np.array(result.output).reshape(-1, case.inputs[0].ne[0])
    if rows.shape[0] <= GRID_ROWS:
        return result
    rows[GRID_ROWS:] = 0
    return _output(result, rows)


@planted("soft_max", "SOFT_MAX gives a block to each row along one 65,535-block grid dimension: rows past it are "
                     "not written")
def soft_max_rows_past_the_grid(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("soft_max_rows_past_the_grid", "SOFT_MAX", _rows_past_the_grid)


def _mul_mat_weight_rows_past_the_grid(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """One block per weight row (output element of a column) along one grid dimension: a vocabulary
    projection's rows past 65,535 are never written."""
    result = golden.run(case, inputs)
    out = np.array(result.output)
    if case.inputs[0].ne[1] <= GRID_ROWS:
        return result
    out[..., GRID_ROWS:] = 0
    return _output(result, out)


@planted("test_mul_mat and mul_mat-", "MUL_MAT gives a block to each weight row along one 65,535-block grid "
                                     "dimension: output rows past it (a vocabulary projection's) are not written")
def mul_mat_weight_rows_past_the_grid(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("mul_mat_weight_rows_past_the_grid", "MUL_MAT", _mul_mat_weight_rows_past_the_grid)


def _group_norm_groups_past_the_grid(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """One block per group along one 65,535-block grid dimension: the channels of later groups keep zeros."""
    result = golden.run(case, inputs)
    groups, channels = case.param("n_groups"), case.inputs[0].ne[2]
    if groups <= GRID_ROWS:
        return result
    per = -(-channels // groups)
    out = np.array(result.output)  # numpy (N, C, H, W)
    out[:, GRID_ROWS * per:] = 0
    return _output(result, out)


@planted("group_norm", "GROUP_NORM gives a block to each group along one 65,535-block grid dimension: groups past "
                       "it are not written")
def group_norm_groups_past_the_grid(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("group_norm_groups_past_the_grid", "GROUP_NORM", _group_norm_groups_past_the_grid)


def _solve_tri_systems_past_the_grid(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """One block per system (dims 2 and 3) along one 65,535-block grid dimension: later systems keep zeros."""
    result = golden.run(case, inputs)
    rhs, n = case.inputs[1].ne[:2]
    systems = np.array(result.output).reshape(-1, n, rhs)
    if systems.shape[0] <= GRID_ROWS:
        return result
    systems[GRID_ROWS:] = 0
    return _output(result, systems)


@planted("solve_tri", "SOLVE_TRI gives a block to each system along one 65,535-block grid dimension: systems past "
                      "it are not solved")
def solve_tri_systems_past_the_grid(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("solve_tri_systems_past_the_grid", "SOLVE_TRI", _solve_tri_systems_past_the_grid)


def _skips_a_partly_filled_last_block(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """Blocks of 256 elements, only full ones launched (n // 256): past one block, a partly filled last
    block is never written (zeros here)."""
    result = golden.run(case, inputs)
    out = np.array(result.output).reshape(-1)
    whole = out.size // ELEMENT_BLOCK * ELEMENT_BLOCK
    if out.size <= ELEMENT_BLOCK or whole == out.size:
        return result
    out[whole:] = 0
    return _output(result, out)


@planted("[silu-", "SILU launches n // 256 blocks of 256 elements: a partly filled last block is not written")
def silu_skips_a_partial_block(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("silu_skips_a_partial_block", "SILU", _skips_a_partly_filled_last_block)


@planted("[mul-", "MUL launches n // 256 blocks of 256 elements: a partly filled last block is not written")
def mul_skips_a_partial_block(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("mul_skips_a_partial_block", "MUL", _skips_a_partly_filled_last_block)

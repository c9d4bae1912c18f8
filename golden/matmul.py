"""MUL_MAT: ``dst[i3, i2] = b[i3, i2] @ a[i3 // r3, i2 // r2].T`` with ggml's blocked broadcast.

Numpy shapes: ``a`` (weights, src0) is (A3, A2, N, K), ``b`` (src1) is (B3, B2, M, K) with
``B2 % A2 == B3 % A3 == 0``; the result is (B3, B2, M, N), i.e. ggml ne ``[a.ne1, b.ne1, b.ne2,
b.ne3]``. The broadcast over dims 2 and 3 is repeat-interleave (a's slice j serves b's slices
j·r .. j·r + r − 1, as grouped-query attention shares KV heads), not the cyclic tiling of ADD.
Products of f32/f16 values are exact in float64 and the K-sum is within K·2^-53 relative.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from golden import dtypes
from golden.case import OpCase
from golden.spec import InputLayouts, OpList, OpSpec, Regime, RegimeKind, grid_regime, partial_tile, sig
from golden.tolerance import F16_EPS, F32_EPS, MEMO, Calibration, ErrorModel, Tolerance, finite_abs

SPECS = OpList()

# How ggml-cuda and ggml-vulkan tile matrix products: K in 32-element blocks and 256-wide shared-memory
# (super-)blocks, output tiles of 64 (or 128) weight rows, and src1 columns past 8 leave the matrix-vector
# kernels for the tiled matrix-matrix ones (whose column tiles are 32 wide or more)
K_BLOCK, K_TILE, ROW_TILE, COL_TILE = 32, 256, 64, 32


def matmul_tiles(k: Callable[[OpCase], int], rows: Callable[[OpCase], int],
                 cols: Callable[[OpCase], int] | None = None) -> tuple[Regime, ...]:
    """A partial last tile along the dot product (``k``: past a 32-block and a 256-tile), the weight rows
    (``rows``) and, where given, the src1 columns (``cols``)."""
    out = (partial_tile("k", k, K_BLOCK), partial_tile("k", k, K_TILE), partial_tile("rows", rows, ROW_TILE))
    return out + ((partial_tile("cols", cols, COL_TILE),) if cols is not None else ())


# the output projection of a model has one weight row per vocabulary entry (32,000-262,144): kernels giving a
# block (workgroup) to a row or a few rows pass one grid dimension's 65,535 blocks there
WEIGHT_ROWS_PAST_GRID = Regime("rows>65535", lambda c: c.inputs[0].ne[1] > 65535,
                               "more weight rows than one grid dimension has blocks (a vocabulary projection)",
                               RegimeKind.GRID)


def broadcast_weights(a: np.ndarray, b_shape: tuple[int, ...]) -> np.ndarray:
    """Repeat a's dims 2 and 3 (numpy axes 1 and 0) blockwise up to b's."""
    a = np.repeat(a, b_shape[0] // a.shape[0], axis=0)
    return np.repeat(a, b_shape[1] // a.shape[1], axis=1)


def mul_mat(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each b slice times its a slice, transposed. The blockwise broadcast is a reshape of b into
    (a's slice, its repeat) pairs, so a is never copied (a copy per b slice is GiBs for a model's
    weights under 32 query heads)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    a3, a2, n, k = a.shape
    b3, b2, m = b.shape[:3]
    pairs = b.reshape(a3, b3 // a3, a2, b2 // a2, m, k)
    with np.errstate(invalid="ignore", over="ignore"):  # float64 GEMM: K·2^-53 relative in any order
        out = np.matmul(pairs, np.swapaxes(a, -1, -2)[:, None, :, None])
    return out.reshape(b3, b2, m, n)


def abs_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``Σ_k |a_k|·|b_k|`` for each output: the scale of a dot product's rounding error. An operand that is a
    memoised :func:`finite_abs` is taken as it is (|x| of it is itself), and for large operands the product is
    memoised while they live (an op's error model and its typical model both ask for Σ|a||b|)."""
    memo = isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and (MEMO.worth(a) or MEMO.worth(b))
    if memo:
        known = MEMO.get("abs_dot", (a, b))
        if known is not None:
            return known
    out = mul_mat(a if id(a) in MEMO.nonnegative else np.abs(a), b if id(b) in MEMO.nonnegative else np.abs(b))
    return MEMO.put("abs_dot", (a, b), out) if memo else out


def dot_product_model(c: float = 1.0) -> ErrorModel:
    """A K-term dot product accumulated in f32 in any order is within ``K·u·Σ|a_k||b_k|`` (the
    classic γ_K bound, TOSA's form); with F16 weights and F32 src1 the device may round src1 to F16
    first (ggml's CPU does: it converts src1 to the weights' vec_dot_type), adding ``2^-11·Σ|a||b|``
    and, where src1 is below F16's range, ``2^-25·Σ|a|``. Gradual underflow adds 2^-150 per rounding.
    ``allowed_i = (c·K·2^-24 + e_src1)·Σ_k|a_k||b_k| + (K + 1)·2^-150``."""

    def model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
        a, b = (np.asarray(v, np.float64) for v in inputs[:2])
        k = a.shape[-1]
        with np.errstate(invalid="ignore", over="ignore"):
            scale = abs_dot(finite_abs(a), finite_abs(b))
            allowed = c * k * F32_EPS * scale + (k + 1) * 2.0**-150  # f32 underflow: 2^-150 per rounding
            if case.inputs[0].dtype == "f16" and case.inputs[1].dtype == "f32":
                # |Δb| ≤ 2^-11·|b| + 2^-25 (half an F16 subnormal step: tiny f32 values become 0)
                allowed = allowed + F16_EPS * scale + 2.0**-25 * abs_dot(finite_abs(a), np.ones_like(b))
        return allowed

    model.__name__ = f"dot_product({c}·K·2^-24 [+2^-11 for F16 weights with F32 src1])·Σ|a||b|"
    return model


def bf16_dot_product_model() -> ErrorModel:
    """MUL_MAT with BF16 weights: the f32 accumulation bound ``K·2^-24·Σ|a||b|``, and with F32 src1 the
    device may round src1 to BF16 first (ggml's CPU does: BF16's vec_dot_type is BF16), adding
    ``2^-8·Σ|a||b|`` (BF16 keeps 8 significant bits) and, below BF16's normal range, half its smallest
    subnormal step ``2^-134·Σ|a|``. Gradual underflow adds 2^-150 per rounding."""
    base = dot_product_model(1.0)

    def model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
        allowed = base(case, inputs, golden)
        if case.inputs[1].dtype == "f32":
            a, b = (finite_abs(v) for v in inputs[:2])
            with np.errstate(invalid="ignore", over="ignore"):
                allowed = allowed + BF16_EPS * abs_dot(a, b) + 2.0**-134 * abs_dot(a, np.ones_like(b))
        return allowed

    model.__name__ = "dot_product(K·2^-24 [+2^-8 for BF16 weights with F32 src1])·Σ|a||b|"
    return model


BF16_EPS = 2.0**-8  # unit roundoff of BF16 (8 significant bits)


def _src1_rounding(case: OpCase) -> float:
    """The unit of the src1 rounding a device may do before the dot (its weights' vec_dot_type)."""
    weights, src1 = case.inputs[0].dtype, case.inputs[1].dtype
    if src1 == "f32" and weights == "f16":
        return F16_EPS
    if src1 == "f32" and weights == "bf16":
        return BF16_EPS
    return 0.0


def dot_product_typical(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """The aggregate criterion's scale for a K-term dot product (golden/tolerance.py): each of the K
    accumulation steps errs by at most u·|partial sum| ≤ u·Σ|a||b| and each product by u·|a_k b_k|;
    root-sum-square: √K·u·Σ|a||b| + u·√Σ(a_k b_k)². src1 rounded first (F16/BF16 vec_dot_type) adds
    e·√Σ(a_k b_k)²; underflow √(K+1)·2^-150."""
    a, b = (finite_abs(np.asarray(v, np.float64)) for v in inputs[:2])
    k = a.shape[-1]
    with np.errstate(invalid="ignore", over="ignore"):
        scale = abs_dot(a, b)
        squares = np.sqrt(mul_mat(a * a, b * b))
        return np.sqrt(k) * F32_EPS * scale + (F32_EPS + _src1_rounding(case)) * squares + np.sqrt(k + 1) * 2.0**-150


def quant_matmul_typical(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """quant_matmul_model's terms as root-sum-square: src1's per-element rounding (Q8_0 or F16, the
    larger) √Σ(|a_k|·e_k)², and the f32 accumulation √K·u·Σ|a||b|."""
    a, b = (np.asarray(v, np.float64) for v in inputs[:2])
    k = a.shape[-1]
    abs_a, abs_b = finite_abs(a), finite_abs(b)
    blocks = abs_b.reshape(abs_b.shape[:-1] + (k // 32, 32))
    amax = np.repeat(blocks.max(axis=-1), 32, axis=-1)
    src1_error = np.maximum(amax * (0.5 / 127 + F16_EPS), F16_EPS * abs_b + 2.0**-25)
    with np.errstate(invalid="ignore", over="ignore"):
        rounding = np.sqrt(mul_mat(abs_a * abs_a, src1_error * src1_error))
        return rounding + np.sqrt(k) * F32_EPS * abs_dot(abs_a, abs_b) + np.sqrt(k + 1) * 2.0**-150


def quant_matmul_model() -> ErrorModel:
    """MUL_MAT with Q4_0/Q8_0 weights, against the exact product of the dequantized weights and src1.

    The device may round src1 before the dot product: ggml's CPU quantizes each 32-block of a src1
    row to Q8_0 (error ≤ ½·amax/127 per element, plus amax·2^-11 from the F16 scale), ggml-cann casts
    src1 to F16 (2^-11·|b|, or half an F16 subnormal step). The larger of the two is allowed per
    element, weighted by |a_k|, on top of the f32 accumulation bound K·2^-24·Σ|a||b|."""

    def model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
        a, b = (np.asarray(v, np.float64) for v in inputs[:2])
        k = a.shape[-1]
        abs_a, abs_b = finite_abs(a), finite_abs(b)
        blocks = abs_b.reshape(abs_b.shape[:-1] + (k // 32, 32))
        amax = np.repeat(blocks.max(axis=-1), 32, axis=-1)
        q8_error = amax * (0.5 / 127 + F16_EPS)
        f16_error = F16_EPS * abs_b + 2.0**-25
        with np.errstate(invalid="ignore", over="ignore"):
            src1_rounding = abs_dot(abs_a, np.maximum(q8_error, f16_error))
            accumulate = k * F32_EPS * abs_dot(abs_a, abs_b) + (k + 1) * 2.0**-150
        return src1_rounding + accumulate

    model.__name__ = "quant_matmul(max(Q8_0, F16) rounding of src1 + K·2^-24)·Σ|a||b|"
    return model


_QUANT_MATMUL = Tolerance(
    "exact on the dequantized weights; the device may round src1 first — ggml's CPU quantizes it to Q8_0 "
    "(≤ ½ step + F16 scale rounding per block), CANN casts it to F16 — then accumulates in f32 "
    "(K·2^-24·Σ|a||b|); ggml CPU ci: ≤ 0.26 of the allowance", ulp=0.5, model=quant_matmul_model(),
    model_name="quant_matmul", typical=quant_matmul_typical, typical_name="√K·u·Σ|a||b| + √Σ(|a|·e_src1)²",
    calibration=Calibration.GGML_CPU)
def _activation_error(abs_b: np.ndarray, block: int, scale_eps: float) -> np.ndarray:
    """Per element of src1, the larger of its rounding into ``block``-element int8 blocks (½·amax/127, plus
    the scale's own rounding amax·scale_eps) and into F16 (2^-11·|b|, or half an F16 subnormal step)."""
    k = abs_b.shape[-1]
    blocks = abs_b.reshape(abs_b.shape[:-1] + (k // block, block))
    amax = np.repeat(blocks.max(axis=-1), block, axis=-1)
    return np.maximum(amax * (0.5 / 127 + scale_eps), F16_EPS * abs_b + 2.0**-25)


def _min_sum_error(abs_a: np.ndarray, abs_b: np.ndarray) -> np.ndarray:
    """Q8_1 keeps each 32-block's sum d·Σq as F16, and a weight format with a per-block minimum m adds
    m·s to the dot product: |m| ≤ the block's max|a| (m is the block's smallest value, the quants are
    non-negative), |Δs| ≤ 2^-11·Σ_block|b| (+ the quantization, counted in _activation_error)."""
    k = abs_a.shape[-1]
    a_max = abs_a.reshape(abs_a.shape[:-1] + (k // 32, 32)).max(axis=-1)
    b_sum = abs_b.reshape(abs_b.shape[:-1] + (k // 32, 32)).sum(axis=-1)
    return F16_EPS * mul_mat(a_max, b_sum)


def block_quant_matmul_model(block: int, scale_eps: float, min_sum: bool, rss: bool = False) -> ErrorModel:
    """MUL_MAT with quantized weights of any format, against the exact product of the dequantized weights
    and src1. The one freedom: the device may round src1 first, into the weights' activation format
    (``block``-element int8 blocks with a scale rounded by ``scale_eps``) or into F16; ``min_sum`` adds
    the F16 block sum of Q8_1 for formats with a minimum. Then f32 accumulation (K·2^-24·Σ|a||b|).
    ``rss``: the typical (root-sum-square) form of the same terms, for the aggregate criterion."""

    def model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
        a, b = (np.asarray(v, np.float64) for v in inputs[:2])
        k = a.shape[-1]
        abs_a, abs_b = finite_abs(a), finite_abs(b)
        error = _activation_error(abs_b, block, scale_eps)
        with np.errstate(invalid="ignore", over="ignore"):
            if rss:
                allowed = (np.sqrt(mul_mat(abs_a * abs_a, error * error))
                           + np.sqrt(k) * F32_EPS * abs_dot(abs_a, abs_b) + np.sqrt(k + 1) * 2.0**-150)
            else:
                allowed = abs_dot(abs_a, error) + k * F32_EPS * abs_dot(abs_a, abs_b) + (k + 1) * 2.0**-150
            if min_sum:
                allowed = allowed + _min_sum_error(abs_a, abs_b)
        return allowed

    sums = " + Q8_1's F16 block sums" if min_sum else ""
    model.__name__ = f"quant_matmul(max({block}-block int8, F16) rounding of src1{sums} + K·2^-24)·Σ|a||b|"
    return model


# weight format -> (its activation format on ggml's CPU (type_traits_cpu vec_dot_type), elements per
# activation block, that block scale's unit roundoff, whether the format has a per-block minimum that a
# Q8_1 activation block's F16 sum multiplies: ggml-vulkan's integer-dot path converts src1 to Q8_1)
WEIGHT_ACTIVATIONS: dict[str, tuple[str, int, float, bool]] = {
    "q4_1": ("q8_1", 32, F16_EPS, True), "q5_0": ("q8_0", 32, F16_EPS, False),
    "q5_1": ("q8_1", 32, F16_EPS, True), "iq4_nl": ("q8_0", 32, F16_EPS, False),
    "mxfp4": ("q8_0", 32, F16_EPS, False),
    # Q8_K: 256-element blocks with an f32 scale; its amax over 256 covers a backend's Q8_1 over 32
    "q2_k": ("q8_k", 256, F32_EPS, True), "q3_k": ("q8_k", 256, F32_EPS, False),
    "q4_k": ("q8_k", 256, F32_EPS, True), "q5_k": ("q8_k", 256, F32_EPS, True),
    "q6_k": ("q8_k", 256, F32_EPS, False), "tq2_0": ("q8_k", 256, F32_EPS, False),
    "tq1_0": ("q8_k", 256, F32_EPS, False),
    # the IQ formats' grid values and IQ1's delta meet Q8_K's exact int16 block sums: no F16 sum term
    **{iq: ("q8_k", 256, F32_EPS, False)
       for iq in ("iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m", "iq4_xs")},
    "nvfp4": ("q8_0", 32, F16_EPS, False), "q1_0": ("q8_0", 32, F16_EPS, False),
    "q2_0": ("q8_0", 32, F16_EPS, False),
}


def _format_row(weights: str, routed_pairs: bool = False) -> Tolerance:
    act, block, scale_eps, min_sum = WEIGHT_ACTIVATIONS[weights]
    model = block_quant_matmul_model(block, scale_eps, min_sum)
    typical = block_quant_matmul_model(block, scale_eps, min_sum, rss=True)
    if routed_pairs:
        model, typical = routed(model), routed(typical)
    scale = "F16" if scale_eps == F16_EPS else "f32"
    sums = ("; its minimum times Q8_1's F16 block sum adds 2^-11·max_block|a|·Σ_block|b| (ggml-vulkan's integer "
            "dot converts src1 to Q8_1)") if min_sum else ""
    return Tolerance(
        f"exact on the dequantized {weights.upper()} weights; the device may round src1 first — ggml's CPU into "
        f"{act.upper()} ({block}-element int8 blocks: ≤ ½·amax/127 + amax·{'2^-11' if scale == 'F16' else '2^-24'} "
        f"from the {scale} scale), CANN into F16{sums} — then accumulates in f32 (K·2^-24·Σ|a||b|)",
        ulp=0.5, model=model, model_name=f"quant_matmul[{act}]", typical=typical,
        typical_name="√K·u·Σ|a||b| + √Σ(|a|·e_src1)²")


# the weight formats drawn beyond Q4_0/Q8_0 (golden.dtypes.DRAWN_WEIGHT_TYPES): each needs its row above
WEIGHT_FORMATS: tuple[str, ...] = tuple(w for w in dtypes.DRAWN_WEIGHT_TYPES if w not in dtypes.DRAWN_QUANT_TYPES)
FORMAT_MATMUL_ROWS: dict[str, Tolerance] = {
    f"{w}_{src1}_to_f32": _format_row(w) for w in WEIGHT_ACTIVATIONS for src1 in ("f32", "f16")}


# Weights of more elements than this (a 1B-class model's 128256×2048 output matrix is 2.1 GB in float64) have
# their error models evaluated a block of weight rows at a time: output column n depends on weight row n
# only, and |a|, |a|² and the like then take a block's memory, not the matrix's (a 1B-class run held three
# matrix-sized float64 arrays at once: 8.9 GiB at its peak). The values are the whole-matrix formulas' up to
# the float64 rounding of the products (BLAS blocks a product differently by its width: ≤ 1e-15 relative
# measured), far below any allowance's own precision; smaller weights are evaluated whole, as before.
WEIGHT_ROWS_FROM = 1 << 25
ROW_BLOCK_ELEMENTS = 1 << 20  # 8 MiB of float64 per block


def by_weight_rows(model: ErrorModel) -> ErrorModel:
    """``model`` of a MUL_MAT evaluated on blocks of the weights' rows (numpy axis -2 of inputs[0]) and put
    together along the output's last axis, for weights of WEIGHT_ROWS_FROM elements or more."""

    def blocked(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
        a = inputs[0]
        if np.size(a) < WEIGHT_ROWS_FROM or np.ndim(a) != 4:
            return model(case, inputs, golden)
        n, k = np.shape(a)[-2:]
        rows = max(1, ROW_BLOCK_ELEMENTS // max(1, k * np.shape(a)[0] * np.shape(a)[1]))
        g = np.asarray(golden)
        parts = []
        for start in range(0, n, rows):
            part = g[..., start:start + rows]
            parts.append(np.broadcast_to(model(case, [a[..., start:start + rows, :], *inputs[1:]], part), part.shape))
        return np.concatenate(parts, axis=-1)

    blocked.__name__ = model.__name__
    return blocked


def _by_weight_rows(rows: dict[str, Tolerance]) -> dict[str, Tolerance]:
    return {key: replace(t, model=by_weight_rows(t.model) if t.model is not None else None,
                         typical=by_weight_rows(t.typical) if t.typical is not None else None)
            for key, t in rows.items()}


_DOT_TYPICAL: dict[str, Any] = {"typical": dot_product_typical, "typical_name": "√K·u·Σ|a||b| + (u+e)·√Σ(ab)²"}
_GAMMA_K = "γ_K dot-product bound: K products and sums in f32 in any order, FMA or not (K·2^-24·Σ|a||b|)"
SPECS.add(OpSpec(
    name="MUL_MAT", family="matmul",
    regimes=(*matmul_tiles(lambda c: c.inputs[0].ne[0], lambda c: c.inputs[0].ne[1], lambda c: c.inputs[1].ne[1]),
             WEIGHT_ROWS_PAST_GRID),
    golden=lambda xs, c: mul_mat(xs[0], xs[1]),
    signatures=(sig("f32", "f32"), sig("f16", "f32", dst="f32"), sig("f16", "f16", dst="f32"),
                sig("bf16", "f32", dst="f32"), sig("bf16", "bf16", dst="f32"), sig("f32", "f16", dst="f32")),
    quantized_signatures=(sig("q4_0", "f32", dst="f32"), sig("q8_0", "f32", dst="f32"),
                          sig("q4_0", "f16", dst="f32"), sig("q8_0", "f16", dst="f32"))
    + tuple(sig(w, src1, dst="f32") for w in WEIGHT_FORMATS for src1 in ("f32", "f16")),
    tolerance=_by_weight_rows({"f32": Tolerance(_GAMMA_K + "; ggml CPU: ≤ 0.84 of it at K = 1, 4e-5 at K = 4096",
                                ulp=0.5, model=dot_product_model(1.0), **_DOT_TYPICAL,
                                calibration=Calibration.GGML_CPU),
               "f16_f32_to_f32": Tolerance(
                   _GAMMA_K + ", plus 2^-11·Σ|a||b| (+2^-25·Σ|a| below F16's range) because a device may round "
                   "src1 to F16 first — ggml's CPU and CANN do (F16's vec_dot_type is F16). Accumulating in F16 "
                   "is not allowed: it errs by ~2^-12·√K·Σ|a||b| where the products share a sign; ggml CPU: "
                   "≤ 0.66·2^-11·Σ|a||b| (0.91 of the allowance nightly)", ulp=0.5, model=dot_product_model(1.0),
                   **_DOT_TYPICAL, calibration=Calibration.GGML_CPU),
               "f16_f16_to_f32": Tolerance(
                   _GAMMA_K + "; F16·F16 products are exact in f32 (11 + 11 significant bits); ggml CPU: ≤ 0.06",
                   ulp=0.5, model=dot_product_model(1.0), **_DOT_TYPICAL, calibration=Calibration.GGML_CPU),
               "f32_f16_to_f32": Tolerance(
                   _GAMMA_K + "; F16 src1 widens to f32 exactly (ggml's CPU declines this signature: F32's "
                   "vec_dot_type is F32)", ulp=0.5, model=dot_product_model(1.0), **_DOT_TYPICAL,
                   calibration=Calibration.GGML_CPU),
               "bf16_f32_to_f32": Tolerance(
                   "γ_K dot-product bound K·2^-24·Σ|a||b|, plus 2^-8·Σ|a||b| (+2^-134·Σ|a| below BF16's normal "
                   "range) because a device may round src1 to BF16 first — ggml's CPU does (BF16's vec_dot_type "
                   "is BF16); ggml CPU: ≤ 0.74 of the allowance ci, 0.97 nightly (at K = 1 the src1 rounding is all of "
                   "it: the bound is tight)", ulp=0.5, model=bf16_dot_product_model(), **_DOT_TYPICAL,
                   calibration=Calibration.GGML_CPU),
               "bf16_bf16_to_f32": Tolerance(
                   "γ_K dot-product bound: BF16·BF16 products are exact in f32 (8 + 8 significant bits), then "
                   "accumulated in f32 in any order (K·2^-24·Σ|a||b|); ggml CPU: ≤ 0.18 of the allowance ci, 0.33 "
                   "nightly",
                   ulp=0.5, model=dot_product_model(1.0), **_DOT_TYPICAL, calibration=Calibration.GGML_CPU),
               "q4_0_f32_to_f32": _QUANT_MATMUL, "q8_0_f32_to_f32": _QUANT_MATMUL,
               "q4_0_f16_to_f32": _QUANT_MATMUL, "q8_0_f16_to_f32": _QUANT_MATMUL,
               **FORMAT_MATMUL_ROWS}),
    input_layouts=InputLayouts.ROWS, specials=(0.0, -0.0),
    notes="dst ne [a.ne1, b.ne1, b.ne2, b.ne3]; dims 2/3 of a broadcast blockwise (GQA). Rows of both "
          "srcs must be contiguous (nb0 = element size; a transposed operand is rejected by ggml), so "
          "layouts keep dim 0 innermost, quantized weights included (their permutes move whole rows of "
          "blocks); ±inf/NaN are not drawn (an F32 subnormal src1 becomes 0 in F16 and inf·0 is NaN). "
          "Quantized weights need K % 32 == 0 (ggml-cann also requires contiguous src0/src1). F16 src1 "
          "with F32 or quantized weights is accepted by ggml_mul_mat; ggml's CPU declines it (supports_op: "
          "src1 must be F32 or the weights' vec_dot_type), other devices are judged. A quarter of the data "
          "seeds give both operands one sign (|Σab| = Σ|a||b|: the bound is tight there, and F16 "
          "accumulation shows). Deep K (to 8192) in ci; m, n, k to 512, 4096, 8192 in nightly"))


# ---- MUL_MAT_ID: mixture-of-experts routing ------------------------------------------------------
# Numpy shapes: experts ``as`` (1, E, N, K) (ggml [K, N, n_expert]), ``b`` (1, T, B, K) (ggml [K, B,
# n_tokens], B = n_expert_used or a divisor of it), ``ids`` I32 (1, 1, T, U) (ggml [n_expert_used,
# n_tokens]). ``dst[0, t, e] = as[ids[t, e]] @ b[t, e mod B]``: slot e of token t uses expert
# ids[t, e] on src1 row e mod B (ggml.c; ggml-cpu picks the src1 row as ``slot % ne11``).


def _routing(experts: np.ndarray, b: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(E, N, K) experts, each (token, slot)'s src1 row (T, U, K), and the expert ids (T, U)."""
    n_tokens = np.shape(b)[1]
    chosen = np.asarray(ids).reshape(n_tokens, -1)
    rows = np.asarray(b)[0]
    return np.asarray(experts)[0], rows[:, np.arange(chosen.shape[1]) % rows.shape[1], :], chosen


def mul_mat_id(experts: np.ndarray, b: np.ndarray, ids: np.ndarray) -> np.ndarray:
    weights, rows, chosen = _routing(experts, b, ids)
    weights, rows = np.asarray(weights, np.float64), np.asarray(rows, np.float64)
    out = np.zeros(chosen.shape + (weights.shape[1],))
    with np.errstate(invalid="ignore", over="ignore"):
        for expert in np.unique(chosen):  # every (token, slot) routed to this expert at once
            routed = chosen == expert
            out[routed] = rows[routed] @ weights[expert].T
    return out[None]


def routed_pairs(inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Each (token, slot)'s expert and src1 row as one MUL_MAT pair: a (T, U, N, K), b (T, U, 1, K)."""
    weights, rows, chosen = _routing(*inputs[:3])
    return [np.asarray(weights, np.float64)[chosen], np.asarray(rows, np.float64)[:, :, None, :]]


def routed(model: ErrorModel) -> ErrorModel:
    """A MUL_MAT error model applied to each routed (expert, src1 row) dot product: MUL_MAT_ID is
    MUL_MAT on the pairs the ids select, so the same bound holds per output element."""

    def routed_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
        # one expert at a time, as the golden: routed_pairs copies an expert per (token, slot)
        weights, rows, chosen = _routing(*inputs[:3])
        weights, rows = np.asarray(weights, np.float64), np.asarray(rows, np.float64)
        g = np.asarray(golden)[0]  # (T, U, N)
        out = np.zeros(g.shape)
        for expert in np.unique(chosen):
            routed = chosen == expert
            pair = [weights[expert][None, None], rows[routed][None, None]]  # (1, 1, N, K), (1, 1, R, K)
            out[routed] = model(case, pair, g[routed][None, None])[0, 0]
        return out.reshape(np.shape(golden))

    routed_model.__name__ = f"routed {model.__name__}"
    return routed_model


def check_mul_mat_id(case: OpCase, inputs: list[np.ndarray]) -> None:
    """ggml_mul_mat_id's asserts, and ids inside [0, n_expert) (the kernels index with them unchecked)."""
    experts, b, ids = (t.ne for t in case.inputs[:3])
    if case.inputs[2].dtype != "i32" or experts[3] != 1 or b[3] != 1 or ids[2:] != (1, 1):
        raise ValueError("MUL_MAT_ID: experts [K, N, n_expert, 1], b [K, B, n_tokens, 1] and I32 ids "
                         "[n_expert_used, n_tokens, 1, 1]")
    if experts[0] != b[0] or ids[1] != b[2] or ids[0] % b[1]:
        raise ValueError(f"MUL_MAT_ID: need experts ne0 = b ne0 ({experts[0]} vs {b[0]}), ids ne1 = b ne2 "
                         f"({ids[1]} vs {b[2]}) and b ne1 dividing ids ne0 ({b[1]} into {ids[0]})")
    if len(inputs) < 3:  # shapes only (a case id checked before its data exists)
        return
    chosen = np.asarray(inputs[2])
    if chosen.size and (chosen.min() < 0 or chosen.max() >= experts[2]):
        raise ValueError(f"MUL_MAT_ID: expert ids must be in [0, {experts[2]}), got {chosen.min()}..{chosen.max()}")


_ROUTED_QUANT = Tolerance(
    "MUL_MAT's quantized-weights model per routed pair: exact on the dequantized expert; src1 may be rounded to "
    "Q8_0 (ggml CPU) or F16 (ggml-cann), then accumulated in f32 (K·2^-24·Σ|a||b|); ggml CPU, 300 cases each: "
    "Q4_0 ≤ 0.37, Q8_0 ≤ 0.33 of the allowance", ulp=0.5,
    model=routed(quant_matmul_model()), model_name="routed quant_matmul", typical=routed(quant_matmul_typical),
    typical_name="routed √K·u·Σ|a||b| + √Σ(|a|·e_src1)²", calibration=Calibration.GGML_CPU)
SPECS.add(OpSpec(
    name="MUL_MAT_ID", family="matmul",
    regimes=matmul_tiles(lambda c: c.inputs[0].ne[0],
                         lambda c: c.inputs[0].ne[1]) + (partial_tile("tokens", lambda c: c.inputs[1].ne[2], 32),
                                                         WEIGHT_ROWS_PAST_GRID),
    golden=lambda xs, c: mul_mat_id(xs[0], xs[1], xs[2]),
    signatures=(sig("f32", "f32", "i32", dst="f32"), sig("f16", "f32", "i32", dst="f32"),
                sig("f16", "f16", "i32", dst="f32")),
    quantized_signatures=(sig("q4_0", "f32", "i32", dst="f32"), sig("q8_0", "f32", "i32", dst="f32"))
    + tuple(sig(w, "f32", "i32", dst="f32") for w in WEIGHT_FORMATS),
    tolerance={"f32": Tolerance("MUL_MAT's γ_K dot-product bound per routed pair (F16 experts with F32 src1: "
                                "src1 may be rounded to F16, as ggml's CPU does); ggml CPU, 300 cases each: "
                                "F32 ≤ 0.50, F16·F32 ≤ 0.93 (src1 rounded to F16 at K = 1), F16·F16 ≤ 0.22 "
                                "of the allowance", ulp=0.5,
                                model=routed(dot_product_model(1.0)), model_name="routed dot_product",
                                typical=routed(dot_product_typical), typical_name="routed √K·u·Σ|a||b|",
                                calibration=Calibration.GGML_CPU),
               "q4_0_f32_i32_to_f32": _ROUTED_QUANT, "q8_0_f32_i32_to_f32": _ROUTED_QUANT,
               **{f"{w}_f32_i32_to_f32": _format_row(w, routed_pairs=True) for w in WEIGHT_ACTIVATIONS}},
    validate=check_mul_mat_id, input_layouts=InputLayouts.ROWS, specials=(0.0, -0.0), structured_inputs=True,
    notes="dst ne [N, n_expert_used, n_tokens, 1]. ids are drawn with repeats within a token, unused experts, "
          "n_expert_used 1..8 and n_tokens 1..8 and 33..64 (kernels switch on both). Expert rows must be "
          "contiguous (not transposed); src1 keeps dim 0 innermost as for MUL_MAT; ids take any layout. "
          "Quantized experts are drawn contiguous (ggml-cann declines others)"))


# ---- OUT_PROD ---------------------------------------------------------------------------------------
# Numpy shapes: ``a`` (A3, A2, K, M) (ggml [m, k, ...]), ``b`` (B3, B2, K, N) (ggml [n, k, ...]) with
# B2 % A2 == B3 % A3 == 0 (blockwise, as MUL_MAT); ``dst[x, y, j, i] = Σ_k a[x', y', k, i]·b[x, y, k, j]``,
# ggml ne [m, n, b.ne2, b.ne3]: MUL_MAT of the two operands with their dims 0 and 1 swapped.


def _as_mul_mat(inputs: list[np.ndarray]) -> list[np.ndarray]:
    return [np.swapaxes(np.asarray(x, np.float64), -1, -2) for x in inputs[:2]]


def _out_prod_outputs(c: OpCase) -> int:
    a, b = c.inputs[0].ne, c.inputs[1].ne
    return a[0] * b[0] * b[2] * b[3]


def out_prod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return mul_mat(*_as_mul_mat([a, b]))


def check_out_prod(case: OpCase, inputs: list[np.ndarray]) -> None:
    a, b = (t.ne for t in case.inputs[:2])
    if a[1] != b[1] or b[2] % a[2] or b[3] % a[3]:
        raise ValueError(f"OUT_PROD: need a ne1 = b ne1 ({a[1]} vs {b[1]}) and a's dims 2/3 dividing b's")


def _transposed(model: ErrorModel) -> ErrorModel:
    def out_prod_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
        return model(case, _as_mul_mat(inputs), golden)

    out_prod_model.__name__ = model.__name__
    return out_prod_model


_OUT_PROD_QUANT = Tolerance(
    "exact on the dequantized a (its blocks run along m, not k, so no src rounding pairs with them), then a "
    "k-term f32 dot product in any order (γ_k·Σ|a||b|); ggml CPU, 300 cases each: Q4_0 ≤ 0.56, Q8_0 ≤ 0.62 "
    "of the allowance", ulp=0.5,
    model=_transposed(dot_product_model(1.0)), model_name="dot_product over k",
    typical=_transposed(dot_product_typical), typical_name="√k·u·Σ|a||b| over k", calibration=Calibration.GGML_CPU)
SPECS.add(OpSpec(
    name="OUT_PROD", family="matmul",
    regimes=(*matmul_tiles(lambda c: c.inputs[0].ne[1], lambda c: c.inputs[0].ne[0], lambda c: c.inputs[1].ne[0]),
             grid_regime(elements=_out_prod_outputs)),
    golden=lambda xs, c: out_prod(xs[0], xs[1]),
    signatures=(sig("f32", "f32"), sig("f16", "f32", dst="f32"), sig("f16", "f16", dst="f32")),
    quantized_signatures=(sig("q4_0", "f32", dst="f32"), sig("q8_0", "f32", dst="f32")),
    tolerance={"f32": Tolerance("a k-term dot product accumulated in f32 in any order (γ_k·Σ|a||b|, MUL_MAT's "
                                "model; F16 a with F32 b: b may be rounded to F16, as MUL_MAT's F16 path does); "
                                "ggml CPU, 300 cases each: F32 ≤ 0.58, F16·F32 ≤ 5e-4 (it keeps b in f32) of "
                                "the allowance",
                                ulp=0.5, model=_transposed(dot_product_model(1.0)), model_name="dot_product over k",
                                typical=_transposed(dot_product_typical), typical_name="√k·u·Σ|a||b| over k",
                                calibration=Calibration.GGML_CPU),
               "q4_0_f32_to_f32": _OUT_PROD_QUANT, "q8_0_f32_to_f32": _OUT_PROD_QUANT},
    validate=check_out_prod, input_layouts=InputLayouts.ROWS, specials=(0.0, -0.0),
    notes="dst ne [a.ne0, b.ne0, b.ne2, b.ne3]; a's dims 2/3 broadcast blockwise. a must not be transposed "
          "(drawn with dim 0 innermost), b takes any layout. ggml's CPU declines F16 a with a broadcast and any "
          "b but F32; ggml-cann claims F32 and F16 a and declines quantized a (drawn contiguous, m a multiple of "
          "32: ggml's CPU computes it without a broadcast)"))

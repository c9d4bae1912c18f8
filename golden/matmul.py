"""MUL_MAT: ``dst[i3, i2] = b[i3, i2] @ a[i3 // r3, i2 // r2].T`` with ggml's blocked broadcast.

Numpy shapes: ``a`` (weights, src0) is (A3, A2, N, K), ``b`` (src1) is (B3, B2, M, K) with
``B2 % A2 == B3 % A3 == 0``; the result is (B3, B2, M, N), i.e. ggml ne ``[a.ne1, b.ne1, b.ne2,
b.ne3]``. The broadcast over dims 2 and 3 is repeat-interleave (a's slice j serves b's slices
j·r .. j·r + r − 1, as grouped-query attention shares KV heads), not the cyclic tiling of ADD.
Products of f32/f16 values are exact in float64 and the K-sum is within K·2^-53 relative.
"""

from __future__ import annotations

import numpy as np

from golden.case import OpCase
from golden.spec import InputLayouts, OpList, OpSpec, sig
from golden.tolerance import F16_EPS, F32_EPS, ErrorModel, Tolerance, finite_abs

SPECS = OpList()


def broadcast_weights(a: np.ndarray, b_shape: tuple[int, ...]) -> np.ndarray:
    """Repeat a's dims 2 and 3 (numpy axes 1 and 0) blockwise up to b's."""
    a = np.repeat(a, b_shape[0] // a.shape[0], axis=0)
    return np.repeat(a, b_shape[1] // a.shape[1], axis=1)


def mul_mat(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = broadcast_weights(np.asarray(a, np.float64), np.shape(b))
    with np.errstate(invalid="ignore", over="ignore"):  # float64 GEMM: K·2^-53 relative in any order
        return np.matmul(np.asarray(b, np.float64), np.swapaxes(a, -1, -2))


def abs_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``Σ_k |a_k|·|b_k|`` for each output: the scale of a dot product's rounding error."""
    return mul_mat(np.abs(a), np.abs(b))


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
    model_name="quant_matmul")
_GAMMA_K = "γ_K dot-product bound: K products and sums in f32 in any order, FMA or not (K·2^-24·Σ|a||b|)"
SPECS.add(OpSpec(
    name="MUL_MAT", family="matmul", golden=lambda xs, c: mul_mat(xs[0], xs[1]),
    signatures=(sig("f32", "f32"), sig("f16", "f32", dst="f32"), sig("f16", "f16", dst="f32"),
                sig("bf16", "f32", dst="f32"), sig("bf16", "bf16", dst="f32"), sig("f32", "f16", dst="f32")),
    quantized_signatures=(sig("q4_0", "f32", dst="f32"), sig("q8_0", "f32", dst="f32"),
                          sig("q4_0", "f16", dst="f32"), sig("q8_0", "f16", dst="f32")),
    tolerance={"f32": Tolerance(_GAMMA_K + "; ggml CPU: ≤ 0.84 of it at K = 1, 4e-5 at K = 4096",
                                ulp=0.5, model=dot_product_model(1.0)),
               "f16_f32_to_f32": Tolerance(
                   _GAMMA_K + ", plus 2^-11·Σ|a||b| (+2^-25·Σ|a| below F16's range) because a device may round "
                   "src1 to F16 first — ggml's CPU and CANN do (F16's vec_dot_type is F16). Accumulating in F16 "
                   "is not allowed: it errs by ~2^-12·√K·Σ|a||b| where the products share a sign; ggml CPU: "
                   "≤ 0.66·2^-11·Σ|a||b| (0.91 of the allowance nightly)", ulp=0.5, model=dot_product_model(1.0)),
               "f16_f16_to_f32": Tolerance(
                   _GAMMA_K + "; F16·F16 products are exact in f32 (11 + 11 significant bits); ggml CPU: ≤ 0.06",
                   ulp=0.5, model=dot_product_model(1.0)),
               "f32_f16_to_f32": Tolerance(
                   _GAMMA_K + "; F16 src1 widens to f32 exactly (ggml's CPU declines this signature: F32's "
                   "vec_dot_type is F32)", ulp=0.5, model=dot_product_model(1.0)),
               "bf16_f32_to_f32": Tolerance(
                   "γ_K dot-product bound K·2^-24·Σ|a||b|, plus 2^-8·Σ|a||b| (+2^-134·Σ|a| below BF16's normal "
                   "range) because a device may round src1 to BF16 first — ggml's CPU does (BF16's vec_dot_type "
                   "is BF16); ggml CPU: ≤ 0.74 of the allowance ci, 0.97 nightly (at K = 1 the src1 rounding is all of "
                   "it: the bound is tight)", ulp=0.5, model=bf16_dot_product_model()),
               "bf16_bf16_to_f32": Tolerance(
                   "γ_K dot-product bound: BF16·BF16 products are exact in f32 (8 + 8 significant bits), then "
                   "accumulated in f32 in any order (K·2^-24·Σ|a||b|); ggml CPU: ≤ 0.18 of the allowance ci, 0.33 "
                   "nightly",
                   ulp=0.5, model=dot_product_model(1.0)),
               "q4_0_f32_to_f32": _QUANT_MATMUL, "q8_0_f32_to_f32": _QUANT_MATMUL,
               "q4_0_f16_to_f32": _QUANT_MATMUL, "q8_0_f16_to_f32": _QUANT_MATMUL},
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

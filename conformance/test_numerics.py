"""Numerics ops (test_norm, test_soft_max, test_rope, test_mul_mat, ...: generated from the catalogue by
conformance/suite.py) and the anchors: hand-built cases at the parameter corners where real CANN bugs sat.
"""

from __future__ import annotations

import pytest

from conformance.strategies import f32, spec
from conformance.suite import group_tests_for
from golden.case import Layout, OpCase

globals().update(group_tests_for(__name__))


# ---- anchors: the parameter corners where real CANN bugs sat ------------------------------------------
def _rope_params(n_dims: int, mode: int = 0, attn_factor: float = 1.0, ext_factor: float = 0.0,
                 freq_scale: float = 1.0) -> tuple:
    return (("n_dims", n_dims), ("mode", mode), ("n_ctx_orig", 32768), ("freq_base", 1e6),
            ("freq_scale", f32(freq_scale)), ("ext_factor", f32(ext_factor)), ("attn_factor", f32(attn_factor)),
            ("beta_fast", 32.0), ("beta_slow", 1.0), ("freq_factors", False))


def _soft_max(heads: int, mask: str, max_bias: float, sinks: bool = False) -> OpCase:
    inputs = [spec("f32", (64, 7, heads, 1)), spec(mask, (64, 9, heads // 2 if heads % 2 == 0 else 1, 1))]
    if sinks:
        inputs.append(spec("f32", (heads, 1, 1, 1)))
    params = (("scale", f32(0.125)), ("max_bias", f32(max_bias)), ("mask", True), ("sinks", sinks))
    return OpCase("SOFT_MAX", tuple(inputs), params=params, distribution="dense")


def _pool(op: int, k: int, s: int, p: float) -> OpCase:
    params = (("op", op), ("k0", k), ("k1", k), ("s0", s), ("s1", s), ("p0", f32(p)), ("p1", f32(p)))
    return OpCase("POOL_2D", (spec("f32", (13, 11, 3, 1)),), params=params, distribution="dense")


_TOKENS = spec("i32", (6, 1, 1, 1))
ANCHORS = [  # id (op first, so -k selects it), case; see shared/reference test-backend-ops-and-cann-bugs §2
    ("rope-B6-attn_factor_f16", OpCase("ROPE", (spec("f16", (128, 4, 6, 1)), _TOKENS),
                                       _rope_params(128, 2, attn_factor=1.4245, ext_factor=1.0, freq_scale=0.25),
                                       dst="f16", distribution="dense")),
    ("rope-B6-noncontiguous", OpCase("ROPE", (spec("f32", (64, 4, 6, 1), Layout(perm=(0, 2, 1, 3), pad=(2, 0, 1, 0))),
                                              _TOKENS), _rope_params(64), distribution="wide")),
    ("rope-B7-partial_rotary", OpCase("ROPE", (spec("f32", (96, 2, 6, 1)), _TOKENS), _rope_params(32, 2))),
    ("soft_max-B10-alibi_f32_mask", _soft_max(8, "f32", 8.0)),
    ("soft_max-B11-alibi_6_heads_f16_mask", _soft_max(6, "f16", 8.0)),
    ("soft_max-alibi_48_heads_sinks", _soft_max(48, "f16", 8.0, sinks=True)),  # m0 = 2^-1/4
    # slopes that are not powers of two (an F16 slope is off by up to 2^-12 relative): 5 heads m0 = 2^-1/4,
    # 12 heads m1 = 2^-1/2 for heads 8..11, 6 heads m0 = 2^-3/4
    ("soft_max-alibi_5_heads_non_dyadic", _soft_max(5, "f32", 1.0)),
    ("soft_max-alibi_12_heads_second_segment_f16_mask", _soft_max(12, "f16", 8.0)),
    ("soft_max-alibi_6_heads_non_dyadic", _soft_max(6, "f32", 3.0)),
    ("pool_2d-B5-avg_pad_over_half_kernel", _pool(1, 3, 2, 2.0)),
    ("pool_2d-max_padding_only_windows", _pool(0, 1, 1, 1.0)),
    ("im2col-B9-1d", OpCase("IM2COL", (spec("f16", (3, 4, 2, 1)), spec("f32", (50, 4, 2, 1))),
                            (("s0", 2), ("s1", 0), ("p0", 1), ("p1", 0), ("d0", 2), ("d1", 0), ("is_2d", False)),
                            dst="f16")),
    ("rms_norm-B12-llama_row", OpCase("RMS_NORM", (spec("f32", (4096, 2, 1, 1)),), (("eps", f32(1e-6)),))),
    ("mul_mat-B4-permuted_f16_gqa", OpCase("MUL_MAT", (spec("f16", (128, 5, 2, 1), Layout(perm=(0, 2, 1, 3))),
                                                       spec("f32", (128, 3, 8, 1), Layout(perm=(0, 2, 1, 3)))))),
    # F16 weights, K = 4096, operands of one sign (data seed 0: see same_sign_operands), the regime where an
    # F16 accumulator errs by ~2^-12·√K·Σ|a||b|, far past the row's src1-rounding term 2^-11·Σ|a||b|
    ("mul_mat-f16_weights_deep_same_sign",
     OpCase("MUL_MAT", (spec("f16", (4096, 6, 1, 1)), spec("f32", (4096, 3, 1, 1))), data_seed=0)),
]


@pytest.mark.parametrize("case", [pytest.param(case, id=name) for name, case in ANCHORS])
def test_numerics_anchor(conform, case: OpCase) -> None:
    conform.check(case)

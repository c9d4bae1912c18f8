"""Known kernel bugs of ggml's CPU backend (``ggml:CPU``), per release; see :mod:`device.known_bugs`.

Each is a layout ggml's graph constructor accepts and ``supports_op`` claims, which the CPU kernel
then aborts on (a GGML_ASSERT on strides) or computes wrongly. Measured on ggml 0.20.2 (the
libggml-python wheel) with the ci and nightly profiles; the repro lines reproduce each alone.

The entries that the TOML vocabulary (:mod:`device.expectation_file`) can say for whole ops are in
``known_bugs_cpu.toml``; this module keeps the rest, and the documented deviations' bounds by name.
"""

from __future__ import annotations

import math

import numpy as np

from device.known_bug import KnownBug
from golden import attention, glu, unary
from golden.case import Layout, OpCase, TensorSpec
from golden.geometry import ggml_contiguous, logical_nb, rows_uniformly_strided, rows_unit_stride, strictly_packed
from golden.tolerance import Tolerance

R0202 = ("0.20.2",)
# Each entry names the releases it was checked on. 0.20.2: the libggml-python wheel, where each was found.
# ("0.20.2", "0.17.0", "0.25.1"): ggml 0.17.0 (libggml-python 0.17.0.post1, scripts/setup-ggml-release.sh) and
# 0.25.1 (the CPU backend of node-llama-cpp's build, scripts/setup-vulkan.sh): the ci profile on each (suite of
# main 186749c) failed only inside this list and reproduced each; RMS_NORM, GROUP_NORM and TIMESTEP_EMBEDDING
# (not drawn) crash from their repro lines there too. ("0.20.2", "0.25.1"[, "0.17.0"]): checked on 0.25.1 by the
# ci profile over the whole suite of main a83b314 (81 ops: every failing case outside the first group fell to
# one of these, each of which failed there), and on 0.17.0 where a dev-profile run of the whole suite failed
# with the same assert or wrong value (cpu-rope-vision-empty-y-section: a dev run on 0.25.1 with 44 fails and its
# repro on 0.17.0 gave 0.20.2's -0.9674506187438965 for 0.4561; ggml:Vulkan0 passes the same case). Entries
# naming 0.20.2 alone were not checked elsewhere.




def _src0_rows_not_uniform(case: OpCase) -> bool:
    return not rows_uniformly_strided(case.inputs[0])








BUGS: list[KnownBug] = [
    # Python: strictly_packed (size-1 dims count) is no layout kind
    KnownBug(
        id="cpu-clamp-row-stride", devices="CPU", op="CLAMP", releases=("0.20.2", "0.17.0", "0.25.1"),
        outcomes=("fail", "crash", "error", "timeout"), applies=lambda c: not strictly_packed(c.inputs[0]),
        corrupts_process=True,
        reason="the kernel addresses row j at j·nb1: permuted or row-padded inputs come out wrong; with dim 0 "
               "permuted away it asserts nb0 == sizeof(float), and has been seen to corrupt the heap "
               "('double free or corruption'; a Python TypeError raised in the device process)",
        repro="CLAMP(type=f32,ne=[1,3,3,1],lay=perm[0,2,1,3],dst=f32,min=0.0,max=0.0,data=dense:0)"),
    # Python: rows not uniformly strided (row j at j·nb1) is no layout kind
    KnownBug(
        id="cpu-leaky-relu-row-stride", devices="CPU", op="LEAKY_RELU",
        releases=("0.20.2", "0.17.0", "0.25.1"), outcomes=("fail", "crash"),
        applies=_src0_rows_not_uniform,
        reason="the kernel addresses row j at j·nb1 (as CLAMP): permuted or row-padded inputs come out wrong",
        repro="LEAKY_RELU(type=f32,ne=[17,1,7,2],lay=perm[0,2,1,3]/pad[3,2,0,3],dst=f32,slope=0.10000000149011612,"
              "data=dense:13)"),
    # Python: rows not uniformly strided (row j at j·nb1) is no layout kind
    KnownBug(
        id="cpu-argsort-row-stride", devices="CPU", op="ARGSORT",
        releases=("0.20.2", "0.17.0", "0.25.1"), outcomes=("fail", "crash"),
        applies=_src0_rows_not_uniform,
        reason="the kernel addresses row j at j·nb1: a permuted source, or padding in dims 1–3, comes out "
               "silently wrong (supports_op says yes)",
        repro="ARGSORT(type=f32,ne=[25,7,7,1],lay=pad[2,1,0,2],dst=i32,order=desc,data=dense:5)"),
    # Python: strictly_packed (size-1 dims count) is no layout kind
    KnownBug(
        id="cpu-pool-2d-plane-gaps", devices="CPU", op="POOL_2D", releases=("0.20.2", "0.17.0", "0.25.1"),
        outcomes=("fail", "crash", "error", "timeout"), applies=lambda c: not strictly_packed(c.inputs[0]),
        corrupts_process=True,
        reason="the kernel walks source planes by nb2 until ggml_nbytes(src) and writes dst planes in step: gaps "
               "between planes or rows (padding in dims 1–3, a permute, even of size-1 dims: it steps by nb2) "
               "run it past dst (heap corruption: "
               "SIGABRT 'double free', SIGSEGV, a hang, later MemoryError) or give garbage",
        repro="POOL_2D(type=f32,ne=[1,2,2,2],lay=perm[0,2,1,3],dst=f32,op=0,k0=1,k1=1,s0=1,s1=1,p0=0.0,p1=0.0,"
              "data=dense:0)"),
]


# ---- PAD circular --------------------------------------------------------------------------------
def circular_pad_beyond_dim(case: OpCase) -> bool:
    """A left padding past a dim of 2 or more (C's % of a negative is negative; for a dim of 1 it is 0)."""
    return "circular" in case.form and any(lp > n > 1 for lp, n in zip(case.param("lp"), case.inputs[0].ne,
                                                                          strict=True))


BUGS += [
    # Python: compares each left padding with its dim (circular_pad_beyond_dim)
    KnownBug(
        id="cpu-pad-circular-wraps-once", devices="CPU", op="PAD",
        releases=("0.20.2", "0.25.1"), outcomes=("fail", "crash"),
        applies=circular_pad_beyond_dim,
        reason="ggml_wrap_around computes (i − lp + ne) % ne, which is negative once a left padding exceeds the "
               "dim: the kernel reads before the source (0 or stale values where the torus has source elements); "
               "ggml_pad_ext_circular accepts any padding",
        repro="PAD(type=f32,ne=[1,2,1,1],dst=f32,form=pad_ext_circular,lp=[0,3,0,0],rp=[0,0,0,0],data=dense:0)"),
]


# ---- UPSCALE antialias with align-corners ----------------------------------------------------------
def antialias_window_drops_a_pixel(case: OpCase) -> bool:
    """Some output of dim 0 or 1 loses the last pixel of its triangle filter: with align-corners ggml's
    window ends at trunc(x + support) in f32, before pixel ⌊x + support⌋ (which has a positive weight
    whenever x + support is not an integer), and before pixel x + support − 1 too where the f32 support
    1/f32(1/7) rounds just below 7."""
    from fractions import Fraction

    from golden.resample import ScaleMode, out_shape, sample_positions

    mode = ScaleMode.of(case)
    if not (mode.antialias and mode.align_corners):
        return False
    ne_in, ne_out = case.inputs[0].ne, out_shape(case)
    f32 = np.float32
    for d in (0, 1):
        n_in, n_out = ne_in[d], ne_out[d]
        if n_out > 1 and n_in > 1:
            inverse, scale = Fraction(n_in - 1, n_out - 1), f32(n_out - 1) / f32(n_in - 1)
        else:
            inverse, scale = Fraction(n_in, n_out), f32(n_out) / f32(n_in)
        support, support_f32 = max(Fraction(1), inverse), max(f32(1), f32(1) / scale)
        num, den = sample_positions(n_in, n_out, True)
        for i, n in enumerate(num.tolist()):
            needed_end = min(math.ceil(Fraction(n, den) + support), n_in)  # pixels < x + support weigh > 0
            ggml_end = min(int(f32(f32(i) / scale) + support_f32), n_in)
            if ggml_end < needed_end:
                return True
    return False


BUGS += [
    # Python: replays the kernel's f32 window arithmetic
    KnownBug(
        id="cpu-upscale-antialias-align-corners-window", devices="CPU", op="UPSCALE",
        releases=("0.20.2", "0.25.1", "0.17.0"),
        applies=antialias_window_drops_a_pixel,
        reason="the antialias kernel takes source pixels [trunc(x − support + po), trunc(x + support + po)) with "
               "the pixel offset po; with ALIGN_CORNERS po is 0 and the window ends one pixel early, dropping a "
               "pixel of positive weight (upsampling by 2 gives the floor pixel, i.e. nearest, not the triangle "
               "filter); PyTorch keeps the half-pixel window there (ggml-cuda has the same code)",
        repro="UPSCALE(type=f32,ne=[1,2,1,1],dst=f32,sf=2,mode=bilinear,align_corners=True,antialias=True,"
              "data=uniform:0)"),
]






def _fa_qkv_rows_strided(case: OpCase) -> bool:
    return not all(rows_unit_stride(t) for t in case.inputs[:3])


# stays here, before cpu-flash-attn-ext-f16-accumulator-under-prec-f32: both cover some cases (list order)
BUGS.append(KnownBug(
    id="cpu-flash-attn-ext-row-stride", devices="CPU", op="FLASH_ATTN_EXT",
    releases=("0.20.2", "0.25.1", "0.17.0"), outcomes=("crash",),
    applies=_fa_qkv_rows_strided,
    reason="ops.cpp asserts nbq0/nbk0/nbv0 == element size (rows contiguous): q, k or v with dim 0 permuted "
           "away aborts, although ggml_flash_attn_ext accepts any layout and supports_op says yes",
    repro="FLASH_ATTN_EXT(type0=f32,ne0=[64,1,1,1],type1=f16,ne1=[64,2,1,1],type2=f16,ne2=[64,2,1,1],"
          "lay2=perm[1,0,2,3],dst=f32,scale=0.125,max_bias=0.0,logit_softcap=0.0,prec=default,mask=False,"
          "sinks=False,data=dense:0)"))


def _fa_tiled_softcap_without_mask(case: OpCase) -> bool:
    """ggml's CPU takes its tiled path (n_q ≥ 64, f32 q, k and v both F16 or both F32, DV a multiple of the
    SIMD width: 8 floats in the AVX2 wheel) and the last KV tile of 64 is partial."""
    q, k, v = case.inputs[:3]
    tiled = q.ne[1] >= 64 and k.dtype == v.dtype and k.dtype in ("f16", "f32") and v.ne[0] % 8 == 0
    # a cap c ≥ 16 leaves each padded weight below e^-c relative to the row's largest (≤ 63·e^-16 ≈ 7e-6):
    # unseen against the allowance unless every logit of a row saturates at −c (measured: c = 30, 50 pass)
    visible_cap = 0.0 < abs(case.param("logit_softcap")) < 16.0
    return tiled and visible_cap and not case.param("mask") and k.ne[1] % 64 != 0


# Python: the tiled path's shape conditions and |logit_softcap| < 16
BUGS.append(KnownBug(
    id="cpu-flash-attn-ext-softcap-tile-padding", devices="CPU", op="FLASH_ATTN_EXT", releases=R0202,
    outcomes=("fail",), applies=_fa_tiled_softcap_without_mask,
    reason="the tiled kernel (ops.cpp, flash_attn_ext_tiled) sets the padded KV entries of a partial tile to −inf, "
           "then soft-caps them: c·tanh(−inf) = −c, a finite logit, so the padding joins the softmax (with stale V "
           "rows from the previous tile); a mask would add −inf back, so only mask-less cases: with n_kv = 1 the "
           "output is v/(1 + 63·e^(−c−ℓ)) instead of v (ci: up to 63× the allowance). Where the padded weight "
           "stays under the allowance (n_kv just below a multiple of 64, a dominating sink) a case passes",
    repro="FLASH_ATTN_EXT(type0=f32,ne0=[64,64,1,1],type1=f16,ne1=[64,1,1,1],type2=f16,ne2=[64,1,1,1],dst=f32,"
          "scale=0.125,max_bias=0.0,logit_softcap=1.0,prec=default,mask=False,sinks=False,data=dense:0)"))

def _fa_f16_v_under_prec_f32(case: OpCase) -> bool:
    """F16 V under GGML_PREC_F32 on the one-row path: the tiled path (n_q ≥ 64, K and V of one type, DV a
    multiple of 8) accumulates in f32."""
    q, k, v = case.inputs[:3]
    tiled = q.ne[1] >= 64 and k.dtype == v.dtype and v.ne[0] % 8 == 0
    return case.param("prec") == "f32" and v.dtype == "f16" and not tiled


# Python: the one-row path is the tiled path's negation
BUGS.append(KnownBug(
    id="cpu-flash-attn-ext-f16-accumulator-under-prec-f32", devices="CPU", op="FLASH_ATTN_EXT",
    # 0.25.1: the graph tier's llama_layer (FA node at n_q = 2..6, F16 K/V, causal mask) failed the f32
    # accumulator bound by 1.3-2.3x there on the device's own inputs, and passes this entry's bound
    releases=("0.17.0",) + R0202 + ("0.25.1",),
    outcomes=("fail",), applies=_fa_f16_v_under_prec_f32, tolerance=attention.F16_INTERMEDIATES_UNDER_PREC_F32,
    reason="a documented deviation: with F16 V the one-row kernel (ops.cpp, ggml_compute_forward_flash_attn_ext_f16_"
           "one_chunk) accumulates V·softmax in F16 (VKQ16, ggml_vec_mad_f16) whatever ggml_flash_attn_ext_set_prec "
           "asked; GGML_PREC_F32 allows an f32 accumulator only (2n·u·Σp|v|), so such cases are judged against the "
           "prec-default bound (2n(w+u)·Σp|v|) instead",
    repro="FLASH_ATTN_EXT(type0=f32,ne0=[64,1,1,1],type1=f16,ne1=[64,1000,1,1],type2=f16,ne2=[64,1000,1,1],dst=f32,"
          "scale=0.125,max_bias=0.0,logit_softcap=0.0,prec=f32,mask=False,sinks=False,data=wide:0)"))


def _either_rows_strided(case: OpCase) -> bool:
    return not (rows_unit_stride(case.inputs[0]) and rows_unit_stride(case.inputs[1]))


def _either_rows_not_uniform(case: OpCase) -> bool:
    return not _either_rows_strided(case) and not (
        rows_uniformly_strided(case.inputs[0]) and rows_uniformly_strided(case.inputs[1]))


BUGS += [
    # Python: rows not uniformly strided, yet unit-stride, of either input
    KnownBug(
        id="cpu-cross-entropy-rows-by-nb1", devices="CPU", op="CROSS_ENTROPY_LOSS",
        releases=("0.20.2", "0.25.1", "0.17.0"),
        outcomes=("fail", "crash"), applies=_either_rows_not_uniform,
        reason="the kernel addresses row j (over dims 1–3) at j·nb1: permuted rows or padding in dims 2–3 of "
               "either input read the wrong rows or the padding (NaN loss; it can read past the tensor)",
        repro="CROSS_ENTROPY_LOSS(type0=f32,ne0=[1,6,2,1],type1=f32,ne1=[1,6,2,1],lay1=pad[2,3,1,0],dst=f32,"
              "data=dense:85557)"),
]


def _vision_empty_first_section_wraps(case: OpCase) -> bool:
    sections = case.param("sections", None)
    return (case.param("mode") == 24 and sections is not None and sections[0] == 0
            and sum(sections) < case.param("n_dims"))


BUGS += [
    # Python: reads the sections list (first 0, sum below n_dims)
    KnownBug(
        id="cpu-rope-vision-empty-y-section", devices="CPU", op="ROPE",
        releases=("0.20.2", "0.25.1", "0.17.0"), outcomes=("fail",),
        applies=_vision_empty_first_section_wraps,
        reason="VISION restarts each section's θ at its first sector with an if-chain that tests sector == 0 for "
               "the y section first: with sections [0, x, 0, 0] the x section is never restarted when the "
               "sectors wrap (x < n_dims), so its exponent keeps growing with the pair index (ggml.h, ggml-cuda "
               "and ggml-cann restart it: [0123] per section)",
        repro="ROPE(type0=f32,ne0=[4,116,1,1],type1=i32,ne1=[4,1,1,1],type2=f32,ne2=[5,1,1,1],dst=f32,n_dims=2,"
              "mode=24,n_ctx_orig=8192,freq_base=1000000.0,freq_scale=0.25,ext_factor=0.015625,attn_factor=1.0,"
              "beta_fast=16.0,beta_slow=2.0,freq_factors=True,sections=[0,1,0,0],data=dense:1)"),
]


# ---- GLU and the reductions ----------------------------------------------------------------------
def _count_equal_rows_missed(case: OpCase) -> bool:
    """ops.cpp's count_equal maps flat row ir to (i01, i02, i03) with ne03 and ne02 where ne01·ne02 and
    ne01 belong: the rows it visits are not every row once unless ne02 == 1 and ne03 == 1, or ne01 == ne02
    with ne03 == 1 (then the formula happens to be right)."""
    ne1, ne2, ne3 = case.inputs[0].ne[1:]
    visited = set()
    for ir in range(ne1 * ne2 * ne3):
        i3 = ir // (ne2 * ne1)
        i2 = (ir - i3 * ne3) // ne1
        i1 = ir - i3 * ne3 - i2 * ne2
        visited.add((i1, i2, i3))
    return visited != {(i1, i2, i3) for i1 in range(ne1) for i2 in range(ne2) for i3 in range(ne3)}


BUGS += [
    # Python: replays the kernel's row-index formula
    KnownBug(
        id="cpu-count-equal-row-index", devices="CPU", op="COUNT_EQUAL",
        releases=("0.20.2", "0.25.1", "0.17.0"), outcomes=("fail", "crash"),
        applies=_count_equal_rows_missed,
        reason="ops.cpp computes i02 = (ir − i03·ne03)/ne01 and i01 = ir − i03·ne03 − i02·ne02 (ne03 and ne02 "
               "where ne02·ne01 and ne01 belong): with ne2 > 1 (unless ne1 == ne2) or ne3 > 1 it counts some "
               "rows twice, skips others and reads before the tensor",
        repro="COUNT_EQUAL(type0=i32,ne0=[3,2,3,1],type1=i32,ne1=[3,2,3,1],dst=i64,data=uniform:3)"),
]

# CONV_TRANSPOSE_1D, SSM_CONV: ggml.c asserts no layout for either op, the CPU kernels do


def _ssm_conv_asserted_layout(case: OpCase) -> bool:
    sx, c = case.inputs
    return (not rows_unit_stride(sx) or logical_nb(sx)[1] != sx.ne[0] * 4) or not rows_unit_stride(c)


def _ssm_conv_kernel_rows_padded(case: OpCase) -> bool:
    c = case.inputs[1]
    return not _ssm_conv_asserted_layout(case) and c.ne[1] > 1 and logical_nb(c)[1] != c.ne[0] * 4


BUGS += [
    # Python: sx's nb1 against ne0 even for one row, or c's dim 0, in one OR
    KnownBug(
        id="cpu-ssm-conv-asserted-layout", devices="CPU", op="SSM_CONV",
        releases=("0.20.2", "0.25.1", "0.17.0"), outcomes=("crash",),
        applies=_ssm_conv_asserted_layout,
        reason="ops.cpp asserts sx nb0 == sizeof(float) and nb1 == ne0·sizeof(float) (packed rows) and c nb0 == "
               "sizeof(float), although ggml_ssm_conv asserts only that sx is 3-d and c a matrix",
        repro="SSM_CONV(type0=f32,ne0=[4,2,1,1],lay0=pad[1,0,0,0],type1=f32,ne1=[4,2,1,1],dst=f32,data=dense:0)"),
    # Python: the negation of the asserted-layout predicate, and c's padded rows
    KnownBug(
        id="cpu-ssm-conv-kernel-ignores-nb1", devices="CPU", op="SSM_CONV",
        releases=("0.20.2", "0.25.1"), outcomes=("fail",),
        applies=_ssm_conv_kernel_rows_padded,
        reason="the kernel addresses c's row r at r·d_conv elements, ignoring nb1: a c with padded or permuted "
               "rows (dim 0 still unit-stride) gives other channels' or padding values",
        repro="SSM_CONV(type0=f32,ne0=[4,2,1,1],type1=f32,ne1=[4,2,1,1],lay1=pad[1,0,0,0],dst=f32,data=dense:0)"),
]


# Python: an I64 src0 AND (src0 OR src1 rows strided): when-tables do not nest
BUGS.append(KnownBug(
    id="cpu-concat-i64-row-stride", devices="CPU", op="CONCAT", releases=("0.25.1",), outcomes=("crash",),
    applies=lambda case: case.inputs[0].dtype == "i64" and not all(rows_unit_stride(t) for t in case.inputs[:2]),
    reason="0.25.1's CONCAT of I64 asserts ggml_is_contiguous_rows(src0) and (src1) (ops.cpp:1914/1915): a "
           "source with dim 0 permuted away aborts, although ggml_concat accepts it; 0.20.2 concatenates it right",
    repro="CONCAT(type0=i64,ne0=[14,5,5,1],lay0=perm[1,0,2,3],type1=i64,ne1=[14,5,5,1],dst=i64,dim=2,data=wide:693)"))


def _cpy_destination(case: OpCase) -> TensorSpec:
    """CPY's destination as the builder makes it (a padded, permuted view when the params say so)."""
    layout = Layout(perm=tuple(case.param("dst_perm", (0, 1, 2, 3))), pad=tuple(case.param("dst_pad", (0, 0, 0, 0))),
                    offset=case.param("dst_offset", 0))
    return TensorSpec(case.dst, tuple(case.param("dst_ne")), layout)


def dequantizing_cpy_into_unaligned_view(case: OpCase) -> bool:
    """A Q4_0/Q8_0 → F32 copy into a view with dim 0 permuted away, or into a non-contiguous view whose
    rows do not hold whole 32-element blocks (ggml-vulkan's dequantizing copy shares this defect)."""
    if case.inputs[0].dtype not in ("q4_0", "q8_0"):
        return False
    dst = _cpy_destination(case)
    return not rows_unit_stride(dst) or (dst.ne[0] % 32 != 0 and not ggml_contiguous(dst))


BUGS += [
    # Python: the destination view is built from the params (dst_ne, dst_pad)
    KnownBug(
        id="cpu-cpy-dequantize-strided-dst", devices="CPU", op="CPY", releases=("0.20.2", "0.17.0", "0.25.1"),
        outcomes=("crash",),
        applies=dequantizing_cpy_into_unaligned_view,
        reason="dup_from_q asserts the destination's nb0 == sizeof(float) and (ne0 % 32 == 0 or a contiguous "
               "destination): a Q4_0/Q8_0 → F32 copy into a view with dim 0 permuted away, or into a padded view "
               "whose rows do not hold whole blocks, aborts, although ggml_cpy and supports_op accept it (ci: every "
               "such case aborts, the others pass)",
        repro="CPY(type=q4_0,ne=[32,1,1,1],dst=f32,dst_ne=[1,1,1,32],dst_pad=[0,0,1,0],dst_offset=0,data=dense:0)"),
]


# The documented deviations' bounds by name, for expectation entries in TOML (``deviation = "<name>"``)
NAMED_BOUNDS: dict[str, Tolerance] = {
    "cpu_gelu_f16_table": unary.GELU_CPU_TABLE, "cpu_gelu_quick_f16_table": unary.GELU_QUICK_CPU_TABLE,
    "cpu_geglu_f16_table": glu.GEGLU_CPU_TABLE, "cpu_geglu_quick_f16_table": glu.GEGLU_QUICK_CPU_TABLE,
}

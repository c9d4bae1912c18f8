"""Known kernel bugs of ggml's CPU backend (``ggml:CPU``), per release; see :mod:`device.known_bugs`.

Each is a layout ggml's graph constructor accepts and ``supports_op`` claims, which the CPU kernel
then aborts on (a GGML_ASSERT on strides) or computes wrongly. Measured on ggml 0.20.2 (the
libggml-python wheel) with the ci and nightly profiles; the repro lines reproduce each alone.
"""

from __future__ import annotations

import dataclasses

from device.known_bugs import KnownBug
from golden import unary
from golden.case import OpCase
from golden.geometry import ggml_contiguous, logical_nb, rows_uniformly_strided, rows_unit_stride

R0202 = ("0.20.2",)


def _src0_rows_strided(case: OpCase) -> bool:
    return not rows_unit_stride(case.inputs[0])


def _src0_rows_not_uniform(case: OpCase) -> bool:
    return not rows_uniformly_strided(case.inputs[0])


def _src0_not_packed(case: OpCase) -> bool:
    return not ggml_contiguous(case.inputs[0])


def _src1_rows_strided(case: OpCase) -> bool:
    return not rows_unit_stride(case.inputs[1])


def _im2col_2d_rows_padded(case: OpCase) -> bool:
    data = case.inputs[1]
    return bool(case.param("is_2d")) and data.ne[1] > 1 and logical_nb(data)[1] != data.ne[0] * 4


BUGS: list[KnownBug] = [
    KnownBug(
        id="cpu-binary-src0-row-stride", devices="CPU", op=op, releases=R0202, outcomes=("crash",),
        applies=_src0_rows_strided,
        reason="binary-ops.cpp asserts nb00 == sizeof(src0_t): a src0 whose dim 0 is permuted away aborts "
               "(GGML_ASSERT), although ggml_" + op.lower() + " and supports_op accept it",
        repro=f"{op}(type0=f32,ne0=[4,2,3,1],lay0=perm[2,0,1,3],type1=f32,ne1=[4,2,3,1],dst=f32,data=uniform:1)")
    for op in ("ADD", "MUL", "DIV")
] + [
    KnownBug(
        id="cpu-sqr-row-stride", devices="CPU", op="SQR", releases=R0202, outcomes=("crash",),
        applies=_src0_rows_strided,
        reason="unary-ops.cpp asserts contiguous rows (nb00 == element size) although ggml_sqr accepts any layout",
        repro="SQR(type=f32,ne=[4,3,2,1],lay=perm[1,0,2,3],dst=f32,data=uniform:1)"),
    KnownBug(
        id="cpu-scale-not-contiguous", devices="CPU", op="SCALE", releases=R0202, outcomes=("crash",),
        applies=_src0_not_packed,
        reason="ops.cpp asserts ggml_is_contiguous(src0) although ggml_scale accepts padded rows "
               "(ggml_is_padded_1d)",
        repro="SCALE(type=f32,ne=[5,4,2,1],lay=pad[1,0,0,0],dst=f32,s=2.0,bias=0.0,data=uniform:1)"),
    KnownBug(
        id="cpu-clamp-row-stride", devices="CPU", op="CLAMP", releases=R0202,
        outcomes=("fail", "crash", "error", "timeout"), applies=_src0_rows_not_uniform, corrupts_process=True,
        reason="the kernel addresses row j at j·nb1: permuted or row-padded inputs come out wrong; with dim 0 "
               "permuted away it asserts nb0 == sizeof(float), and has been seen to corrupt the heap "
               "('double free or corruption'; a Python TypeError raised in the device process)",
        repro="CLAMP(type=f32,ne=[1,3,3,1],lay=perm[0,2,1,3],dst=f32,min=0.0,max=0.0,data=dense:0)"),
    KnownBug(
        id="cpu-leaky-relu-row-stride", devices="CPU", op="LEAKY_RELU", releases=R0202, outcomes=("fail", "crash"),
        applies=_src0_rows_not_uniform,
        reason="the kernel addresses row j at j·nb1 (as CLAMP): permuted or row-padded inputs come out wrong",
        repro="LEAKY_RELU(type=f32,ne=[17,1,7,2],lay=perm[0,2,1,3]/pad[3,2,0,3],dst=f32,slope=0.10000000149011612,"
              "data=dense:13)"),
    KnownBug(
        id="cpu-repeat-row-stride", devices="CPU", op="REPEAT", releases=R0202, outcomes=("crash",),
        applies=_src0_rows_strided,
        reason="ops.cpp asserts nb00 == element size: a source with dim 0 permuted away aborts",
        repro="REPEAT(type=f32,ne=[4,4,4,1],lay=perm[1,2,0,3],dst=f32,ne=[16,4,4,1],data=wide:1)"),
    KnownBug(
        id="cpu-get-rows-row-stride", devices="CPU", op="GET_ROWS", releases=R0202, outcomes=("fail",),
        applies=_src0_rows_strided,
        reason="rows are copied as contiguous runs of ne0 elements: a source with dim 0 permuted away gives "
               "other elements (supports_op says yes)",
        repro="GET_ROWS(type0=f32,ne0=[3,6,3,1],lay0=perm[1,0,2,3],type1=i32,ne1=[1,3,1,1],dst=f32,data=dense:1)"),
    KnownBug(
        id="cpu-acc-src1-row-stride", devices="CPU", op="ACC", releases=R0202, outcomes=("crash",),
        applies=_src1_rows_strided,
        reason="ops.cpp asserts nb10 == sizeof(float): a b whose dim 0 is permuted away aborts",
        repro="ACC(type0=f32,ne0=[59,22,1,1],type1=f32,ne1=[21,2,1,3],lay1=perm[1,2,0,3],dst=f32,nb1=864,nb2=1732,"
              "nb3=1740,offset=0,data=dense:4209)"),
    KnownBug(
        id="cpu-argsort-row-stride", devices="CPU", op="ARGSORT", releases=R0202, outcomes=("fail", "crash"),
        applies=_src0_rows_not_uniform,
        reason="the kernel addresses row j at j·nb1: a permuted source, or padding in dims 1–3, comes out "
               "silently wrong (supports_op says yes)",
        repro="ARGSORT(type=f32,ne=[25,7,7,1],lay=pad[2,1,0,2],dst=i32,order=desc,data=dense:5)"),
    KnownBug(
        id="cpu-sum-rows-row-stride", devices="CPU", op="SUM_ROWS", releases=R0202, outcomes=("crash",),
        applies=_src0_rows_strided,
        reason="ops.cpp asserts src0->nb[0] == sizeof(float): a source with dim 0 permuted away aborts",
        repro="SUM_ROWS(type=f32,ne=[78,2,2,3],lay=perm[1,0,2,3],dst=f32,data=uniform:916964)"),
    KnownBug(
        id="cpu-diag-mask-inf-not-contiguous", devices="CPU", op="DIAG_MASK_INF", releases=R0202,
        outcomes=("crash",), applies=_src0_not_packed,
        reason="ops.cpp asserts contiguous src0 and dst (the out-of-place path memcpy's the source), although "
               "ggml_diag_mask_inf accepts any layout",
        repro="DIAG_MASK_INF(type=f32,ne=[31,6,3,2],lay=perm[2,0,1,3],dst=f32,n_past=9,data=uniform:421)"),
    KnownBug(
        id="cpu-rope-row-stride", devices="CPU", op="ROPE", releases=R0202, outcomes=("crash",),
        applies=_src0_rows_strided,
        reason="ops.cpp asserts nb0 == nb00 (dst rows are contiguous): a source with dim 0 permuted away aborts",
        repro="ROPE(type0=f32,ne0=[16,3,1,1],lay0=perm[1,2,0,3],type1=i32,ne1=[1,1,1,1],dst=f32,n_dims=4,mode=0,"
              "n_ctx_orig=0,freq_base=10000.0,freq_scale=1.0,ext_factor=0.0,attn_factor=1.0,beta_fast=0.0,"
              "beta_slow=0.0,freq_factors=False,data=uniform:1)"),
    KnownBug(
        id="cpu-im2col-data-row-stride", devices="CPU", op="IM2COL", releases=R0202, outcomes=("crash",),
        applies=_src1_rows_strided,
        reason="ops.cpp asserts nb10 == sizeof(float): data with dim 0 permuted away aborts",
        repro="IM2COL(type0=f32,ne0=[4,1,1,2],type1=f32,ne1=[16,3,1,1],lay1=perm[1,2,0,3],dst=f32,s0=1,s1=1,p0=0,"
              "p1=0,d0=1,d1=1,is_2d=True,data=dense:0)"),
    KnownBug(
        id="cpu-im2col-2d-ignores-nb1", devices="CPU", op="IM2COL", releases=R0202, outcomes=("fail",),
        applies=lambda c: rows_unit_stride(c.inputs[1]) and _im2col_2d_rows_padded(c),
        reason="the 2-D kernel addresses data row ih of a channel at ih·IW elements, ignoring nb1: row-padded or "
               "permuted data comes out wrong (NaN from the padding bytes; NMSE 2.0 for perm 0,2,1,3)",
        repro="IM2COL(type0=f32,ne0=[4,4,1,2],type1=f32,ne1=[16,3,1,1],lay1=pad[3,3,1,0],dst=f32,s0=1,s1=1,p0=2,"
              "p1=2,d0=2,d1=2,is_2d=True,data=special:1473934)"),
    KnownBug(
        id="cpu-pool-2d-plane-gaps", devices="CPU", op="POOL_2D", releases=R0202,
        outcomes=("fail", "crash", "error", "timeout"), applies=_src0_rows_not_uniform, corrupts_process=True,
        reason="the kernel walks source planes by nb2 until ggml_nbytes(src) and writes dst planes in step: gaps "
               "between planes or rows (padding in dims 1–3, a permute) run it past dst (heap corruption: "
               "SIGABRT 'double free', SIGSEGV, a hang, later MemoryError) or give garbage",
        repro="POOL_2D(type=f32,ne=[1,2,2,2],lay=perm[0,2,1,3],dst=f32,op=0,k0=1,k1=1,s0=1,s1=1,p0=0.0,p1=0.0,"
              "data=dense:0)"),
    KnownBug(
        id="cpu-rms-norm-row-stride", devices="CPU", op="RMS_NORM", releases=R0202, outcomes=("crash",),
        applies=_src0_rows_strided,
        reason="ops.cpp asserts src0->nb[0] == sizeof(float): a source with dim 0 permuted away aborts (NORM has "
               "a strided path; RMS_NORM has none), although ggml_rms_norm and supports_op accept it",
        repro="RMS_NORM(type=f32,ne=[1,2,1,1],lay=perm[1,0,2,3],dst=f32,eps=9.999999747378752e-06,data=dense:0)"),
    KnownBug(
        id="cpu-group-norm-row-stride", devices="CPU", op="GROUP_NORM", releases=R0202, outcomes=("crash",),
        applies=_src0_rows_strided,
        reason="ops.cpp asserts src0->nb[0] == sizeof(float): a source with dim 0 permuted away aborts",
        repro="GROUP_NORM(type=f32,ne=[1,2,1,1],lay=perm[1,0,2,3],dst=f32,n_groups=1,eps=9.999999747378752e-06,"
              "data=dense:0)"),
    KnownBug(
        id="cpu-timestep-embedding-row-stride", devices="CPU", op="TIMESTEP_EMBEDDING", releases=R0202,
        outcomes=("crash",), applies=_src0_rows_strided,
        reason="ops.cpp asserts src0->nb[0] == sizeof(float): timesteps whose dim 0 is permuted away abort",
        repro="TIMESTEP_EMBEDDING(type=f32,ne=[3,2,1,1],lay=perm[1,0,2,3],dst=f32,dim=8,max_period=10000,"
              "data=uniform:1)"),
    KnownBug(
        id="cpu-gelu-f16-table", devices="CPU", op="GELU", outcomes=("fail",),
        applies=lambda c: c.inputs[0].dtype == "f32", tolerance=unary.GELU_CPU_TABLE,
        reason="GELU of F32 goes through ggml's F16 lookup table (GGML_GELU_FP16): the input is rounded to "
               "F16 and the result is the table's F16 value, up to ~2^-11 relative off; judged against that "
               "documented shortcut instead of the f32 bound",
        repro="GELU(type=f32,ne=[64,3,1,1],dst=f32,data=dense:5)"),
    KnownBug(
        id="cpu-gelu-quick-f16-table", devices="CPU", op="GELU_QUICK", outcomes=("fail",),
        applies=lambda c: c.inputs[0].dtype == "f32", tolerance=unary.GELU_QUICK_CPU_TABLE,
        reason="GELU_QUICK of F32 goes through ggml's F16 lookup table: judged against that documented "
               "shortcut instead of the f32 bound",
        repro="GELU_QUICK(type=f32,ne=[64,3,1,1],dst=f32,data=dense:5)"),
]

# issue 13: the math ops with their own GGML_OP (SQRT, SIN, COS, LOG: any layout in ggml.c) share
# unary-ops.cpp's kernel with SQR, and SUB shares binary-ops.cpp with ADD/MUL/DIV
BUGS += [
    KnownBug(
        id=f"cpu-{op.lower()}-row-stride", devices="CPU", op=op, releases=R0202, outcomes=("crash",),
        applies=_src0_rows_strided,
        reason="unary-ops.cpp:114 asserts ggml_is_contiguous_rows(src0) (then nb00 == element size): a source "
               f"with dim 0 permuted away aborts, although ggml_{op.lower()} accepts any layout (ci: every such "
               "case aborts, every other layout passes)",
        repro=f"{op}(type=f32,ne=[4,3,2,1],lay=perm[1,0,2,3],dst=f32,data=uniform:1)")
    for op in ("SQRT", "SIN", "COS", "LOG")
] + [
    KnownBug(
        id="cpu-binary-src0-row-stride-sub", devices="CPU", op="SUB", releases=R0202, outcomes=("crash",),
        applies=_src0_rows_strided,
        reason="binary-ops.cpp:59 asserts nb00 == sizeof(src0_t) (as for ADD, MUL, DIV): a src0 whose dim 0 is "
               "permuted away aborts, although ggml_sub and supports_op accept it",
        repro="SUB(type0=f32,ne0=[4,2,3,1],lay0=perm[2,0,1,3],type1=f32,ne1=[4,2,3,1],dst=f32,data=uniform:1)"),
]
BUGS += [
    KnownBug(
        id="cpu-gelu-erf-bf16", devices="CPU", op="GELU_ERF", releases=R0202, outcomes=("crash",),
        applies=lambda c: c.inputs[0].dtype == "bf16",
        reason="ops.cpp's ggml_compute_forward_gelu_erf handles F32 and F16 sources only and GGML_ABORTs on BF16, "
               "although supports_op claims every type (ggml-cann claims BF16 too; the other GGML_OP_UNARY kernels "
               "of unary-ops.cpp take BF16)",
        repro="GELU_ERF(type=bf16,ne=[4,3,2,1],dst=bf16,data=uniform:1)"),
]

# Other releases (issue 11): ggml 0.17.0 (libggml-python 0.17.0.post1, scripts/setup-ggml-release.sh)
# and 0.25.1 (the CPU backend of node-llama-cpp's build, scripts/setup-vulkan.sh) have every bug
# above: the ci profile on each gave no failure outside this list and reproduced each entry, and the
# three it did not draw (RMS_NORM, GROUP_NORM, TIMESTEP_EMBEDDING row strides) crash from their repro
# lines there too. No bug specific to either release was found.
SAME_KERNELS_RELEASES = ("0.17.0", "0.25.1")
BUGS = [dataclasses.replace(bug, releases=bug.releases + SAME_KERNELS_RELEASES) if bug.releases == R0202 else bug
        for bug in BUGS]

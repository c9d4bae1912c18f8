"""Known defects of ggml's Vulkan backend (``ggml:Vulkan*``), per release; see :mod:`device.known_bugs`.

Measured on ggml 0.25.1 (node-llama-cpp's ``@node-llama-cpp/linux-x64-vulkan@3.22.1`` build) on
Mesa 22.3 lavapipe (``scripts/setup-vulkan.sh``), ci profile over the whole suite; each repro line
reproduces its bug alone, and the same case passes on ggml:CPU of the same library folder
(docs/findings-vulkan.md has the evidence per cluster). Clusters judged to be error models too
strict for a legitimate implementation (f16 accumulation in MUL_MAT, one-pass NORM variance,
Vulkan's exp/division precision) are not here: they are model proposals in the findings.
"""

from __future__ import annotations

from collections.abc import Callable

from device.ggml.known_bugs_cpu import dequantizing_cpy_into_unaligned_view
from device.known_bugs import KnownBug
from golden.case import OpCase
from golden.geometry import rows_unit_stride, storage_of

R0251 = ("0.25.1",)
# lavapipe's minStorageBufferOffsetAlignment: ggml-vulkan binds a view at its offset rounded down to
# this and, in ops without misalignment support, asserts the remainder is 0 (other drivers: 4..256)
STORAGE_OFFSET_ALIGNMENT = 16


def _misaligned(index: int, alignment: int = STORAGE_OFFSET_ALIGNMENT) -> Callable[[OpCase], bool]:
    def applies(case: OpCase) -> bool:
        return len(case.inputs) > index and storage_of(case.inputs[index]).offset_bytes % alignment != 0

    return applies


def _src0_rows_strided(case: OpCase) -> bool:
    return case.inputs[0].ne[0] > 1 and not rows_unit_stride(case.inputs[0])


def _quantized_src_at_offset(case: OpCase) -> bool:
    src = case.inputs[0]
    return src.dtype in ("q4_0", "q8_0") and storage_of(src).offset_bytes % STORAGE_OFFSET_ALIGNMENT != 0


def _groups_uneven(case: OpCase) -> bool:
    """The last non-empty group is short: ne2 is not a multiple of ceil(ne2 / n_groups). (More groups
    than channels also failed, but only inside a run, never alone: not matched here.)"""
    channels, groups = case.inputs[0].ne[2], int(case.param("n_groups"))
    return channels % -(-channels // groups) != 0


def _src1_planes_gapped(case: OpCase) -> bool:
    """An unpermuted src1 padded in dim 1: a gap between its dim-2 planes (nb12 > ne11·nb11)."""
    src1 = case.inputs[1]
    return src1.layout.perm == (0, 1, 2, 3) and src1.layout.pad[1] > 0 and src1.ne[2] * src1.ne[3] > 1


def _window_before_the_input(case: OpCase) -> bool:
    """Some window ends before the input starts: padding (as int) larger than the kernel."""
    p = case.params_dict
    return int(p["p0"]) > p["k0"] or int(p["p1"]) > p["k1"]


_ABORT = ("ggml-vulkan binds the view at its offset rounded down to minStorageBufferOffsetAlignment "
          "(16 bytes on lavapipe) and this op's shader takes no misalignment: the worker aborts on "
          "GGML_ASSERT(get_misalign_bytes(ctx, src) == 0) (ggml-vulkan-push-constants.h) or "
          "GGML_ASSERT(allow_misalign || misalign_bytes == 0) (ggml-vulkan.cpp) for a legal view at an "
          "element-aligned offset; offsets that are multiples of 16 bytes pass; ggml:CPU passes")

BUGS: list[KnownBug] = [
    KnownBug(
        id="vulkan-" + op.lower().replace("_", "-") + "-misaligned-view", devices="Vulkan*", op=op,
        releases=R0251, outcomes=("crash",), applies=_misaligned(index), reason=_ABORT, repro=repro)
    for op, index, repro in (
        ("POOL_2D", 0, "POOL_2D(type=f32,ne=[3,1,1,1],lay=offs[3],dst=f32,op=0,k0=1,k1=1,s0=1,s1=1,p0=0.0,"
                       "p1=0.0,data=dense:0)"),
        ("TIMESTEP_EMBEDDING", 0, "TIMESTEP_EMBEDDING(type=f32,ne=[1,1,1,1],lay=offs[3],dst=f32,dim=1,"
                                  "max_period=10000,data=dense:0)"),
        ("ARGSORT", 0, "ARGSORT(type=f32,ne=[1,3,3,1],lay=offs[3],dst=i32,order=asc,data=dense:0)"),
        ("IM2COL", 1, "IM2COL(type0=f32,ne0=[1,1,2,1],type1=f32,ne1=[2,1,1,1],lay1=offs[2],dst=f32,s0=2,s1=0,"
                      "p0=0,p1=0,d0=2,d1=0,is_2d=False,data=dense:3)"),
    )
] + [
    KnownBug(
        id="vulkan-mul-mat-f16-misaligned-view", devices="Vulkan*", op="MUL_MAT", releases=R0251,
        outcomes=("crash",),
        applies=lambda case: case.inputs[0].dtype == "f16" and _misaligned(0, 4)(case),
        reason=_ABORT.replace("16 bytes on lavapipe", "an F16 src0 at an odd element offset is not even "
                              "4-byte aligned"),
        repro="MUL_MAT(type0=f16,ne0=[2276,1,2,2],lay0=pad[3,1,3,0]/offs[1],type1=f16,ne1=[2276,1,4,2],"
              "lay1=perm[0,2,1,3],dst=f32,data=wide:86160)"),
    KnownBug(
        id="vulkan-mul-mat-src1-plane-gap", devices="Vulkan*", op="MUL_MAT", releases=R0251,
        applies=_src1_planes_gapped,
        reason="src1 whose dim-2 planes are not packed (nb12 > ne11·nb11) is read as if they were: the "
               "padding between planes (NaN bytes here) comes out as NaN or wrong sums; also with "
               "GGML_VK_DISABLE_F16=1; ggml:CPU passes",
        repro="MUL_MAT(type0=f32,ne0=[8,3,2,1],type1=f32,ne1=[8,4,2,1],lay1=pad[0,1,0,0],dst=f32,data=dense:4)"),
    KnownBug(
        id="vulkan-get-rows-row-stride", devices="Vulkan*", op="GET_ROWS", releases=R0251,
        applies=_src0_rows_strided,
        reason="rows are gathered as contiguous runs of ne0 elements: a source with dim 0 permuted away "
               "gives other elements (supports_op says yes); ggml's CPU has the same defect "
               "(cpu-get-rows-row-stride)",
        repro="GET_ROWS(type0=f32,ne0=[3,6,1,1],lay0=perm[1,0,2,3],type1=i32,ne1=[1,1,1,1],dst=f32,data=dense:0)"),
    KnownBug(
        id="vulkan-rms-norm-row-stride", devices="Vulkan*", op="RMS_NORM", releases=R0251,
        applies=_src0_rows_strided,
        reason="a source with dim 0 permuted away (nb0 != 4) is read as if its rows were contiguous: every "
               "output is wrong (padded rows, permuted planes and offsets pass); supports_op says yes; "
               "ggml's CPU aborts on the same views (cpu-rms-norm-row-stride)",
        repro="RMS_NORM(type=f32,ne=[4,3,2,1],lay=perm[1,0,2,3],dst=f32,eps=9.999999747378752e-06,data=dense:0)"),
    KnownBug(
        id="vulkan-cpy-dequantize-strided-dst", devices="Vulkan*", op="CPY", releases=R0251,
        applies=dequantizing_cpy_into_unaligned_view,
        reason="a Q4_0/Q8_0 → F32 copy into a view with dim 0 permuted away, or into a non-contiguous view "
               "whose rows do not hold whole 32-element blocks, writes values at the wrong places (|Δ| up to "
               "14 on dense data); contiguous, padded-with-whole-blocks and plane-permuted views pass; the "
               "same views abort ggml's CPU (cpu-cpy-dequantize-strided-dst)",
        repro="CPY(type=q4_0,ne=[32,2,1,1],dst=f32,dst_ne=[16,4,1,1],dst_pad=[1,0,0,0],dst_offset=0,"
              "data=dense:0)"),
    KnownBug(
        id="vulkan-group-norm-uneven-groups", devices="Vulkan*", op="GROUP_NORM", releases=R0251,
        applies=_groups_uneven, corrupts_process=True,
        reason="groups are fixed blocks of ceil(ne2/n_groups)·ne0·ne1 elements (group_norm.comp), so a "
               "short last group runs past its channels into the next sample or past the tensor, where "
               "ggml's CPU clips it at ne2: |Δ| up to 0.87 at eps 0.5; in the last sample it writes past "
               "the buffer (lavapipe's device memory is host heap), so the output may be right while the "
               "process is corrupted: a later case died in malloc (ci, SOFT_MAX after GROUP_NORM "
               "ne=[19,16,31,1] n_groups=12)",
        repro="GROUP_NORM(type=f32,ne=[1,4,7,2],dst=f32,n_groups=6,eps=0.5,data=wide:21807)"),
    KnownBug(
        id="vulkan-pool-2d-window-before-input", devices="Vulkan*", op="POOL_2D", releases=R0251,
        applies=_window_before_the_input,
        reason="a window that ends before the input (padding > kernel) should give −FLT_MAX (MAX) or 0 "
               "(AVG) as on ggml's CPU; pool2d.comp stores its end, start + k < 0, in an unsigned bound and "
               "reads input values instead (41.09 for −FLT_MAX); padding = kernel is right",
        repro="POOL_2D(type=f32,ne=[1,1,1,1],dst=f32,op=0,k0=1,k1=1,s0=1,s1=1,p0=0.0,p1=2.0,data=wide:0)"),
] + [
    KnownBug(
        id=f"vulkan-{op.lower()}-quantized-view-offset", devices="Vulkan*", op=op, releases=R0251,
        applies=_quantized_src_at_offset,
        reason="a copy of a Q4_0/Q8_0 view at a block offset that is not a multiple of 16 bytes starts at "
               "the aligned-down address: a same-type copy is not byte-exact (every byte differs), a "
               "dequantizing one gives NaN or other blocks' values; offsets of 8 blocks (144 or 272 bytes) "
               "pass; ggml:CPU copies it exactly",
        repro=f"{op}(type={q},ne=[32,1,1,1],lay=offs[{n}],dst={dst}{extra},data={data})")
    for op, q, n, dst, extra, data in (
        ("DUP", "q4_0", 64, "q4_0", "", "dense:0"), ("CONT", "q8_0", 32, "q8_0", "", "wide:1"),
        ("CPY", "q4_0", 64, "f32", ",dst_ne=[32,1,1,1],dst_pad=[0,0,0,0],dst_offset=0", "dense:0"))
]

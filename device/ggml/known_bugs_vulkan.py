"""Known defects of ggml's Vulkan backend (``ggml:Vulkan*``), per release; see :mod:`device.known_bugs`.

The entries that the TOML vocabulary (:mod:`device.expectation_file`) can say are in
``known_bugs_vulkan.toml``; this module keeps those that need Python predicates, and the bounds of the
documented deviations (``NAMED_BOUNDS``, named by the TOML entries).

Measured on ggml 0.25.1 (node-llama-cpp's ``@node-llama-cpp/linux-x64-vulkan@3.22.1`` build) on
Mesa 22.3 lavapipe (``scripts/setup-vulkan.sh``), ci profile over the whole suite; each repro line
reproduces its bug alone, and the same case passes on ggml:CPU of the same library folder
(docs/findings-vulkan.md has the evidence per cluster). Clusters judged to be error models too
strict for a legitimate implementation were fixed in the catalogue's rows instead (one-pass NORM
variance, CLAMP's undefined cases, SCALE+bias without FMA, MUL_MAT's F16 intermediates at ggml's
default precision). The unary shaders' exp-based formulas are here as documented deviations: each
carries a bound derived from the precision Vulkan states for its builtins, and the backend's cases
are judged against that bound (every other device keeps the catalogue's).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from device.expectation_file import LAYOUT_KINDS
from device.ggml.known_bugs_cpu import (
    antialias_window_drops_a_pixel,
    circular_pad_beyond_dim,
    dequantizing_cpy_into_unaligned_view,
)
from device.known_bug import KnownBug
from golden import catalogue, dtypes, glu
from golden.case import OpCase, TensorSpec
from golden.geometry import ggml_contiguous, logical_nb, rows_uniformly_strided, rows_unit_stride, storage_of
from golden.graphs.case import GraphCase
from golden.matmul import abs_dot, routed_pairs
from golden.tolerance import F16_EPS, F32_EPS, ErrorModel, Tolerance, finite_abs

R0251 = ("0.25.1",)
# lavapipe's minStorageBufferOffsetAlignment: ggml-vulkan binds a view at its offset rounded down to
# this and, in ops without misalignment support, asserts the remainder is 0 (other drivers: 4..256)
STORAGE_OFFSET_ALIGNMENT = 16


def _misaligned(index: int, alignment: int = STORAGE_OFFSET_ALIGNMENT) -> Callable[[OpCase], bool]:
    def applies(case: OpCase) -> bool:
        return len(case.inputs) > index and storage_of(case.inputs[index]).offset_bytes % alignment != 0

    return applies






def _groups_uneven(case: OpCase) -> bool:
    """The last non-empty group is short: ne2 is not a multiple of ceil(ne2 / n_groups). (More groups
    than channels also failed, but only inside a run, never alone: not matched here.)"""
    channels, groups = case.inputs[0].ne[2], int(case.param("n_groups"))
    return channels % -(-channels // groups) != 0


def _src1_planes_gapped(case: OpCase) -> bool:
    """An src1 that ggml_vk_dim01_contiguous accepts (packed rows, and ne13 = 1 or nb13 = nb12·ne12), so
    it is read in place with a batch stride of ne10·ne11 elements, but whose planes are not that far
    apart (nb12 != ne11·nb11): permuted or not. Other strided src1 are copied to a packed buffer first."""
    src1 = case.inputs[1]
    ne, nb = src1.ne, logical_nb(src1)
    read_in_place = (rows_unit_stride(src1) and nb[1] == dtypes.row_size(src1.dtype, ne[0])
                     and (ne[3] == 1 or nb[3] == nb[2] * ne[2]))
    return read_in_place and ne[2] * ne[3] > 1 and nb[2] != ne[1] * nb[1]


def _planes_gapped(spec: TensorSpec) -> bool:
    """Rows packed within each plane, but planes (dims 2-3) that do not follow one another: row j over
    dims 1-3 is not at j·nb1."""
    if not rows_unit_stride(spec):
        return False
    packed_rows = spec.ne[1] == 1 or logical_nb(spec)[1] == dtypes.row_size(spec.dtype, spec.ne[0])
    return packed_rows and not rows_uniformly_strided(spec)


def _src0_planes_gapped(case: OpCase) -> bool:
    """An src0 with gapped planes; F16 weights only with their planes also permuted (unpermuted gapped F16
    planes take a path that reads them right)."""
    src0 = case.inputs[0]
    return _planes_gapped(src0) and (src0.dtype != "f16" or _permuted(src0))


def _permuted(spec: TensorSpec) -> bool:
    """``ggml_is_permuted``: some stride out of ggml's order."""
    nb = logical_nb(spec)
    return nb[0] > nb[1] or nb[1] > nb[2] or nb[2] > nb[3]


def _mul_mat_vec_path(case: OpCase) -> bool:
    """ggml_vk_mul_mat takes a matrix-vector shader: one src1 column, or up to 8 in a single plane."""
    src1 = case.inputs[1]
    return src1.ne[1] == 1 or (src1.ne[1] <= 8 and src1.ne[2] * src1.ne[3] == 1)


def _f16_weights_vec_shader(case: OpCase) -> bool:
    """ggml_vk_mul_mat's matrix-vector shaders for permuted (p021) or non-contiguous (nc) F16 weights:
    they index src1 from its misaligned start, and take only an F32 src1."""
    src0, src1 = case.inputs[:2]
    if src0.dtype != "f16" or src1.ne[1] != 1:
        return False
    nb0, nb1 = logical_nb(src0), logical_nb(src1)
    p021 = (_permuted(src0) and _permuted(src1) and src0.ne[3] == 1 and src1.ne[3] == 1
            and nb0[0] <= nb0[2] <= nb0[1] <= nb0[3] and nb1[0] <= nb1[2] <= nb1[1] <= nb1[3])
    nc = not ggml_contiguous(src0) and not _permuted(src0) and not _permuted(src1)
    return p021 or nc


def _mul_mat_vec_misaligned(case: OpCase) -> bool:
    if not _mul_mat_vec_path(case):
        return False
    return _misaligned(0)(case) or (_misaligned(1)(case) and not _f16_weights_vec_shader(case))


def _mul_mat_misaligned_matrix_path(case: OpCase) -> bool:
    return (not _mul_mat_vec_path(case) and not _src1_planes_gapped(case)
            and (_misaligned(0)(case) or _misaligned(1)(case)))


def _storage_dense(spec: TensorSpec) -> bool:
    """The elements fill one packed block of storage (in some order): span = nelements · element size."""
    nb = logical_nb(spec)
    span = sum((n - 1) * stride for n, stride in zip(spec.ne, nb, strict=True)) + dtypes.type_size(spec.dtype)
    return span == int(np.prod(spec.ne)) * dtypes.type_size(spec.dtype)


def group_norm_groups_uneven(case: OpCase) -> bool:
    """GROUP_NORM's last group is short (``vulkan-group-norm-uneven-groups``), for TOML entries."""
    return _groups_uneven(case)


def group_norm_workgroups_past_grid(case: OpCase) -> bool:
    """GROUP_NORM launches one workgroup per group of every sample, n_groups · ne3 in dimension x
    (``vulkan-group-norm-groups-past-grid``), past lavapipe's maxComputeWorkGroupCount[0] of 65,535."""
    groups = int(case.params_dict.get("n_groups", 1))
    return groups * case.inputs[0].ne[3] > 65535


def rope_src0_misaligned(case: GraphCase) -> bool:
    """A graph with a ROPE node whose rotated input is a view at a byte offset not a multiple of lavapipe's
    binding alignment (``vulkan-b8121-rope-misaligned-view``: b8121's rope shaders take no offset)."""
    return any(_misaligned(0)(case.node_case(node)) for node in case.graph.nodes if node.op == "ROPE")


def topk_moe_sigmoid_bias_norm_routed(case: GraphCase) -> bool:
    """topk_moe with sigmoid gating, an expert bias and normalised weights behind a router MUL_MAT
    (``vulkan-b8121-topk-moe-fused-output-over-logits``): the logits are an intermediate, so ggml's graph
    allocator may give the fused span's outputs the logits' memory, dead after GET_ROWS in the unfused graph."""
    if case.pattern != "topk_moe":
        return False
    params = case.params_dict
    return (params.get("gating") == "sigmoid" and params.get("bias") is True and params.get("norm") is True
            and params.get("router") == "mul_mat")


def topk_moe_softmax_weight(case: GraphCase) -> bool:
    """topk_moe selecting on the raw logits and soft-maxing the k chosen (``gating=softmax_weight``:
    ``vulkan-b8121-topk-moe-softmax-weight-fusion-heap-corruption``)."""
    return case.pattern == "topk_moe" and case.params_dict.get("gating") == "softmax_weight"


def sum_source_not_packed(case: OpCase) -> bool:
    """SUM's source does not fill one packed block (``vulkan-sum-reads-storage-as-packed``), for TOML entries."""
    return not _storage_dense(case.inputs[0])


def flash_attn_q_stride_misaligned(case: OpCase) -> bool:
    """q steps to a second row, head or sequence by a stride that is not a multiple of 16 bytes
    (``vulkan-flash-attn-ext-q-stride-misaligned``: 4, 8 and 12 bytes of row padding fail, 16 and 32
    pass, as does a single row and head)."""
    q = case.inputs[0]
    nb = logical_nb(q)
    return any(nb[dim] % STORAGE_OFFSET_ALIGNMENT != 0 for dim in (1, 2, 3) if q.ne[dim] > 1)


def flash_attn_kv_rows_padded(case: OpCase) -> bool:
    """K, or V, has padding between its rows (``vulkan-flash-attn-ext-kv-rows-padded``). V as a view
    of K's allocation (DeepSeek's MLA, ``Layout.alias``) has K's own values between its rows, not
    padding, and passes (docs/findings-vulkan.md): such a V does not count."""
    rows_gapped = LAYOUT_KINDS["rows_gapped"]
    k, v = case.inputs[1], case.inputs[2]
    return rows_gapped(k) or (v.layout.alias is None and rows_gapped(v))


def flash_attn_grouped_query_rows(case: OpCase) -> bool:
    """ggml-vulkan's grouped-query form of FLASH_ATTN_EXT (``vulkan-flash-attn-ext-f16-kv-masked-row``):
    q heads a multiple (above 1) of K's, K and V with the same head count, and one mask shared by all
    heads (mask ne2 = 1); the query heads that share a K head then become rows of one workgroup."""
    if not case.param("mask"):
        return False
    q, k, v, mask = case.inputs[:4]
    return q.ne[2] > k.ne[2] and q.ne[2] % k.ne[2] == 0 and k.ne[2] == v.ne[2] and mask.ne[2] == 1


def _window_before_the_input(case: OpCase) -> bool:
    """Some window ends before the input starts: padding (as int) larger than the kernel."""
    p = case.params_dict
    return int(p["p0"]) > p["k0"] or int(p["p1"]) > p["k1"]


# ---- the unary shaders' precision (unary.comp) -------------------------------------------------------
# Vulkan states the precision of its SPIR-V builtins ("Precision and Operation of SPIR-V Instructions"):
# exp(x) within (3 + 2|x|) ulp, x/y within 2.5 ulp; +, −, · correctly rounded (or fused). In relative
# terms k ulp ≤ 2k·u (u = 2^-24). ggml-vulkan evaluates SILU, TANH, GELU, GELU_QUICK and GELU_ERF from
# exp with formulas whose cancellation near 0 (1 − 2/(e^2x + 1)) or far tails (x/(1 + e^-x) at x ≪ 0)
# the C library's functions avoid. The models below bound those formulas at that precision.
u = F32_EPS


def _x(inputs: list[np.ndarray]) -> np.ndarray:
    return finite_abs(inputs[0])


def _signed_x(inputs: list[np.ndarray]) -> np.ndarray:
    x = np.asarray(inputs[0], np.float64)
    return np.where(np.isfinite(x), x, 0.0)


def vulkan_silu_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """``x / (1 + exp(−x))``: e = exp(−x) within 2(3 + 2|x|)·u relatively, scaled by e/(1+e) = σ(−x) in
    1 + e, which rounds (u); the division 2.5 ulp (5u): |Δy| ≤ |y|·(σ(−x)·(6 + 4|x|) + 6)·u; e overflows
    for x < −88.7 and y = −0 where the exact value is below 4e-37 (and subnormal results round to 2^-149)."""
    x = _signed_x(inputs)
    with np.errstate(over="ignore"):
        sigma_minus = 1.0 / (1.0 + np.exp(np.minimum(x, 700.0)))
    return finite_abs(golden) * (sigma_minus * (6 + 4 * np.abs(x)) + 6) * u + 4e-37


def vulkan_tanh_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """``1 − q``, q = 2/(E + 1), E = exp(2x) within 2(3 + 4|x|)·u: E/(E+1) = (1+y)/2 carries it into
    E + 1 (then rounded, u) and the division adds 5u, so |Δq| ≤ (1−y²)/2·(6 + 8|x|)·u + 6u·(1−y); 1 − q is
    then rounded to the destination (the row's ½ulp). Near 0 that is ~9u absolute where |y| ≪ 1."""
    x, y = _x(inputs), np.clip(np.where(np.isfinite(golden), golden, 0.0), -1.0, 1.0)
    return ((1 - y * y) / 2 * (6 + 8 * x) + 6 * (1 - y)) * u


def vulkan_gelu_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """``0.5x·(2 − 2/(exp(2z) + 1))``, z = c·x·(1 + a·x²) in f32 (5 roundings and the f32 constants:
    7u relative): E = exp(2z) within (6 + 8|z|)·u plus 14|z|·u from z; as for TANH, q = 2/(E+1) is off by
    sech²z·(3 + 11|z|)·u + 6u·(1 − t), t = tanh z; 2 − q rounds (u·(1+t)); the product is the row's ½ulp:
    |Δy| ≤ 0.5|x|·(sech²z·(3 + 11|z|) + 6(1 − t) + (1 + t))·u."""
    x = _signed_x(inputs)
    z = 0.79788456080286535587989211986876 * x * (1.0 + 0.044715 * x * x)
    t = np.tanh(z)
    with np.errstate(over="ignore"):
        sech2 = 1.0 / np.cosh(np.minimum(np.abs(z), 350.0)) ** 2
    return 0.5 * np.abs(x) * (sech2 * (3 + 11 * np.abs(z)) + 6 * (1 - t) + (1 + t)) * u


def vulkan_gelu_quick_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """``x · (1/(1 + exp(z)))``, z = −1.702f·x (the f32 constant and the product: 2u relative): E = exp(z)
    within (6 + 4|z|)·u plus 2|z|·u from z, scaled by E/(1+E) = 1 − σ(1.702x) in 1 + E (rounded, u), the
    division 5u and ·x u: |Δy| ≤ |y|·((1 − σ)·(6 + 6|z|) + 7)·u; E overflows for z > 88.7 and y = ±0 where
    the exact value is below 4e-37."""
    x = _signed_x(inputs)
    z = -1.702 * x
    with np.errstate(over="ignore"):
        one_minus_sigma = 1.0 / (1.0 + np.exp(np.minimum(-z, 700.0)))
    return finite_abs(golden) * (one_minus_sigma * (6 + 6 * np.abs(z)) + 7) * u + 4e-37


_AS_A = (0.254829592, 0.284496736, 1.421413741, 1.453152027, 1.061405429)  # |a1..a5| of A&S 7.1.26
_AS_P = 0.3275911
AS_7_1_26_ERROR = 1.5e-7  # Abramowitz & Stegun's stated bound for 7.1.26: |erf − approx| ≤ 1.5e-7


def vulkan_gelu_erf_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """``0.5a·(1 + sign·(1 − P(t)·t·e))``, the Abramowitz–Stegun 7.1.26 erf (within 1.5e-7 of it), x =
    |a|/√2, t = 1/(1 + p·x), e = exp(−x²), in f32: e within (6 + 4x²)·u plus 5x²·u from x² (x off by 2u);
    t by 10u (p·x, 1 +, the 2.5-ulp division), which moves Σa_i·t^i by ≤ 10u·Σ i|a_i|t^i; the Horner
    steps, ·t and ·e round 10 times (≤ 10u·Σ|a_i|t^i); 1 − T rounds (u). So erf is off by
    1.5e-7 + e·((16 + 9x²)·S1 + 10·S2)·u + u, S1 = Σ|a_i|t^i, S2 = Σ i|a_i|t^i; 1 + erf rounds (u·|y|
    after scaling) and the product is the row's ½ulp: |Δy| ≤ 0.5|a|·Δerf + u|y|."""
    a = _x(inputs)
    x = a * 0.70710678118654752440084436210484
    t = 1.0 / (1.0 + _AS_P * x)
    s1 = sum(c * t ** (i + 1) for i, c in enumerate(_AS_A))
    s2 = sum((i + 1) * c * t ** (i + 1) for i, c in enumerate(_AS_A))
    e = np.exp(-x * x)
    erf_error = AS_7_1_26_ERROR + e * ((16 + 9 * x * x) * s1 + 10 * s2) * u + u
    return 0.5 * a * erf_error + finite_abs(golden) * u


FLT_MIN = 2.0**-126  # the smallest normal f32: below it a Vulkan shader may flush a result to 0


def vulkan_exp_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """``exp(x)`` within (3 + 2|x|) ulp: |Δy| ≤ 2(3 + 2|x|)·u·|y|; a subnormal result may be flushed to 0
    (Vulkan lets shaders flush denormals unless the device preserves them): + 2^-126."""
    return 2 * (3 + 2 * _x(inputs)) * u * finite_abs(golden) + FLT_MIN


def vulkan_sigmoid_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(−x))``: e = exp(−x) within 2(3 + 2|x|)·u, scaled by e/(1+e) = 1 − y in 1 + e (rounded,
    u), the reciprocal 2.5 ulp (5u): |Δy| ≤ |y|·((1 − y)·2(3 + 2|x|) + 6)·u; e overflows for x < −88.7 and
    y = 0 where the exact value is below 2^-126."""
    y = np.clip(finite_abs(golden), 0.0, 1.0)
    return y * ((1 - y) * 2 * (3 + 2 * _x(inputs)) + 6) * u + FLT_MIN


def vulkan_elu_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """``exp(x) − 1`` for x < 0 (no expm1): exp's 2(3 + 2|x|)·u relative error on e^x carried into the
    difference, then rounded: |Δy| ≤ 2(3 + 2|x|)·u·e^x + u·|y|; exact for x ≥ 0 but for a subnormal x,
    which may be flushed (+ 2^-126)."""
    x = _signed_x(inputs)
    return np.where(x < 0, 2 * (3 + 2 * np.abs(x)) * u * np.exp(np.minimum(x, 0.0)) + u * finite_abs(golden),
                    0.0) + FLT_MIN


SIN_COS_ABS_ERROR = 2.0**-11  # Vulkan: inside [−π, π]; no precision is stated outside it
SIN_COS = "sin/cos (2^-11 absolute inside [−π, π], nothing stated outside)"


def vulkan_sin_cos_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """``sin``/``cos`` within 2^-11 absolute inside [−π, π]; outside that range Vulkan states no precision
    at all (lavapipe gives −1 for sin of a large argument whose sine is 2e-8): not judged there."""
    return np.where(_x(inputs) <= np.pi, SIN_COS_ABS_ERROR, np.inf)


def vulkan_log_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """``log`` within 2^-21 absolute inside [0.5, 2], 3 ulp (6u relative) outside. A subnormal input is not
    judged: Vulkan lets a shader flush it (log = −inf), and lavapipe answers log(2^-127) = −88.03 for every
    one (neither; docs/findings-vulkan.md)."""
    x = _signed_x(inputs)
    bound = np.where((x >= 0.5) & (x <= 2.0), 2.0**-21, 6 * u * finite_abs(golden))
    return np.where((x > 0) & (x < 2.0**-126), np.inf, bound)


def vulkan_softplus_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """``x > 20 ? x : log(1 + exp(x))`` (softplus.comp): e = exp(x) within 2(3 + 2|x|)·u, scaled by e/(1+e) =
    σ(x) in 1 + e, which rounds (u); log turns that relative error into an absolute one and adds its own:
    2^-21 absolute where 1 + e lies in [0.5, 2] (x ≤ 0), else 3 ulp (6u·|y|); the x branch is off by
    log1p(e^-20) = 2.1e-9: |Δy| ≤ σ(x)·2(3 + 2|x|)·u + u + log's error (+ 2.1e-9 where x > 20)."""
    x = _signed_x(inputs)
    with np.errstate(over="ignore"):
        sigma = 1.0 / (1.0 + np.exp(np.minimum(-x, 700.0)))
    log_error = np.where(x <= 0, 2.0**-21, 6 * u * finite_abs(golden))
    return np.where(x > 20, 2.1e-9, sigma * 2 * (3 + 2 * np.abs(x)) * u + u + log_error)


EXP_DIV = "exp ((3 + 2|x|) ulp) and division (2.5 ulp)"


def _vulkan_row(what: str, model: ErrorModel, name: str, via_f32: bool = False, builtins: str = EXP_DIV) -> Tolerance:
    reason = f"ggml-vulkan's {what} with Vulkan's builtin {builtins}, as its SPIR-V precision rules allow"
    if via_f32:  # F16 in and out, f32 inside: the f32 result's rounding, then F16's
        return Tolerance(reason + "; f32 inside, then the F16 rounding", ulp=0.5, rtol=u, atol=2.0**-150,
                         model=model, model_name=name)
    return Tolerance(reason + "; then the f32 rounding", ulp=0.5, model=model, model_name=name)


VULKAN_SILU = _vulkan_row("x/(1 + exp(−x))", vulkan_silu_model, "vulkan_silu")
VULKAN_TANH = _vulkan_row("1 − 2/(exp(2x) + 1)", vulkan_tanh_model, "vulkan_tanh")
VULKAN_TANH_F16 = _vulkan_row("1 − 2/(exp(2x) + 1)", vulkan_tanh_model, "vulkan_tanh", via_f32=True)
VULKAN_BUILTIN_ROWS: dict[tuple[str, str], Tolerance] = {
    (op, dst): _vulkan_row(what, model, name, via_f32=dst == "f16", builtins=builtins)
    for op, what, builtins, model, name in (
        ("EXP", "exp(x)", "exp ((3 + 2|x|) ulp)", vulkan_exp_model, "vulkan_exp"),
        ("SIGMOID", "1/(1 + exp(−x))", EXP_DIV, vulkan_sigmoid_model, "vulkan_sigmoid"),
        ("ELU", "exp(x) − 1", "exp ((3 + 2|x|) ulp)", vulkan_elu_model, "vulkan_elu"),
        ("SIN", "sin(x)", SIN_COS, vulkan_sin_cos_model, "vulkan_sin"),
        ("COS", "cos(x)", SIN_COS, vulkan_sin_cos_model, "vulkan_cos"),
        ("LOG", "log(x)", "log (2^-21 absolute inside [0.5, 2], 3 ulp outside)", vulkan_log_model, "vulkan_log"),
        ("SOFTPLUS", "log(1 + exp(x))", "exp ((3 + 2|x|) ulp) and log (2^-21 absolute inside [0.5, 2], 3 ulp "
         "outside)", vulkan_softplus_model, "vulkan_softplus"),
    )
    for dst in ("f32", "f16")
}
VULKAN_GELU = _vulkan_row("0.5x·(2 − 2/(exp(2z) + 1))", vulkan_gelu_model, "vulkan_gelu")
VULKAN_GELU_QUICK = _vulkan_row("x/(1 + exp(−1.702x))", vulkan_gelu_quick_model, "vulkan_gelu_quick")
VULKAN_GELU_ERF = _vulkan_row("Abramowitz–Stegun 7.1.26 erf (within 1.5e-7)", vulkan_gelu_erf_model,
                              "vulkan_gelu_erf")


def _gated_vulkan(model: ErrorModel, name: str) -> ErrorModel:
    """A unary shader model as the activation error of a GLU (geglu.comp, swiglu.comp, ... evaluate the
    same formula on x), times |gate|."""
    return glu.gated(lambda case, x, act: model(case, [x], act), name)


VULKAN_PREFIX = "ggml-vulkan's "
VULKAN_GLU_ROWS: dict[str, Tolerance] = {
    op: Tolerance(f"ggml-vulkan's {op} shader: {unary_row.reason.removeprefix(VULKAN_PREFIX)} for the "
                  "activation, its own f32 rounding (u·|y|) and the product's (½ulp), times |gate|", ulp=0.5, rtol=u,
                  model=_gated_vulkan(unary_model, name),
                  model_name=f"gated({name})")
    for op, unary_row, unary_model, name in (
        ("SWIGLU", VULKAN_SILU, vulkan_silu_model, "vulkan_silu"),
        ("GEGLU", VULKAN_GELU, vulkan_gelu_model, "vulkan_gelu"),
        ("GEGLU_QUICK", VULKAN_GELU_QUICK, vulkan_gelu_quick_model, "vulkan_gelu_quick"),
        ("GEGLU_ERF", VULKAN_GELU_ERF, vulkan_gelu_erf_model, "vulkan_gelu_erf"),
    )
}


F16_MAX = 65504.0


def _f16_intermediates(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Both operands rounded to F16 (2^-11 relative, or half an F16 subnormal step 2^-25) and each of the
    K partial sums rounded to F16: ``(K+2)·2^-11·Σ|a||b| + 2^-25·(Σ|a| + Σ|b| + K)``; inf where an
    operand or Σ|a||b| leaves F16's range (the intermediates saturate: −65504 for −81180)."""
    a, b = finite_abs(a), finite_abs(b)
    k = a.shape[-1]
    with np.errstate(invalid="ignore", over="ignore"):
        scale = abs_dot(a, b)
        bound = ((k + 2) * F16_EPS * scale
                 + 2.0**-25 * (abs_dot(a, np.ones_like(b)) + abs_dot(np.ones_like(a), b) + k))
        beyond = (scale > F16_MAX) | (abs_dot((a > F16_MAX).astype(float), np.ones_like(b)) > 0) | (
            abs_dot(np.ones_like(a), (b > F16_MAX).astype(float)) > 0)
    return np.where(beyond, np.inf, bound)


def _catalogue_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray | float:
    row = catalogue.tolerance_of(case).model
    return row(case, inputs, golden) if row is not None else 0.0


def vulkan_mul_mat_f16_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """MUL_MAT through ggml-vulkan's F16 pipelines (at ggml's default precision on an fp16 device: src1
    converted to F16, F16/quantized weights dequantized to F16 and accumulated in F16): the F16
    intermediates' bound on top of the catalogue row's f32 model."""
    return _f16_intermediates(inputs[0], inputs[1]) + _catalogue_model(case, inputs, golden)


def vulkan_mul_mat_id_f16_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """MUL_MAT_ID through the same F16 pipelines: the F16 bound per routed (expert, src1 row) pair."""
    pairs = routed_pairs(inputs)
    return (np.reshape(_f16_intermediates(pairs[0], pairs[1]), np.shape(golden))
            + _catalogue_model(case, inputs, golden))


VULKAN_MUL_MAT_F16 = Tolerance(
    "ggml-vulkan at GGML_PREC_DEFAULT: F16 operands and F16 accumulation, (K+2)·2^-11·Σ|a||b| + 2^-25·(Σ|a| + "
    "Σ|b| + K) on top of the f32 model; beyond F16's range not judged", ulp=0.5, model=vulkan_mul_mat_f16_model,
    model_name="vulkan_mul_mat_f16")
VULKAN_MUL_MAT_ID_F16 = Tolerance(
    "ggml-vulkan's MUL_MAT_ID at GGML_PREC_DEFAULT: MUL_MAT's F16-intermediates bound per routed (expert, src1 row) "
    "pair, on top of the f32 model; beyond F16's range not judged", ulp=0.5, model=vulkan_mul_mat_id_f16_model,
    model_name="vulkan_mul_mat_id_f16")



_ABORT = ("ggml-vulkan binds the view at its offset rounded down to minStorageBufferOffsetAlignment "
          "(16 bytes on lavapipe) and this op's shader takes no misalignment: the worker aborts on "
          "GGML_ASSERT(get_misalign_bytes(ctx, src) == 0) (ggml-vulkan-push-constants.h) or "
          "GGML_ASSERT(allow_misalign || misalign_bytes == 0) (ggml-vulkan.cpp) for a legal view at an "
          "element-aligned offset; offsets that are multiples of 16 bytes pass; ggml:CPU passes")




BUGS: list[KnownBug] = [
    # stays here, before vulkan-group-norm-uneven-groups: both cover misaligned uneven groups (list order decides)
    KnownBug(
        id="vulkan-group-norm-misaligned-view", devices="Vulkan*", op="GROUP_NORM", releases=R0251, outcomes=("crash",),
        applies=_misaligned(0), reason=_ABORT,
        # NORM, RMS_NORM and L2_NORM take the same views (offs[3]) and pass
        repro="GROUP_NORM(type=f32,ne=[8,3,4,1],lay=offs[3],dst=f32,n_groups=2,eps=9.999999747378752e-06,data=dense:1)"),
    # stays here: first of the MUL_MAT entries, so its bound is the deviation that judges such a case
    KnownBug(
        id="vulkan-mul-mat-f16-misaligned-view", devices="Vulkan*", op="MUL_MAT", releases=R0251,
        outcomes=("crash", "fail"), tolerance=VULKAN_MUL_MAT_F16, corrupts_process=True, may_hang=False,
        applies=lambda case: case.inputs[0].dtype == "f16" and _misaligned(0, 4)(case),
        reason=_ABORT.replace("16 bytes on lavapipe", "an F16 src0 at an odd element offset is not even "
                              "4-byte aligned") + "; where it does not abort, it runs the F16 pipeline and is judged "
                              "against vulkan-mul-mat-f16-intermediates' bound; it may corrupt the heap as "
                              "vulkan-mul-mat-misaligned-view-heap-corruption says",
        repro="MUL_MAT(type0=f16,ne0=[2276,1,2,2],lay0=pad[3,1,3,0]/offs[1],type1=f16,ne1=[2276,1,4,2],"
              "lay1=perm[0,2,1,3],dst=f32,data=wide:86160)"),
    # Python: ggml_vk_mul_mat's shader choice (mat-vec path, p021/nc shaders)
    KnownBug(
        id="vulkan-mul-mat-vec-misaligned-view", devices="Vulkan*", op="MUL_MAT", releases=R0251,
        outcomes=("crash",), applies=_mul_mat_vec_misaligned,
        reason=_ABORT + ". MUL_MAT hits it where ggml_vk_mul_mat picks a matrix-vector shader (src1 with one "
               "column, or up to 8 in one plane) and src0 or src1 is a view at an offset that is not a multiple "
               "of 16 bytes (the F16 shaders for permuted or non-contiguous weights take a misaligned src1); "
               "the matrix-matrix path takes the same views (F32 src0 at 4 bytes: no abort)",
        repro="MUL_MAT(type0=f32,ne0=[4096,1,3,2],lay0=pad[0,1,2,0]/offs[5],type1=f32,ne1=[4096,1,3,2],"
              "lay1=pad[0,1,2,0]/offs[5],dst=f32,data=dense:3)"),
    # Python: ggml_vk_mul_mat's p021/nc shader choice
    KnownBug(
        id="vulkan-mul-mat-f16-vec-f16-src1", devices="Vulkan*", op="MUL_MAT", releases=R0251,
        outcomes=("crash",),
        applies=lambda case: case.inputs[1].dtype == "f16" and _f16_weights_vec_shader(case),
        reason="F16 weights that are permuted (0213) or not contiguous, times one F16 src1 column, go to the "
               "p021/nc matrix-vector shaders, which assert src1 is F32 (GGML_ASSERT(src1->type == "
               "GGML_TYPE_F32)); supports_op accepts the case; ggml:CPU passes",
        repro="MUL_MAT(type0=f16,ne0=[16,2,1,1],lay0=pad[2,0,0,0],type1=f16,ne1=[16,1,1,1],dst=f32,data=dense:0)"),
    # stays here, before vulkan-mul-mat-misaligned-view-heap-corruption and -src0-plane-gap (list order)
    KnownBug(
        id="vulkan-mul-mat-bf16-src1", devices="Vulkan*", op="MUL_MAT", releases=R0251,
        outcomes=("crash",), applies=lambda case: case.inputs[1].dtype == "bf16",
        reason="supports_op accepts BF16·BF16, but the matrix multiply asserts src1 is F32, F16 or Q8_1 "
               "(GGML_ASSERT(b_type == GGML_TYPE_F32 || b_type == GGML_TYPE_F16 || b_type == GGML_TYPE_Q8_1), "
               "ggml-vulkan.cpp:5300): every BF16·BF16 case aborts, the 1×1 one included; BF16·F32 passes; "
               "ggml:CPU passes",
        repro="MUL_MAT(type0=bf16,ne0=[1,1,1,1],type1=bf16,ne1=[1,1,1,1],dst=f32,data=dense:0)"),
    # Python: the matrix path (not mat-vec, src1 not read in place)
    KnownBug(
        id="vulkan-mul-mat-misaligned-view-heap-corruption", devices="Vulkan*", op="MUL_MAT", releases=R0251,
        outcomes=("fail", "crash"), applies=_mul_mat_misaligned_matrix_path, tolerance=VULKAN_MUL_MAT_F16,
        corrupts_process=True, may_hang=False,
        reason="the matrix-matrix path takes src0/src1 views at offsets that are not multiples of 16 bytes without "
               "aborting, and their results are within vulkan-mul-mat-f16-intermediates' bound, but in 3 of 3 "
               "heap corruptions seen in MUL_MAT runs ('corrupted double-linked list', 'double free or corruption "
               "(!prev)', a SIGSEGV in a 1×1 case) the case before was such a view (F32·F16 src1 at 2 bytes, F16 "
               "src0 at 10 bytes, F32 src0 at 4 bytes), and none of them crashes alone: each such case gets a fresh "
               "process after it (lavapipe's device memory is host heap)",
        repro="MUL_MAT(type0=f32,ne0=[63,4,2,2],lay0=perm[0,3,1,2]/pad[2,1,2,3]/offs[1],type1=f16,ne1=[63,7,4,2],"
              "dst=f32,data=special:434604)"),
    # Python: ggml_vk_dim01_contiguous's read-in-place test on src1
    KnownBug(
        id="vulkan-mul-mat-src1-plane-gap", devices="Vulkan*", op="MUL_MAT", releases=R0251,
        applies=_src1_planes_gapped,
        reason="src1 whose planes are not packed (nb12 != ne11·nb11) but which ggml_vk_dim01_contiguous accepts "
               "(rows packed, ne13 = 1 or nb13 = nb12·ne12) is read in place with the packed batch stride "
               "ne10·ne11: the padding between planes (NaN bytes here) comes out as NaN, -65504 or wrong sums; "
               "F32, F16, Q4_0 and Q8_0 weights, mat-vec and matrix paths, unpermuted or with planes permuted "
               "(perm[0,1,3,2] with ne13 = 1: dev seed 24011, 7 fails), also ne12 = 1 with a gap before each "
               "dim-3 plane; also with GGML_VK_DISABLE_F16=1. Padded rows, or a gap that breaks "
               "nb13 = nb12·ne12, send src1 through a copy and pass (18 such replays); ggml:CPU passes",
        repro="MUL_MAT(type0=f32,ne0=[8,3,2,1],type1=f32,ne1=[8,4,2,1],lay1=pad[0,1,0,0],dst=f32,data=dense:4)"),
    # Python: gapped planes (rows packed, planes not) is no layout kind
    KnownBug(
        id="vulkan-mul-mat-src0-plane-gap", devices="Vulkan*", op="MUL_MAT", releases=R0251,
        applies=_src0_planes_gapped,
        reason="an F32, Q4_0 or Q8_0 src0 whose planes are not packed (a gap after each dim-2 or dim-3 plane: "
               "nb02 > ne01·nb01) is read as if they were: from the second plane on, the padding comes out "
               "(NaN, -65504); F16 weights too when the gapped planes are also permuted (dev seed 24011: 42 fails "
               "with perm[0,1,3,2]/pad[0,2,3,3]); unpermuted gapped F16 planes, permuted planes without a gap, "
               "and ggml:CPU pass; "
               "mat-vec (1 column) and matrix (16 columns) paths alike (seed 24002: 60 fails, 7 crashes under other "
               "entries, 4 such cases passed)",
        repro="MUL_MAT(type0=q4_0,ne0=[32,1,2,1],lay0=pad[0,2,0,0],type1=f32,ne1=[32,1,2,1],dst=f32,data=uniform:0)"),
    # Python: gapped planes (rows packed, planes not) is no layout kind
    KnownBug(
        id="vulkan-mul-mat-id-src0-expert-gap", devices="Vulkan*", op="MUL_MAT_ID", releases=R0251,
        applies=lambda case: _planes_gapped(case.inputs[0]),
        reason="the experts' weights with a gap after each expert's plane (src0 padded in dim 1, F32 and F16) "
               "are read as if packed: NaN from the padding for most outputs (up to 704 of 704); ggml:CPU passes "
               "(dev seed 24004: 27 fails; the MUL_MAT form is vulkan-mul-mat-src0-plane-gap)",
        repro="MUL_MAT_ID(type0=f32,ne0=[1,1,2,1],lay0=pad[0,1,0,0],type1=f32,ne1=[1,1,1,1],type2=i32,"
              "ne2=[1,1,1,1],dst=f32,data=uniform:0)"),
    # Python: whether the elements fill one packed block of storage
    KnownBug(
        id="vulkan-sum-reads-storage-as-packed", devices="Vulkan*", op="SUM", releases=R0251,
        applies=lambda case: not _storage_dense(case.inputs[0]),
        reason="ggml_vk_sum runs the sum_rows shader over one row of ggml_nelements(src0) elements from the "
               "view's start, so a source whose elements do not fill one packed block (padded rows or planes) "
               "sums other storage (the NaN fill: out = NaN); any permutation of a packed block passes (the same "
               "elements); supports_op checks only ggml_is_contiguous_rows; 505 fails, and 120 such cases passed "
               "(not explained)",
        repro="SUM(type=f32,ne=[1159,5,3,1],lay=pad[1,1,1,1],dst=f32,data=wide:5)"),
    # Python: the destination view is built from the params (dst_ne, dst_pad)
    KnownBug(
        id="vulkan-cpy-dequantize-strided-dst", devices="Vulkan*", op="CPY", releases=R0251,
        applies=dequantizing_cpy_into_unaligned_view,
        reason="a Q4_0/Q8_0 → F32 copy into a view with dim 0 permuted away, or into a non-contiguous view "
               "whose rows do not hold whole 32-element blocks, writes values at the wrong places (|Δ| up to "
               "14 on dense data); contiguous, padded-with-whole-blocks and plane-permuted views pass; the "
               "same views abort ggml's CPU (cpu-cpy-dequantize-strided-dst)",
        repro="CPY(type=q4_0,ne=[32,2,1,1],dst=f32,dst_ne=[16,4,1,1],dst_pad=[1,0,0,0],dst_offset=0,"
              "data=dense:0)"),
    # Python: ne2 against ceil(ne2 / n_groups)
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
    # Python: compares padding with kernel size, two params
    KnownBug(
        id="vulkan-pool-2d-window-before-input", devices="Vulkan*", op="POOL_2D", releases=R0251,
        applies=_window_before_the_input,
        reason="a window that ends before the input (padding > kernel) should give −FLT_MAX (MAX) or 0 "
               "(AVG) as on ggml's CPU; pool2d.comp stores its end, start + k < 0, in an unsigned bound and "
               "reads input values instead (41.09 for −FLT_MAX); padding = kernel is right",
        repro="POOL_2D(type=f32,ne=[1,1,1,1],dst=f32,op=0,k0=1,k1=1,s0=1,s1=1,p0=0.0,p1=2.0,data=wide:0)"),
    # DUP and CONT have the same entry in known_bugs_vulkan.toml
    # Python: compares each left padding with its dim (circular_pad_beyond_dim)
    KnownBug(
        id="vulkan-pad-circular-wraps-once", devices="Vulkan*", op="PAD", releases=R0251,
        applies=circular_pad_beyond_dim,
        reason="a left padding past the dim (the torus wraps more than once) reads the wrong source element: "
               "out = −0.439 where 0.0825 is right for lp = 28 on a dim of 27; lp = 27 passes; ggml's CPU has the "
               "same defect (cpu-pad-circular-wraps-once)",
        repro="PAD(type=f32,ne=[27,3,1,1],dst=f32,form=pad_ext_circular,lp=[28,0,0,0],rp=[0,0,0,0],data=uniform:1)"),
    # Python: replays the kernel's f32 window arithmetic
    KnownBug(
        id="vulkan-upscale-antialias-align-corners-window", devices="Vulkan*", op="UPSCALE", releases=R0251,
        applies=antialias_window_drops_a_pixel,
        reason="the antialiased bilinear window with align-corners ends one pixel early, as in ggml's CPU "
               "(cpu-upscale-antialias-align-corners-window): |Δ| up to 5.6e-3 (3.5e3× the row)",
        repro="UPSCALE(type=f32,ne=[1,2,1,1],dst=f32,sf=2,mode=bilinear,align_corners=True,antialias=True,"
              "data=uniform:0)"),
]


# The documented deviations' bounds by name, for expectation entries in TOML (``deviation = "<name>"``)
NAMED_BOUNDS: dict[str, Tolerance] = {
    "vulkan_silu": VULKAN_SILU, "vulkan_tanh": VULKAN_TANH, "vulkan_tanh_f16": VULKAN_TANH_F16,
    "vulkan_gelu": VULKAN_GELU, "vulkan_gelu_quick": VULKAN_GELU_QUICK, "vulkan_gelu_erf": VULKAN_GELU_ERF,
    "vulkan_mul_mat_f16": VULKAN_MUL_MAT_F16, "vulkan_mul_mat_id_f16": VULKAN_MUL_MAT_ID_F16,
    **{f"{row.model_name}_{dst}": row for (_, dst), row in VULKAN_BUILTIN_ROWS.items()},
    **{f"vulkan_{op.lower()}": row for op, row in VULKAN_GLU_ROWS.items()},
}

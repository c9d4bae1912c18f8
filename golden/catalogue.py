"""The op catalogue: the one place that lists every op the CANN seed claims to support.

For each op: its golden function, its parameters, the dtype combinations the seed's
``ggml_backend_cann_supports_op`` accepts (as ggml's CPU backend defines them), and the tolerance
rule per destination dtype (or per signature) with its error-model reason. An op whose golden is
not written yet is listed with ``golden=None`` and shows up as "not implemented" in ``conform ops``
(all 41 ops of the seed are implemented now; tests/test_golden_core.py checks the list against the
seed's supports_op).

Adding an op: write its golden in the family module, add an :class:`OpSpec` here, a ggml
constructor in ``device/ggml/ops_<family>.py`` and a strategy in ``conformance/strategies``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from golden import binary, unary
from golden import conv as conv_golden
from golden import embedding as embedding_golden
from golden import matmul as matmul_golden
from golden import movement as mv
from golden import movement_checks as checks
from golden import norm as norm_golden
from golden import resample as rs
from golden import rope as rope_golden
from golden import sequence as seq
from golden import softmax as softmax_golden
from golden import tolerance as tol
from golden.case import OpCase
from golden.tolerance import EXACT, ROUNDED, Tolerance, f16_table_model, quant_matmul_model, rounded_via_f32

Golden = Callable[[list[np.ndarray], OpCase], np.ndarray]


@dataclass(frozen=True)
class Signature:
    """One accepted dtype combination: source dtypes in order, and the destination dtype."""

    srcs: tuple[str, ...]
    dst: str

    def label(self) -> str:
        if not self.srcs:
            return self.dst  # ops without inputs (ARANGE)
        return "_".join(self.srcs) + ("" if self.srcs[0] == self.dst else f"_to_{self.dst}")


@dataclass(frozen=True)
class OpSpec:
    name: str
    family: str
    golden: Golden | None
    signatures: tuple[Signature, ...]
    tolerance: dict[str, Tolerance]
    params: dict[str, str] = field(default_factory=dict)  # name -> meaning
    inplace_inputs: tuple[int, ...] = ()  # inputs the op writes by definition (CLAMP returns a view of a)
    specials: tuple[float, ...] = (np.nan, np.inf, -np.inf, 0.0, -0.0)
    max_abs_input: float | None = None  # inputs beyond this are outside the op's defined domain
    # which input layouts ggml's CPU kernel handles for src0: "any" (any permute/view), "rows"
    # (rows contiguous: permutes keeping dim 0, padded views), "uniform_rows" (rows addressed as
    # j·nb1: padding in dim 0 and an offset only), "contiguous"
    layouts: str = "rows"
    notes: str = ""
    # rejects parameters ggml would abort on (a clear ValueError before any device sees the case)
    validate: Callable[[OpCase, list[np.ndarray]], None] | None = None

    @property
    def implemented(self) -> bool:
        return self.golden is not None

    def tolerance_for(self, dst: str, signature: str = "") -> Tolerance:
        """The row for a signature label (``q4_0_f32_to_f32``) if there is one, else for the dst dtype."""
        if signature and signature in self.tolerance:
            return self.tolerance[signature]
        if dst in self.tolerance:
            return self.tolerance[dst]
        if "*" in self.tolerance:
            return self.tolerance["*"]
        raise KeyError(f"{self.name}: no tolerance row for destination dtype {dst}")


def _sig(*srcs: str, dst: str | None = None) -> Signature:
    return Signature(tuple(srcs), dst or srcs[0])


SAME_FLOAT = (_sig("f32"), _sig("f16"))
SAME_FLOAT_BF16 = (_sig("f32"), _sig("f16"), _sig("bf16"))
BINARY_SIGS = (
    _sig("f32", "f32"),
    _sig("f16", "f16"),
    _sig("f16", "f32", dst="f16"),
    _sig("bf16", "bf16"),
    _sig("bf16", "f32", dst="bf16"),
)

ELEMENTWISE_TOL = {
    "f32": ROUNDED,
    "f16": rounded_via_f32(),
    "bf16": rounded_via_f32(),
}


def _one(fn: Callable[[np.ndarray], np.ndarray]) -> Golden:
    return lambda xs, case: fn(xs[0])


def _two(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Golden:
    return lambda xs, case: fn(xs[0], xs[1])


def _libm(ulps: float, what: str) -> dict[str, Tolerance]:
    reason = f"{what}; then the destination rounding"
    return {
        "f32": Tolerance(reason, ulp=ulps),
        "f16": Tolerance(reason + " (f32 inside, F16 out)", ulp=0.5, rtol=ulps * 2 * 2.0**-24),
        "bf16": Tolerance(reason + " (f32 inside, BF16 out)", ulp=0.5, rtol=ulps * 2 * 2.0**-24),
    }


_GELU_TABLE = "ggml's CPU evaluates it through an F16 lookup table (input and output rounded to F16)"

OPS: dict[str, OpSpec] = {}


def _add(spec: OpSpec) -> None:
    OPS[spec.name] = spec


# ---- elementwise binary (golden/binary.py) ------------------------------------------------------
for _name, _fn in (("ADD", binary.add), ("MUL", binary.mul), ("DIV", binary.div)):
    _add(OpSpec(_name, "binary", _two(_fn), BINARY_SIGS, ELEMENTWISE_TOL,
                notes="src1 broadcasts by cyclic tiling (ggml_can_repeat); src0 rows contiguous"))

# ---- unary family and simple one-input ops (golden/unary.py) ------------------------------------
_add(OpSpec("SCALE", "unary", lambda xs, c: unary.scale(xs[0], c.param("s"), c.param("bias", 0.0)),
            (_sig("f32"),),
            {"f32": Tolerance("x·s is one f32 rounding; x·s+b is one fused multiply-add rounding", ulp=0.5)},
            params={"s": "scale factor (f32)", "bias": "added after scaling (ggml_scale_bias), 0 = plain"},
            layouts="contiguous", notes="the CPU kernel asserts contiguous src and dst"))
_add(OpSpec("SQR", "unary", _one(unary.sqr), SAME_FLOAT_BF16, ELEMENTWISE_TOL))
_add(OpSpec("CLAMP", "unary", lambda xs, c: unary.clamp(xs[0], c.param("min"), c.param("max")), SAME_FLOAT,
            {"*": Tolerance("the result is x or a bound; an f32 bound is rounded once to an F16 destination",
                            ulp=0.5)}, params={"min": "lower bound (f32)", "max": "upper bound (f32)"},
            inplace_inputs=(0,), layouts="uniform_rows",
            notes="ggml_clamp is in place: it returns a view of its input. The CPU kernel addresses row j "
                  "at j·nb1, so permuted or row-padded inputs come out wrong on ggml 0.20.2's CPU: only "
                  "layouts with uniformly strided rows are drawn"))
_add(OpSpec("LEAKY_RELU", "unary", lambda xs, c: unary.leaky_relu(xs[0], c.param("slope")), SAME_FLOAT,
            {"f32": Tolerance("slope·x is one rounding; max(x,0) adds an exact zero", ulp=0.5),
             "f16": rounded_via_f32()},
            params={"slope": "negative slope (f32)"}, layouts="uniform_rows",
            notes="CPU kernel addresses row j at j·nb1 (as CLAMP): only uniformly strided rows are drawn"))
_add(OpSpec("RELU", "unary", _one(unary.relu), SAME_FLOAT_BF16, {"*": EXACT}))
_add(OpSpec("HARDSIGMOID", "unary", _one(unary.hardsigmoid), SAME_FLOAT_BF16,
            {"f32": Tolerance("(x+3) and /6 are two f32 roundings (2·2^-24 relative)", rtol=2 * 2.0**-24),
             "f16": rounded_via_f32("two f32 roundings, then F16"),
             "bf16": rounded_via_f32("two f32 roundings, then BF16")}))
_add(OpSpec("HARDSWISH", "unary", _one(unary.hardswish), SAME_FLOAT_BF16,
            {"f32": Tolerance("(x+3), /6 and ·x are three f32 roundings (3·2^-24 relative)", rtol=3 * 2.0**-24),
             "f16": Tolerance("three f32 roundings, then F16", ulp=0.5, rtol=3 * 2.0**-24),
             "bf16": Tolerance("three f32 roundings, then BF16", ulp=0.5, rtol=3 * 2.0**-24)}))
_add(OpSpec("TANH", "unary", _one(unary.tanh), SAME_FLOAT_BF16,
            _libm(2.5, "glibc documents tanhf within 2 ulp on x86-64 (measured 2.0 ulp here)")))
_add(OpSpec("SILU", "unary", _one(unary.silu), SAME_FLOAT,
            {"f32": Tolerance("SIMD exp (≤1.95 ulp) then 1+e and x/(1+e) roundings; exp(−x) overflows f32 "
                              "for x < −88.7 giving −0 where the exact value is below 4e-37",
                              ulp=4.0, atol=4e-37),
             "f16": Tolerance("f32 evaluation (≤4 ulp_f32), then F16", ulp=0.5, rtol=8 * 2.0**-24, atol=2.0**-25)},
            specials=(np.nan, np.inf, 0.0, -0.0),
            notes="−inf excluded from special values: x/(1+exp(−x)) is NaN there and the limit is 0"))
_add(OpSpec("GELU", "unary", _one(unary.gelu), SAME_FLOAT,
            {"f32": Tolerance(_GELU_TABLE, ulp=0.5, model=f16_table_model(1.13)),
             "f16": Tolerance(_GELU_TABLE, ulp=0.5, model=f16_table_model(1.13))},
            specials=(np.nan, np.inf, 0.0, -0.0), max_abs_input=65504.0,
            notes="ggml GELU is the tanh approximation; the CPU table maps x ≤ −10 to 0 and x ≥ 10 to x; "
                  "−inf has no agreed value (F32 path 0, F16 table NaN)"))
_add(OpSpec("GELU_QUICK", "unary", _one(unary.gelu_quick), SAME_FLOAT,
            {"f32": Tolerance(_GELU_TABLE, ulp=0.5, model=f16_table_model(1.1)),
             "f16": Tolerance(_GELU_TABLE, ulp=0.5, model=f16_table_model(1.1))},
            specials=(np.nan, np.inf, 0.0, -0.0), max_abs_input=65504.0,
            notes="x·σ(1.702x). The CPU's F32 path always goes through the F16 table, so |x| > 65504 "
                  "becomes ±inf/NaN there: inputs are drawn within the F16 range"))

# ---- numerics: norms, softmax, masks, RoPE, matmul, im2col, pooling, timestep embedding ---------
# (numerics block: add OpSpecs here)


def _soft_max(xs: list[np.ndarray], c: OpCase) -> np.ndarray:
    a, mask, sinks = softmax_golden.split_inputs(xs, bool(c.param("mask")), bool(c.param("sinks")))
    return softmax_golden.soft_max(a, mask, sinks, c.param("scale", 1.0), c.param("max_bias", 0.0))


def _rope(xs: list[np.ndarray], c: OpCase) -> np.ndarray:
    return rope_golden.rope(
        xs[0], xs[1], c.param("n_dims"), c.param("mode", 0), xs[2] if c.param("freq_factors") else None,
        freq_base=c.param("freq_base"), freq_scale=c.param("freq_scale"), ext_factor=c.param("ext_factor"),
        n_ctx_orig=c.param("n_ctx_orig"), beta_fast=c.param("beta_fast"), beta_slow=c.param("beta_slow"),
        attn_factor=c.param("attn_factor"))


def _im2col(xs: list[np.ndarray], c: OpCase) -> np.ndarray:
    p = c.params_dict
    return conv_golden.im2col(c.inputs[0].ne, xs[1], p["s0"], p["s1"], p["p0"], p["p1"], p["d0"], p["d1"],
                              bool(p["is_2d"]))


def _pool_2d(xs: list[np.ndarray], c: OpCase) -> np.ndarray:
    p = c.params_dict
    return conv_golden.pool_2d(xs[0], p["op"], p["k0"], p["k1"], p["s0"], p["s1"], p["p0"], p["p1"])


_F32_ONLY = (_sig("f32"),)
_NORM_NOTE = ("F32 only on ggml's CPU. eps > 0 is drawn: with eps = 0 a constant row is 0/0 exactly but the "
              "CPU's f32 mean need not cancel exactly")
_add(OpSpec("NORM", "norm", lambda xs, c: norm_golden.norm(xs[0], c.param("eps")), _F32_ONLY,
            {"f32": Tolerance("f32 mean/variance with double sums; ggml CPU nightly: max |Δ| 4.6e-6 at "
                              "|y| ≤ 45, ≤ 0.51 of the allowance", ulp=0.5, atol=2.0**-149,
                              model=tol.centred_norm_model(lambda c, x: norm_golden.row_stats(x, c.param("eps"))))},
            params={"eps": "added to the variance (f32, > 0)"}, notes=_NORM_NOTE))
_add(OpSpec("RMS_NORM", "norm", lambda xs, c: norm_golden.rms_norm(xs[0], c.param("eps")), _F32_ONLY,
            {"f32": Tolerance("f32(x·x) summed in double, /n, +eps, sqrtf, 1/ and ·x: about 4 roundings, "
                              "one subnormal step where x·scale underflows; ggml CPU nightly: ≤ 2.4 ulp",
                              ulp=0.5, rtol=6 * tol.F32_EPS, atol=2.0**-149)},
            params={"eps": "added to the mean square (f32, > 0)"}, notes=_NORM_NOTE))
_add(OpSpec("GROUP_NORM", "norm",
            lambda xs, c: norm_golden.group_norm(xs[0], c.param("n_groups"), c.param("eps")), _F32_ONLY,
            {"f32": Tolerance("NORM over each group's ne0·ne1·channels block; ggml CPU nightly: max |Δ| "
                              "4.2e-7, ≤ 0.51 of the allowance", ulp=0.5, atol=2.0**-149,
                              model=tol.centred_norm_model(
                                  lambda c, x: norm_golden.group_stats(x, c.param("n_groups"), c.param("eps"))))},
            params={"n_groups": "groups over ne2: ceil(C/G) channels each, the last shorter or empty",
                    "eps": "added to the variance (f32, > 0)"},
            notes=_NORM_NOTE + ". Channels are ne2; every ne3 batch is normalised separately"))
_add(OpSpec("SOFT_MAX", "softmax", _soft_max,
            (_sig("f32"), _sig("f32", "f32"), _sig("f32", "f16", dst="f32")),
            {"f32": Tolerance("f32 logits, SIMD exp and a double sum; ggml CPU nightly: max |Δ| 1.5e-5 "
                              "(w − max spreads of hundreds), ≤ 0.62 of the allowance", ulp=0.5,
                              model=tol.softmax_model, model_name="softmax(Δw_i + max_row Δw + 8u)·|y|")},
            params={"scale": "multiplies a (f32, > 0 drawn)", "max_bias": "ALiBi: 0 = off, > 0 needs a mask",
                    "mask": "src1 is the mask (F32 or F16, ne1 ≥ a.ne1, broadcast modulo over dims 2/3)",
                    "sinks": "the last src is one F32 sink logit per head (ggml_soft_max_add_sinks)"},
            specials=(-np.inf, 0.0, -0.0), layouts="contiguous",
            notes="Sinks are F32 and the signature lists only a and the mask. A fully masked row gives NaN "
                  "(no sink: max = −inf and −inf − (−inf) is NaN, as on ggml's CPU) or 0 (with a sink). "
                  "NaN and +inf inputs are not drawn (the max of a row with NaN is order dependent in C); "
                  "ggml_soft_max_ext asserts contiguous a and mask"))
_add(OpSpec("DIAG_MASK_INF", "softmax", lambda xs, c: softmax_golden.diag_mask_inf(xs[0], c.param("n_past")),
            _F32_ONLY, {"f32": EXACT}, params={"n_past": "columns i0 > n_past + i1 become −inf (≥ 0)"},
            layouts="contiguous", notes="the CPU's out-of-place path memcpy's the source: contiguous only"))
_add(OpSpec("ROPE", "rope", _rope, (_sig("f32", "i32"), _sig("f16", "i32")),
            {"f32": Tolerance("running f32 product for θ; ggml CPU: |Δθ| ≈ 5e-3 rad at positions ≤ 65535 "
                              "(|Δy| up to 3.4 for |x| ≤ 150), 9e-6 below 64; nightly ≤ 0.37 of the model",
                              ulp=0.5, model=tol.rope_model,
                              model_name="rope(mscale·(|x0|+|x1|)·((3k+8)·u·Θ_k + 6u))"),
             "f16": Tolerance("computed in f32 as for F32, then one F16 rounding; ggml CPU nightly ≤ 0.999 of "
                              "the allowance (f32 results at F16 rounding ties)",
                              ulp=0.5, model=tol.rope_model, model_name="rope(...) + ½ulp_f16")},
            params={"n_dims": "rotated leading dims (even, ≤ ne0)", "mode": "0 NORMAL (pairs 2k,2k+1), 2 NEOX "
                    "(pairs k, k+n_dims/2)", "n_ctx_orig": "YaRN original context", "freq_base": "θ base (f32)",
                    "freq_scale": "θ scale (f32)", "ext_factor": "YaRN ramp mix (0 = off)",
                    "attn_factor": "magnitude scale (f32)", "beta_fast": "YaRN", "beta_slow": "YaRN",
                    "freq_factors": "a third F32 src divides θ_k (n_dims/2 or more values)"},
            specials=(0.0, -0.0),
            notes="src1 holds one I32 position per token (ne2). ±inf/NaN are not drawn: their rotation's sign "
                  "depends on cos/sin signs that the f32 θ may flip near zero"))
_add(OpSpec("MUL_MAT", "matmul", lambda xs, c: matmul_golden.mul_mat(xs[0], xs[1]),
            (_sig("f32", "f32"), _sig("f16", "f32", dst="f32"), _sig("f16", "f16", dst="f32")),
            {"f32": Tolerance("γ_K dot-product bound; ggml CPU: F32 ≤ 0.84·K·u·Σ|a||b| at K = 1, 4e-5 of the bound "
                              "at K = 4096; F16 weights with F32 src1 up to 0.66·2^-11·Σ|a||b| (src1 rounded to "
                              "F16; 0.91 of the allowance nightly), F16·F16 ≤ 0.06", ulp=0.5,
                              model=tol.dot_product_model(1.0))},
            params={}, specials=(0.0, -0.0),
            notes="dst ne [a.ne1, b.ne1, b.ne2, b.ne3]; dims 2/3 of a broadcast blockwise (GQA). Rows of both "
                  "srcs must be contiguous (nb0 = element size; a transposed operand is rejected by ggml), so "
                  "layouts keep dim 0 innermost; ±inf/NaN are not drawn (an F32 subnormal src1 becomes 0 "
                  "in F16 and inf·0 is NaN)"))
_add(OpSpec("IM2COL", "conv", _im2col,
            (_sig("f32", "f32"), _sig("f16", "f32", dst="f16"), _sig("f16", "f16")),
            {"*": Tolerance("values are copied; an F32 value going to an F16 destination is rounded once",
                            ulp=0.5)},
            params={"s0": "stride", "s1": "stride (2-D)", "p0": "zero padding", "p1": "zero padding (2-D)",
                    "d0": "dilation", "d1": "dilation (2-D)", "is_2d": "2-D (else 1-D, s1 = p1 = d1 = 0)"},
            layouts="rows",
            notes="src0 is the kernel (only its shape matters); src1 is the data. ggml 0.20.2's CPU 2-D kernel "
                  "addresses data row ih of a channel at ih·IW elements, ignoring nb1: a row-padded view or a "
                  "permute moving dim 1 comes out wrong (e.g. perm 0,2,1,3: NMSE 2.0), so 2-D data is drawn "
                  "with packed planes (channel/batch strides, offset and dims 2/3 swapped are fine); 1-D "
                  "data keeps rows contiguous only"))
_add(OpSpec("POOL_2D", "conv", _pool_2d, (_sig("f32"), _sig("f16", dst="f32")),
            {"f32": Tolerance("MAX selects (exact, −FLT_MAX included); AVG is a f32 sum of k0·k1 taps, one "
                              "division and one rounding; ggml CPU nightly: ≤ 2.7e3 ulp at cancelling sums, "
                              "≤ 0.43 of the allowance", model=tol.pool_model)},
            params={"op": "0 MAX, 1 AVG", "k0": "kernel", "k1": "kernel", "s0": "stride", "s1": "stride",
                    "p0": "padding (float: the size uses it, the taps use int(p))", "p1": "padding (float)"},
            specials=(np.inf, -np.inf, 0.0, -0.0), layouts="uniform_rows",
            notes="AVG divides by k0·k1 always (padding counts as zeros); a MAX window entirely in padding is "
                  "−FLT_MAX. NaN is not drawn (C's MAX keeps or drops it by order). ggml 0.20.2's CPU kernel "
                  "walks source planes by nb2 until ggml_nbytes(src) and writes dst planes in step: a gap "
                  "between planes (padding in dim 2, a permute) runs it past dst (heap corruption, SIGABRT; "
                  "perm 0,1,3,2 gives garbage). Only row padding and offsets are drawn"))
_add(OpSpec("TIMESTEP_EMBEDDING", "embedding",
            lambda xs, c: embedding_golden.timestep_embedding(xs[0], c.param("dim"), c.param("max_period")),
            _F32_ONLY,
            {"f32": Tolerance("f32 frequencies via expf and f32 arguments to cosf/sinf; ggml CPU nightly: max "
                              "|Δ| 7.7e-5 at |t| ≤ 1000, ≤ 0.46 of the allowance",
                              ulp=0.5, model=tol.timestep_model)},
            params={"dim": "embedding width; odd → the last element is 0", "max_period": "P (int)"},
            specials=(0.0, -0.0), layouts="rows",
            notes="cosines first, then sines; timesteps are F32 (drawn up to ±1000, as diffusion models use). "
                  "The CPU asserts nb0 = sizeof(float): layouts keep dim 0 innermost"))

# ---- data movement and shape ops ------------------------------------------------------------------
# (movement block: add OpSpecs here)
_COPY_SIGS = (_sig("f32"), _sig("f16"), _sig("bf16"), _sig("i32"))
_MOVED = Tolerance("bit-exact: the op only moves or selects stored values (byte copies, no arithmetic)")
_VIEW_NOTE = ("built as the view followed by ggml_cont, so the device's strided copy is what is checked "
              "(the view itself computes nothing)")


def _esize(case: OpCase) -> int:
    from golden.dtypes import type_size

    return type_size(case.inputs[0].dtype)


def arange_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """Half an f32 ulp of step·i: what an unfused multiply adds before the final rounding."""
    from golden.dtypes import ulp

    return 0.5 * ulp(golden - float(np.float32(case.param("start"))), "f32")


def sum_rows_model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
    """(n−1)·2^-24·Σ|x| per row: the worst case of f32 summation in any order."""
    x = np.abs(np.asarray(inputs[0], dtype=np.float64))
    total = np.sum(np.where(np.isfinite(x), x, 0.0), axis=-1, keepdims=True)
    return (x.shape[-1] - 1) * 2.0**-24 * total


_add(OpSpec("NONE", "movement", _one(mv.identity), _COPY_SIGS, {"*": _MOVED}, layouts="any",
            validate=checks.one_input, notes="a leaf tensor read back through ggml_cont; " + _VIEW_NOTE))
_add(OpSpec("VIEW", "movement",
            lambda xs, c: mv.view(xs[0], c.param("ne"), [n // _esize(c) for n in c.param("nb")],
                                        c.param("offset") // _esize(c)),
            _COPY_SIGS, {"*": _MOVED},
            params={"ne": "view shape", "nb": "view strides in bytes (nb0 = element size)",
                    "offset": "byte offset into the source"},
            layouts="contiguous", validate=checks.view_fits,
            notes="ggml_view_4d of a contiguous source (its strides are relative to that source); " + _VIEW_NOTE))
_add(OpSpec("RESHAPE", "movement", lambda xs, c: mv.reshape(xs[0], c.param("ne")), _COPY_SIGS,
            {"*": _MOVED}, params={"ne": "new shape, same element count"}, layouts="contiguous",
            validate=checks.same_count, notes="ggml_reshape_4d needs a contiguous source; " + _VIEW_NOTE))
_add(OpSpec("PERMUTE", "movement", lambda xs, c: mv.permute(xs[0], c.param("axes")), _COPY_SIGS,
            {"*": _MOVED}, params={"axes": "ggml_permute axes: source dim k goes to position axes[k]"},
            layouts="any", validate=checks.valid_permute, notes=_VIEW_NOTE))
_add(OpSpec("TRANSPOSE", "movement", _one(mv.transpose), _COPY_SIGS, {"*": _MOVED}, layouts="any",
            validate=checks.one_input, notes="swaps ne0 and ne1; " + _VIEW_NOTE))
_add(OpSpec("DUP", "movement", _one(mv.identity), _COPY_SIGS, {"*": _MOVED}, layouts="any",
            validate=checks.one_input, notes="ggml_dup: a contiguous same-type copy of any layout"))
_add(OpSpec("CONT", "movement",
            lambda xs, c: mv.reshape(xs[0], c.param("ne", tuple(c.inputs[0].ne))), _COPY_SIGS,
            {"*": _MOVED}, params={"ne": "form=cont_4d only: the new shape (same element count)"},
            layouts="any", validate=checks.same_count,
            notes="ggml_cont, or ggml_cont_4d (form=cont_4d) which also reshapes"))
_add(OpSpec("CPY", "movement", lambda xs, c: mv.cpy(xs[0], c.param("dst_ne"), c.out_dtype),
            (_sig("f32"), _sig("f32", dst="f16"), _sig("f32", dst="bf16"), _sig("f32", dst="i32"),
             _sig("f16"), _sig("f16", dst="f32"), _sig("f16", dst="bf16"), _sig("bf16"), _sig("bf16", dst="f32"),
             _sig("bf16", dst="f16"), _sig("i32"), _sig("i32", dst="f32")),
            {"*": Tolerance("bit-exact: the conversion is defined as one round-to-nearest-even (F16, BF16), "
                            "truncation toward zero (I32) or exact widening; the golden applies it")},
            params={"dst_ne": "destination shape (same element count as the source)",
                    "dst_pad": "elements of padding per dim around the destination (a strided view when non-zero)",
                    "dst_offset": "element offset of the destination view in its allocation"},
            layouts="any", validate=checks.same_count,
            notes="the destination is created by the builder (a strided view of a bigger tensor when padded); "
                  "elements go in logical order. F32→I32 is drawn without NaN/inf (the C cast is undefined). "
                  "The CPU aborts on F16/BF16→I32 (not implemented), so those are not listed. "
                  "Quantized destinations belong to the quant family"))
_add(OpSpec("REPEAT", "movement", lambda xs, c: mv.repeat(xs[0], c.param("ne")), _COPY_SIGS,
            {"*": _MOVED}, params={"ne": "target shape: each dim a multiple of the source's"},
            layouts="rows", validate=checks.repeatable,
            notes="np.tile. The CPU asserts nb00 == element size (it aborts on a source with dim 0 permuted "
                  "away), so only layouts keeping rows contiguous are drawn"))
_add(OpSpec("CONCAT", "movement", lambda xs, c: mv.concat(xs[0], xs[1], c.param("dim")),
            tuple(_sig(t, t) for t in ("f32", "f16", "bf16", "i32")), {"*": _MOVED},
            params={"dim": "ggml dim to join along (0..3)"}, layouts="any", validate=checks.concatenable,
            notes="both inputs may be strided or permuted"))
_add(OpSpec("GET_ROWS", "movement", _two(mv.get_rows),
            (_sig("f32", "i32"), _sig("f16", "i32", dst="f32"), _sig("bf16", "i32", dst="f32")),
            {"*": Tolerance("bit-exact: rows are copied, and F16/BF16 widen to F32 exactly")},
            layouts="rows", validate=checks.rows_in_range,
            notes="indices I32 [n_rows, ne2, ne3, 1] with duplicates, batched over dims 2 and 3; out-of-range "
                  "indices are rejected before the device (ggml asserts). The CPU copies rows as contiguous runs: a "
                  "source with dim 0 permuted away comes out silently wrong (supports_op says yes), so only "
                  "row-contiguous data layouts are drawn; the indices may have any layout. Quantized sources: "
                  "quant family (golden_inputs dequantizes them, the golden needs no change)"))
_add(OpSpec("ACC", "movement",
            lambda xs, c: mv.acc(xs[0], xs[1], [n // 4 for n in (4, c.param("nb1"), c.param("nb2"),
                                                                          c.param("nb3"))], c.param("offset") // 4),
            (_sig("f32", "f32"),),
            {"f32": Tolerance("elements under the view get one f32 addition (one rounding); the rest are copied",
                              ulp=0.5)},
            params={"nb1": "view row stride in bytes", "nb2": "view plane stride in bytes",
                    "nb3": "view batch stride in bytes", "offset": "view byte offset into a"},
            layouts="contiguous", validate=checks.acc_view_fits,
            notes="form=inplace builds ggml_acc_inplace on a ggml_dup of a, so the in-place kernel runs while "
                  "the input stays checkable; b may be strided with contiguous rows (the CPU asserts nb10 == 4)"))
_add(OpSpec("PAD", "movement", lambda xs, c: mv.pad(xs[0], c.param("lp"), c.param("rp")), (_sig("f32"),),
            {"f32": _MOVED}, params={"lp": "zeros before each dim (form=pad_ext only)", "rp": "zeros after each dim"},
            layouts="any", validate=checks.pads, notes="ggml_pad (end padding) or ggml_pad_ext (form=pad_ext)"))
_add(OpSpec("UPSCALE", "resample",
            lambda xs, c: rs.upscale_nearest(xs[0], c.param("ne") if c.variant == "interpolate" else (
                c.inputs[0].ne[0] * c.param("sf"), c.inputs[0].ne[1] * c.param("sf"), *c.inputs[0].ne[2:])),
            (_sig("f32"),),
            {"f32": Tolerance("bit-exact values: nearest-neighbour copies; the source index follows ggml's f32 "
                              "scale rule (trunc(f32(i)/f32(out/in))), which the golden models exactly")},
            params={"sf": "integer factor on dims 0 and 1 (ggml_upscale)", "ne": "form=interpolate: target shape"},
            layouts="any", validate=checks.upscale_shape,
            notes="nearest mode only; form=interpolate resizes all four dims to arbitrary sizes"))
_add(OpSpec("ARANGE", "sequence",
            lambda xs, c: seq.arange(c.param("start"), c.param("stop"), c.param("step")).reshape(1, 1, 1, -1),
            (Signature((), "f32"),),
            {"f32": Tolerance("ggml rounds one fused multiply-add start+step·i (0.5 ulp); an unfused multiply then "
                              "add also rounds step·i (0.5 ulp of it)", ulp=0.5, model=arange_model,
                              model_name="half_ulp_of_step_times_i")},
            params={"start": "first value (f32)", "stop": "exclusive end (f32), > start", "step": "increment (f32)"},
            layouts="contiguous", validate=checks.arange_range,
            notes="length (int64)ceilf((stop−start)/step) in f32; no inputs"))
_add(OpSpec("ARGSORT", "sequence",
            lambda xs, c: seq.argsort(xs[0], c.param("order") == "desc"), (_sig("f32", dst="i32"),),
            {"*": Tolerance("judged as a permutation: each row must be a permutation of 0..ne0−1 that puts the "
                            "values in order; tied values may come in any order (std::sort is unstable)")},
            params={"order": "asc or desc"}, specials=(np.inf, -np.inf, 0.0, -0.0), layouts="uniform_rows",
            notes="NaN is not drawn (its order is undefined). The CPU addresses row j at j·nb1: a permuted "
                  "source, or padding in dims 1–3, comes out silently wrong (supports_op says yes), so only "
                  "uniformly strided rows (dim-0 padding, offset) are drawn"))
_add(OpSpec("SUM_ROWS", "sequence", _one(seq.sum_rows), (_sig("f32"),),
            {"f32": Tolerance("ggml sums each row in double and rounds once; any f32 accumulation order stays "
                              "within (n−1)·2^-24·Σ|x| (Higham's bound) plus the final rounding",
                              ulp=0.5, model=sum_rows_model, model_name="f32_summation_bound")},
            layouts="rows", validate=checks.one_input,
            notes="output ne [1, ne1, ne2, ne3]; the CPU asserts nb00 == 4, so rows stay contiguous"))

# ---- quantized variants (Q4_0 / Q8_0) of ops defined above ---------------------------------------
# Quantized inputs reach the golden dequantized (golden_inputs); a quantized destination is judged
# in dequantized space by conformance.verdict_quant (one quant step per block; byte-exact for
# same-type copies), so these rows only describe the arithmetic around the quantization.
def _with_signatures(name: str, extra: tuple[Signature, ...], rows: dict[str, Tolerance] | None = None,
                     note: str = "", golden: Golden | None = None) -> None:
    from dataclasses import replace

    spec = OPS[name]
    OPS[name] = replace(spec, signatures=spec.signatures + extra, tolerance={**spec.tolerance, **(rows or {})},
                        notes=(spec.notes + " " + note).strip(), golden=golden or spec.golden)


_QUANT_COPY = Tolerance("quantized destination: judged in dequantized space, one quant step per block "
                        "(byte-exact when source and destination are the same quantized type)")
_with_signatures("GET_ROWS", (_sig("q4_0", "i32", dst="f32"), _sig("q8_0", "i32", dst="f32")),
                 note="Q4_0/Q8_0 rows are dequantized exactly: (q−8)·d or q·d with the F16 scale widened.")


def _cpy_golden(xs: list[np.ndarray], c: OpCase) -> np.ndarray:
    # a quantized destination keeps the exact source values; the verdict quantizes around them
    dst = "f32" if c.out_dtype in ("q4_0", "q8_0") else c.out_dtype
    return mv.cpy(xs[0], c.param("dst_ne"), dst)


_with_signatures("CPY", tuple(_sig(s, dst=q) for s in ("f32", "f16") for q in ("q4_0", "q8_0")),
                 {"q4_0": _QUANT_COPY, "q8_0": _QUANT_COPY}, golden=_cpy_golden,
                 note="F32/F16 → Q4_0/Q8_0 quantizes each 32-element block of the destination (contiguous); "
                      "NaN/inf are not drawn there (one non-finite value poisons its block's scale).")
for _copy_op in ("DUP", "CONT"):
    _with_signatures(_copy_op, (_sig("q4_0"), _sig("q8_0")), {"q4_0": _QUANT_COPY, "q8_0": _QUANT_COPY},
                     note="Same-type copies of quantized tensors move whole blocks: byte-exact.")
_with_signatures(
    "MUL_MAT", (_sig("q4_0", "f32", dst="f32"), _sig("q8_0", "f32", dst="f32")),
    {label: Tolerance(
        "exact on the dequantized weights; the device may round src1 first — ggml's CPU quantizes it to Q8_0 "
        "(≤ ½ step + F16 scale rounding per block), CANN casts it to F16 — then accumulates in f32 "
        "(K·2^-24·Σ|a||b|)", ulp=0.5, model=quant_matmul_model(), model_name="quant_matmul")
     for label in ("q4_0_f32_to_f32", "q8_0_f32_to_f32")},
    note="Quantized weights need K % 32 == 0 and contiguous rows (ggml-cann also requires contiguous src0/src1).")

def signature_of(case: OpCase) -> Signature:
    return Signature(tuple(t.dtype for t in case.inputs), case.out_dtype)


def tolerance_of(case: OpCase) -> Tolerance:
    return get(case.op).tolerance_for(case.out_dtype, signature_of(case).label())


def get(name: str) -> OpSpec:
    try:
        return OPS[name.upper()]
    except KeyError:
        raise KeyError(f"unknown op {name!r}; known ops: {', '.join(sorted(OPS))}") from None


def implemented() -> list[OpSpec]:
    return [spec for spec in OPS.values() if spec.implemented]


def golden_inputs(case: OpCase, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The float64 logical values the golden sees: quantized inputs are dequantized first."""
    out = []
    for spec, x in zip(case.inputs, inputs, strict=True):
        if spec.dtype in ("q4_0", "q8_0"):
            from golden import quant

            n = spec.nelements
            x = quant.dequantize(np.asarray(x, np.uint8).ravel(), spec.dtype, n).reshape(spec.np_shape)
        out.append(np.asarray(x, dtype=np.float64) if spec.dtype != "i32" else np.asarray(x))
    return out


def evaluate(case: OpCase, inputs: list[np.ndarray]) -> np.ndarray:
    """The exact golden result (float64, numpy order) of ``case`` on its inputs' logical values."""
    spec = get(case.op)
    if spec.golden is None:
        raise NotImplementedError(f"{case.op}: golden not implemented")
    if spec.validate is not None:
        spec.validate(case, inputs)
    return spec.golden([np.asarray(x) for x in inputs], case)

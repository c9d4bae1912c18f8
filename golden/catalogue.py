"""The op catalogue: the one place that lists every op the CANN seed claims to support.

For each op: its golden function, its parameters, the dtype combinations the seed's
``ggml_backend_cann_supports_op`` accepts (as ggml's CPU backend defines them), and the tolerance
rule per destination dtype with its error-model reason. Ops whose golden is not written yet are
listed with ``golden=None`` and show up as "not implemented" in ``conform ops`` and the report.

Adding an op: write its golden in the family module, add an :class:`OpSpec` here, a ggml
constructor in ``device/ggml/ops_<family>.py`` and a strategy in ``conformance/strategies``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from golden import binary, unary
from golden import movement as mv
from golden import movement_checks as checks
from golden import resample as rs
from golden import sequence as seq
from golden.case import OpCase
from golden.tolerance import EXACT, ROUNDED, Tolerance, f16_table_model, rounded_via_f32

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

    def tolerance_for(self, dst: str) -> Tolerance:
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

# ---- listed, golden not written yet ---------------------------------------------------------------
_PENDING = {
    "NONE": "movement", "VIEW": "movement", "RESHAPE": "movement", "PERMUTE": "movement",
    "TRANSPOSE": "movement", "DUP": "movement", "CONT": "movement", "CPY": "movement",
    "REPEAT": "movement", "CONCAT": "movement", "GET_ROWS": "movement", "ACC": "movement",
    "PAD": "movement", "UPSCALE": "movement", "ARANGE": "movement", "ARGSORT": "movement",
    "SUM_ROWS": "movement", "NORM": "norm", "RMS_NORM": "norm", "GROUP_NORM": "norm",
    "SOFT_MAX": "softmax", "DIAG_MASK_INF": "softmax", "ROPE": "rope", "MUL_MAT": "matmul",
    "IM2COL": "conv", "POOL_2D": "conv", "TIMESTEP_EMBEDDING": "embedding",
}  # fmt: skip
for _name, _family in _PENDING.items():
    if _name not in OPS:
        _add(OpSpec(_name, _family, None, (), {}, notes="golden not implemented yet"))


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

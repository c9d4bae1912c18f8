"""GGML_OP_GLU, the gated linear units: REGLU, GEGLU, SWIGLU, GEGLU_ERF, GEGLU_QUICK.

``y = act(x) · g`` elementwise. Two constructor forms:

* fused (``ggml_glu(a, op, swapped)``): each row of ``a`` holds both halves. With ``nc = ne0 // 2``
  (an odd ne0 leaves its last element unused), ``x = a[:nc]`` and ``g = a[nc:2·nc]``; ``swapped``
  exchanges them (``x = a[nc:2·nc]``, ``g = a[:nc]``). The output has ne0 = nc.
* split (``ggml_glu_split(a, b, op)``, case form ``split``): ``x = a`` and ``g = b``, same shape and
  type; the output has a's shape.

The activations are ggml's: REGLU ``x > 0 ? x·g : 0`` (NaN or non-positive x gives 0 whatever g is,
as ggml writes it), GEGLU the tanh GELU (golden/unary.py's ``gelu``), GEGLU_ERF the exact erf GELU
``½x(1 + erf(x/√2))``, GEGLU_QUICK ``x·σ(1.702x)``, SWIGLU ``x·σ(x)``. Exact float64 maths on the
stored values; each error model is the activation's error (in f32, or through ggml's F16 tables)
times |g|, plus the product's and the destination's roundings.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from golden.case import OpCase
from golden.dtypes import ulp as spacing
from golden.spec import InputLayouts, OpList, OpSpec, P, element_regimes, sig
from golden.tolerance import F32_EPS, Calibration, ErrorModel, Tolerance, finite_abs
from golden.unary import f16_table_model, gelu, gelu_f32_model, gelu_quick, gelu_quick_f32_model, silu

SPECS = OpList()
SPLIT = "split"  # the case form of ggml_glu_split
F32_SUBNORMAL_HALF_STEP = 2.0**-150  # an f32 product rounded in the subnormal range
# a non-finite gate meets only activations at least this large (F16's smallest normal): below it one
# correct implementation gets 0·inf = NaN where another gets ±inf (see the notes)
GATE_SAFE_ACTIVATION = 2.0**-14

Activation = Callable[[np.ndarray], np.ndarray]


def _f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def relu_gate(x: np.ndarray) -> np.ndarray:
    """ReLU as REGLU applies it: ``x > 0 ? x : 0`` (NaN gives 0)."""
    x = _f64(x)
    return np.where(x > 0, x, 0.0)


def gelu_erf(x: np.ndarray) -> np.ndarray:
    """The exact GELU ``½x(1 + erf(x/√2))``, written with erfc so negative x does not cancel."""
    x = _f64(x)
    erfc = np.vectorize(math.erfc, otypes=[np.float64])
    with np.errstate(over="ignore", invalid="ignore"):
        finite = np.isfinite(x)
        y = np.where(finite, 0.5 * x * erfc(np.where(finite, -x, 0.0) / math.sqrt(2.0)), 0.0)
    return np.where(finite, y, np.where(x > 0, x, np.where(np.isnan(x), np.nan, 0.0)))


ACTIVATIONS: dict[str, Activation] = {
    "REGLU": relu_gate,
    "GEGLU": gelu,
    "SWIGLU": silu,
    "GEGLU_ERF": gelu_erf,
    "GEGLU_QUICK": gelu_quick,
}


def halves(inputs: list[np.ndarray], case: OpCase) -> tuple[np.ndarray, np.ndarray]:
    """The activation input x and the gate g of a GLU case (numpy order, output-shaped)."""
    if case.form == SPLIT:
        return _f64(inputs[0]), _f64(inputs[1])
    a = _f64(inputs[0])
    nc = a.shape[-1] // 2
    first, second = a[..., :nc], a[..., nc : 2 * nc]
    return (second, first) if case.param("swapped", False) else (first, second)


def glu(inputs: list[np.ndarray], case: OpCase) -> np.ndarray:
    x, g = halves(inputs, case)
    with np.errstate(over="ignore", invalid="ignore"):
        if case.op == "REGLU":  # ggml: x > 0 ? x·g : 0, so the gate never reaches a closed unit
            return np.where(x > 0, x * g, 0.0)
        return ACTIVATIONS[case.op](x) * g


def check_glu(case: OpCase, inputs: list[np.ndarray]) -> None:
    """What ggml_glu / ggml_glu_split assert, and the fused form's non-empty output."""
    if case.form not in ("", SPLIT):
        raise ValueError(f"{case.op}: unknown form {case.form!r} (fused: none, or {SPLIT})")
    if case.form == SPLIT:
        if len(case.inputs) != 2:
            raise ValueError(f"{case.op}: the split form takes two tensors (x, gate), got {len(case.inputs)}")
        a, b = case.inputs
        if a.ne != b.ne or a.dtype != b.dtype:
            raise ValueError(f"{case.op}: split halves must have the same shape and type "
                             f"(ggml_glu_split asserts it): {a.dtype}{list(a.ne)} vs {b.dtype}{list(b.ne)}")
        if "swapped" in case.params_dict:
            raise ValueError(f"{case.op}: 'swapped' belongs to the fused form (ggml_glu_split has none)")
    else:
        if len(case.inputs) != 1:
            raise ValueError(f"{case.op}: the fused form takes one tensor, got {len(case.inputs)}")
        if case.inputs[0].ne[0] < 2:
            raise ValueError(f"{case.op}: the fused form needs ne0 ≥ 2 (ne0 // 2 output columns)")


# ---- error models: the activation's error (absolute, before the gate), times |g| -----------------
ActivationBound = Callable[[OpCase, np.ndarray, np.ndarray], np.ndarray]


def gated(bound: ActivationBound, name: str) -> ErrorModel:
    """``|Δact(x)|·|g|``: a bound on the activation's error carried through the product with g."""

    def model(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray) -> np.ndarray:
        x, g = halves(inputs, case)
        with np.errstate(over="ignore", invalid="ignore"):
            act = ACTIVATIONS[case.op](x)
            return bound(case, x, act) * finite_abs(g)

    model.__name__ = f"gated({name})·|g|"
    return model


def table_bound(max_slope: float) -> ActivationBound:
    """ggml's CPU evaluates GELU/GELU_QUICK through an F16 table: the unary GELU model of the
    activation (golden/unary.py ``f16_table_model``, input rounding for f32/BF16 inputs)."""
    table = f16_table_model(max_slope)
    return lambda case, x, act: table(case, [x], act)


def gelu_f32_bound(case: OpCase, x: np.ndarray, act: np.ndarray) -> np.ndarray:
    """tanh GELU evaluated in f32 from its formula (golden/unary.py ``gelu_f32_model``, the GELU f32 row)."""
    return gelu_f32_model(case, [x], act)


def gelu_quick_f32_bound(case: OpCase, x: np.ndarray, act: np.ndarray) -> np.ndarray:
    """x·σ(1.702x) evaluated in f32: 4 ulp and the rounding of 1.702x (the GELU_QUICK f32 row)."""
    return 4 * spacing(act, "f32") + gelu_quick_f32_model(case, [x], act)


def silu_bound(case: OpCase, x: np.ndarray, act: np.ndarray) -> np.ndarray:
    """SILU in f32: expf(−x) within 2.5 ulp (5u), then 1+e and x/(1+e): 7u ≤ 8u·|s|; exp(−x)
    overflows for x < −88.7 and gives −0 where |s| < 4e-37 (the SILU row of golden/unary.py)."""
    return 8 * F32_EPS * finite_abs(act) + 4e-37


def erf_gelu_bound(case: OpCase, x: np.ndarray, act: np.ndarray) -> np.ndarray:
    """½x(1 + erff(x·c)) in f32: x·c with c = f32(1/√2) is 2u relative, which moves erf by at most
    (2/√π)·max(t·e^{−t²})·2u < u; erff within 2 ulp (≤ 2u absolute, values below 1); 1 + erf rounds
    by ≤ u. So the bracket is within 4u absolute (it cancels for negative x), and ½x·bracket adds u."""
    return 2 * F32_EPS * finite_abs(x) + F32_EPS * finite_abs(act)


def _rows(bound: ActivationBound, name: str, what: str, measured: tuple[float, float],
          f32: tuple[ActivationBound, str, str] | None = None,
          calibration: Calibration = Calibration.DEFINITION) -> dict[str, Tolerance]:
    """f32: the activation bound times |g|, then the product's rounding (the destination's 0.5 ulp).
    F16/BF16: the same in f32 (the product rounds by u, or 2^-150 where subnormal), then the
    destination rounding. ``measured``: the worst error_ratio on ggml's CPU (nightly) for F32, F16.
    ``f32``: another (bound, name, what) for F32 inputs, where F16 intermediates are a shortcut
    rather than the type's precision (the GELU F16 table: a known deviation of ggml's CPU).
    ``calibration``: every row's, since ``measured`` quotes ggml's CPU."""
    model = gated(bound, name)
    worst = "ggml CPU nightly: ≤ {:.4g} of the allowance (at results rounded to a tie or into the subnormal range)"
    f32_row = Tolerance(f"{what}, times |g|; x·g rounds once (0.5 ulp). {worst.format(measured[0])}", ulp=0.5,
                        model=model, model_name=model.__name__, calibration=calibration)
    if f32 is not None:
        f32_model = gated(f32[0], f32[1])
        f32_row = Tolerance(f"{f32[2]}, times |g|; x·g rounds once (0.5 ulp). ggml's CPU goes through its F16 "
                            "table instead: a known deviation of ggml:CPU (device/ggml/known_bugs_cpu.py)", ulp=0.5,
                            model=f32_model, model_name=f32_model.__name__, calibration=calibration)
    return {
        "f32": f32_row,
        "f16": Tolerance(f"{what}, times |g|; x·g in f32 (u), then F16 (0.5 ulp). {worst.format(measured[1])}",
                         ulp=0.5, rtol=F32_EPS, atol=F32_SUBNORMAL_HALF_STEP, model=model,
                         model_name=model.__name__, calibration=calibration),
        "bf16": Tolerance(f"{what}, times |g|; x·g in f32 (u), then BF16 (0.5 ulp). Not measured on ggml's CPU "
                          "(it aborts on BF16)", ulp=0.5, rtol=F32_EPS, atol=F32_SUBNORMAL_HALF_STEP, model=model,
                          model_name=model.__name__, calibration=calibration),
    }


_GLU_SIGS = (sig("f32"), sig("f16"), sig("bf16"), sig("f32", "f32"), sig("f16", "f16"), sig("bf16", "bf16"))
_GLU_PARAMS = {"swapped": P("fused form only: x is the second half of each row and the first half gates it",
                            bool, optional=True)}
_GLU_NOTES = (
    "Signatures with one source are the fused form (ggml_glu, swapped drawn both ways, odd ne0 whose last "
    "element is unused); two sources are the split form (ggml_glu_split). ggml asserts "
    "ggml_is_contiguous_1 on each source (rows may be padded; planes packed). ggml-cann's supports_op "
    "claims every type; ggml's CPU computes F32 and F16 and aborts on BF16 (a known CPU bug). A "
    "non-finite gate is drawn only against an activation of at least 2^-14: where the activation is 0 "
    "(or underflows in one implementation) 0·inf and 0·NaN have no agreed value (ggml's CPU REGLU "
    "short-circuits to 0; ReLU-then-multiply gives NaN)")


def _glu_spec(name: str, tolerance: dict[str, Tolerance], specials: tuple[float, ...], notes: str,
              max_abs_input: float | None = None) -> OpSpec:
    return SPECS.add(OpSpec(
        name=name, family="glu", golden=glu, signatures=_GLU_SIGS, tolerance=tolerance, params=_GLU_PARAMS,
        validate=check_glu, input_layouts=InputLayouts.PADDED_ROWS, specials=specials,
        max_abs_input=max_abs_input, structured_inputs=True, notes=notes + ". " + _GLU_NOTES,
        regimes=(*element_regimes(elements=_glu_outputs),)))


def _glu_outputs(case: OpCase) -> int:
    """Elements a GLU writes: half of each fused row, all of a split one."""
    ne = case.inputs[0].ne
    return (ne[0] if case.form == SPLIT else ne[0] // 2) * ne[1] * ne[2] * ne[3]


_NO_NEG_INF = (np.nan, np.inf, 0.0, -0.0)
_REGLU_EXACT = "ReLU is exact and x·g is one rounding (F16/BF16 products are exact in f32 and round once)"
_glu_spec("REGLU", {"*": Tolerance(_REGLU_EXACT + "; ggml CPU nightly: ≤ 1.0 of the allowance (products that "
                                   "land on a tie of the destination are half an ulp off, as they must be)", ulp=0.5,
                                   calibration=Calibration.GGML_CPU)},
          specials=(np.nan, np.inf, -np.inf, 0.0, -0.0),
          notes="ggml: x > 0 ? x·g : 0, so NaN and non-positive x give 0 whatever the gate")
GEGLU_TABLE = "tanh GELU within ggml's F16-table model (golden/unary.py GELU)"
GEGLU_QUICK_TABLE = "x·σ(1.702x) within ggml's F16-table model (golden/unary.py GELU_QUICK)"
_glu_spec("GEGLU", _rows(table_bound(1.13), "f16_table(max_slope=1.13)", GEGLU_TABLE, (0.9815, 0.9987),
                         f32=(gelu_f32_bound, "gelu_f32", "tanh GELU evaluated in f32 (the GELU f32 row)"),
                         calibration=Calibration.GGML_CPU),
          specials=_NO_NEG_INF, max_abs_input=65504.0,
          notes="ggml's tanh GELU; the CPU's F32 path maps x ≤ −10 to 0 and x ≥ 10 to x·g, and otherwise "
                "looks GELU up in its F16 table. −inf is not drawn (F32 path 0, F16 table NaN)")
_glu_spec("SWIGLU", _rows(silu_bound, "silu_f32", "SILU in f32 within 4 ulp (+4e-37 where exp(−x) overflows)",
                          (0.9999, 1.0), calibration=Calibration.GGML_CPU),
          specials=_NO_NEG_INF,
          notes="x·σ(x); −inf is not drawn (x/(1+exp(−x)) is NaN there, the limit 0)")
_glu_spec("GEGLU_ERF", _rows(erf_gelu_bound, "erf_gelu_f32",
                             "½x(1+erff(x/√2)) in f32: the bracket within 4u absolute (erff ≤ 2 ulp), ½x·(…) "
                             "one more rounding", (0.9998, 1.0), calibration=Calibration.GGML_CPU),
          specials=_NO_NEG_INF,
          notes="the exact (erf) GELU; −inf is not drawn (½x(1+erf) is −inf·0 there)")
_glu_spec("GEGLU_QUICK", _rows(table_bound(1.1), "f16_table(max_slope=1.1)", GEGLU_QUICK_TABLE, (0.9583, 0.9993),
                               f32=(gelu_quick_f32_bound, "gelu_quick_f32",
                                    "x·σ(1.702x) evaluated in f32 (the GELU_QUICK f32 row)"),
                               calibration=Calibration.GGML_CPU),
          specials=_NO_NEG_INF, max_abs_input=65504.0,
          notes="x·σ(1.702x); the CPU's F32 path always goes through the F16 table. −inf is not drawn")


# ggml's CPU evaluates GEGLU/GEGLU_QUICK of F32 through its F16 GELU table: the rows it is held to as a
# known deviation (device/ggml/known_bugs_cpu.py), measured ≤ 0.98 / 0.96 of them nightly
GEGLU_CPU_TABLE = _rows(table_bound(1.13), "f16_table(max_slope=1.13)", GEGLU_TABLE, (0.9815, 0.9987))["f32"]
GEGLU_QUICK_CPU_TABLE = _rows(table_bound(1.1), "f16_table(max_slope=1.1)", GEGLU_QUICK_TABLE,
                              (0.9583, 0.9993))["f32"]

"""Unit tests of the golden core: geometry, dtypes, case ids, catalogue invariants."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.strategies import ALL_PERMS, layouts, shapes
from golden import catalogue, dtypes, geometry
from golden.case import Layout, OpCase, TensorSpec, parse_case_id

# Facts from the reference folder beside the project, vendored by scripts/vendor_reference_facts.py
REFERENCE_FACTS = json.loads((Path(__file__).parent / "data" / "reference_facts.json").read_text(encoding="utf-8"))


@given(ne=shapes(max_elements=4096), layout=layouts(perms=ALL_PERMS),
       dtype=st.sampled_from(["f32", "f16", "bf16", "i32"]))
def test_pack_unpack_round_trip(ne, layout, dtype) -> None:
    spec = TensorSpec(dtype, ne, layout)
    rng = np.random.default_rng(0)
    values = dtypes.round_to(rng.uniform(-100, 100, size=spec.np_shape), dtype)
    base = geometry.pack(values, spec)
    assert base.nbytes == geometry.storage_of(spec).base_nbytes
    np.testing.assert_array_equal(geometry.unpack(base, spec), values)


def test_permute_matches_ggml_definition() -> None:
    # ggml_permute(a, 2, 0, 1, 3): source dim k goes to position ax_k -> ne = [a1, a2, a0, a3]
    assert geometry.permute_ne((10, 20, 30, 40), (2, 0, 1, 3)) == (20, 30, 10, 40)
    a = np.arange(2 * 3 * 4 * 5).reshape(5, 4, 3, 2)  # ggml ne = [2, 3, 4, 5]
    out = np.transpose(a, geometry.numpy_axes_for_permute((2, 0, 1, 3)))
    assert out.shape == tuple(reversed(geometry.permute_ne((2, 3, 4, 5), (2, 0, 1, 3))))
    # element (i0, i1, i2, i3) of the source lands at position (i1, i2, i0, i3)
    assert out[4, 1, 3, 2] == a[4, 3, 2, 1]


def test_cyclic_tiling_is_not_numpy_broadcasting() -> None:
    b = np.arange(3.0).reshape(1, 1, 1, 3)  # ne0 = 3 tiles into ne0 = 6
    assert geometry.can_repeat((3, 1, 1, 1), (6, 2, 1, 1))
    assert not geometry.can_repeat((4, 1, 1, 1), (6, 2, 1, 1))
    np.testing.assert_array_equal(geometry.tile_to(b, (1, 1, 2, 6))[0, 0, 1], [0, 1, 2, 0, 1, 2])


def test_row_sizes_match_ggml() -> None:
    assert dtypes.row_size("q4_0", 64) == 36
    assert dtypes.row_size("q8_0", 4096) == 4352
    assert dtypes.row_size("f16", 7) == 14
    with pytest.raises(ValueError):
        dtypes.row_size("q4_0", 33)


def _bf16_reference(x: float) -> float:
    """Round-to-nearest-even on the upper 16 bits, one value at a time."""
    bits = int(np.float32(x).view(np.uint32))
    if (bits & 0x7FFFFFFF) > 0x7F800000:
        return float("nan")
    lower = bits & 0xFFFF
    upper = bits >> 16
    if lower > 0x8000 or (lower == 0x8000 and upper & 1):
        upper += 1
    return float(np.uint32(upper << 16).view(np.float32))


@given(st.floats(width=32, allow_nan=False))
def test_bf16_rounding(x: float) -> None:
    got = float(dtypes.round_to(np.array([x]), "bf16")[0])
    assert got == _bf16_reference(x)


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-65504, max_value=65504))
def test_f16_rounding_is_round_to_nearest_even(x: float) -> None:
    got = np.float16(dtypes.round_to(np.array([x]), "f16")[0])
    # no representable neighbour of the result is nearer to x; on a tie the result is even
    with np.errstate(over="ignore"):  # the neighbour of ±65504 is ±inf
        neighbours = (np.nextafter(got, np.float16(np.inf)), np.nextafter(got, np.float16(-np.inf)))
    for neighbour in neighbours:
        d_got, d_nb = abs(float(got) - x), abs(float(neighbour) - x)
        assert d_got <= d_nb
        if d_got == d_nb:
            assert int(got.view(np.uint16)) % 2 == 0


@given(ne=shapes(max_elements=512), layout=layouts(perms=ALL_PERMS), seed=st.integers(0, 2**32 - 1),
       scale=st.floats(allow_nan=False, width=32))
def test_case_id_round_trip(ne, layout, seed, scale) -> None:
    case = OpCase("SCALE", (TensorSpec("f32", ne, layout, "blk.0.attn_q.weight"),),
                  params=(("s", scale), ("bias", 0.0)), data_seed=seed, distribution="dense")
    again = parse_case_id(case.case_id)
    assert again == case and again.case_id == case.case_id


def test_case_id_round_trip_keeps_params_named_like_tensor_fields() -> None:
    """UPSCALE, RESHAPE and REPEAT take a parameter ``ne``: it must not overwrite the input's shape."""
    case = OpCase("UPSCALE", (TensorSpec("f32", (3, 4, 1, 1)),), params=(("ne", (5, 6, 1, 1)),),
                  form="interpolate", data_seed=7)
    again = parse_case_id(case.case_id)
    assert again == case and again.inputs[0].ne == (3, 4, 1, 1)


def test_layout_labels_round_trip() -> None:
    lay = Layout(perm=(0, 2, 1, 3), pad=(1, 0, 2, 0), offset=5)
    assert Layout.from_label(lay.label()) == lay
    assert Layout.from_label("contiguous") == Layout()


def test_catalogue_lists_every_op_the_seed_supports() -> None:
    seed = REFERENCE_FACTS["ggml_cann_seed_supports_op"]
    claimed = set(seed["ops"]) | set(seed["unary_ops"])
    claimed -= {"UNARY", "MUL_MAT_ID"}  # UNARY is the family; MUL_MAT_ID is answered false
    assert claimed <= set(catalogue.OPS), sorted(claimed - set(catalogue.OPS))


def test_every_implemented_op_has_a_reasoned_tolerance_per_destination() -> None:
    for spec in catalogue.implemented():
        assert spec.signatures, spec.name
        for sig in spec.signatures:
            tol = spec.tolerance_for(sig.dst)
            assert len(tol.reason) > 15, f"{spec.name}/{sig.dst}: tolerance without an error-model reason"


def test_gelu_quick_tolerance_rejects_erf_gelu() -> None:
    """B1: ggml-cann computes GELU_QUICK as erf-GELU; 0.02 off at x≈−2.27 must exceed the bound."""
    x = np.array([[[[-2.27]]]])
    case = OpCase("GELU_QUICK", (TensorSpec("f32", (1, 1, 1, 1)),))
    exact = catalogue.evaluate(case, [x])
    allowed = catalogue.get("GELU_QUICK").tolerance_for("f32").allowed(case, [x], exact, "f32")
    import math

    erf_gelu = 0.5 * -2.27 * (1 + math.erf(-2.27 / math.sqrt(2)))
    assert abs(erf_gelu - exact[0, 0, 0, 0]) > 5 * allowed[0, 0, 0, 0]


def test_ulp_is_finite_at_the_largest_values() -> None:
    """np.spacing(FLT_MAX) is inf; a tolerance built on it would accept anything there."""
    f32_max, f16_max = float(np.finfo(np.float32).max), 65504.0
    assert dtypes.ulp(np.array([f32_max]), "f32")[0] == 2.0**104
    assert dtypes.ulp(np.array([f16_max]), "f16")[0] == 32.0
    assert dtypes.ulp(np.array([1.0]), "f32")[0] == 2.0**-23


def test_catalogue_covers_every_op_of_ggml_cann_0_20_2() -> None:
    """Every one of the 81 ops ggml-cann 0.20.2's supports_op accepts (the reference index) is in the
    catalogue; ops beyond them are welcome (added by README's "Adding an op")."""
    index = REFERENCE_FACTS["ggml_cann_0_20_2_ops"]
    wanted = set(index["seed_ops"]) | set(index["new_ops"])
    assert len(wanted) == 81  # the reference index parsed whole
    missing = sorted(wanted - set(catalogue.OPS))
    assert not missing, (f"ggml-cann 0.20.2 ops missing from the catalogue: {missing}; add each by README's "
                         "'Adding an op' (golden/<family>.py: its function and OpSpec)")

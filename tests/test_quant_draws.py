"""Issue 37 (Deliver 2): every weight format is drawn as src0 of MUL_MAT, MUL_MAT_ID and GET_ROWS, from raw
random blocks whose super-scale fields (Format.scale_fields) are the only bytes held to a sane range."""

from __future__ import annotations

import contextlib
import io
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, find, settings

from conformance import data
from conformance.cases import quant as quant_cases
from conformance.cli import listing
from device.base import Unsupported
from device.ggml import graph
from golden import catalogue, dtypes, formats, matmul
from golden.case import OpCase, TensorSpec

WITH_TO_FLOAT = [name for name, fmt in formats.FORMATS.items() if fmt.has_to_float]
NEW_FORMATS = [w for w in dtypes.DRAWN_WEIGHT_TYPES if w not in dtypes.DRAWN_QUANT_TYPES]


def _doubled_scales(fmt: formats.Format, blocks: np.ndarray) -> np.ndarray:
    """The same blocks with every scale field's value doubled (F16/f32 times 2, the E8M0 exponent plus one,
    the UE4M3 exponent field plus one: the byte plus 8, for a normal scale below exponent 15)."""
    out = blocks.copy()
    if fmt.scale_encoding == "e8m0":
        out[:, list(fmt.scale_fields)] += np.uint8(1)
    elif fmt.scale_encoding == "ue4m3":
        out[:, list(fmt.scale_fields)] += np.uint8(8)
    else:
        fmt.write_scales(out, fmt.read_scales(blocks) * 2)
    return out


def _scale_bytes(fmt: formats.Format, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    """Scale fields to write for the doubling test: F16/f32 values in ±2, E8M0 exponents 100..139, UE4M3
    bytes of exponent 1..13 (normal, and the byte plus 8 doubles them without reaching 0x7F), any mantissa
    and bit 7."""
    shape = (n_blocks, len(fmt.scale_fields))
    if fmt.scale_encoding == "e8m0":
        return rng.integers(100, 140, size=shape).astype(np.float64)
    if fmt.scale_encoding == "ue4m3":
        return ((rng.integers(1, 14, size=shape) << 3) | rng.integers(0, 8, size=shape)
                | (rng.integers(0, 2, size=shape) << 7)).astype(np.float64)
    return rng.uniform(-2.0, 2.0, size=shape)


def test_every_format_with_to_float_is_drawn_as_weights() -> None:
    """A format the golden reads but the op tier never draws is a hole: it joins by DRAWN_WEIGHT_TYPES, or is
    listed (with its reason) in NOT_YET_DRAWN_WEIGHT_TYPES, never silently left out."""
    assert not set(dtypes.DRAWN_WEIGHT_TYPES) & set(dtypes.NOT_YET_DRAWN_WEIGHT_TYPES)
    assert sorted(WITH_TO_FLOAT) == sorted(dtypes.DRAWN_WEIGHT_TYPES + dtypes.NOT_YET_DRAWN_WEIGHT_TYPES)


def test_every_drawn_format_declares_its_scale_fields() -> None:
    assert {q for q in formats.TYPES if not formats.get(q).scale_fields} == set()
    assert formats.get("iq1_m").scale_encoding == "f16_nibbles"
    assert formats.get("nvfp4").scale_encoding == "ue4m3"


@pytest.mark.parametrize("qtype", formats.TYPES)
def test_scale_fields_are_the_blocks_super_scales(qtype: str) -> None:
    """Doubling exactly the listed fields doubles every dequantized value, bit for bit (each value is a
    product or difference of products of those fields: a field left out, or a quant byte listed, breaks it);
    zeroing the F16/f32/UE4M3 fields zeroes every value."""
    fmt = formats.get(qtype)
    assert fmt.scale_fields, f"{qtype}: no scale_fields"
    width = formats.format.SCALE_FIELD_BYTES[fmt.scale_encoding]
    spans = sorted((o, o + width) for o in fmt.scale_fields)
    assert all(end <= fmt.type_size for _, end in spans)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:], strict=False))
    rng = np.random.default_rng(37)
    blocks = rng.integers(0, 256, size=(64, fmt.type_size), dtype=np.uint8)
    written = _scale_bytes(fmt, 64, rng)
    fmt.write_scales(blocks, written)
    if fmt.scale_encoding in ("f16", "f16_nibbles", "f32"):
        written = written.astype(np.float32 if fmt.scale_encoding == "f32" else np.float16).astype(np.float64)
    np.testing.assert_array_equal(fmt.read_scales(blocks), written)  # read_scales reads what was written
    n = 64 * fmt.block_size
    plain = fmt.dequantize(blocks, n)
    assert np.isfinite(plain).all() and np.count_nonzero(plain) > n // 2
    np.testing.assert_array_equal(fmt.dequantize(_doubled_scales(fmt, blocks), n), plain * 2)
    if fmt.scale_encoding != "e8m0":  # E8M0 has no zero; UE4M3's byte 0 reads 0
        zeroed = blocks.copy()
        fmt.write_scales(zeroed, np.zeros((64, len(fmt.scale_fields))))
        assert not np.any(fmt.dequantize(zeroed, n))


@pytest.mark.parametrize("qtype", NEW_FORMATS)
def test_random_blocks_hold_every_bit_pattern_and_sane_values(qtype: str) -> None:
    fmt = formats.get(qtype)
    rng = np.random.default_rng(7)
    blocks = data.random_blocks(rng, qtype, 256)
    scale_mask = np.zeros(fmt.type_size, np.uint8)  # the bits of each byte that are a scale field's
    for offset in fmt.scale_fields:
        for i, bits in enumerate(formats.format.SCALE_FIELD_BITS[fmt.scale_encoding]):
            scale_mask[offset + i] |= np.uint8(bits)
    if fmt.scale_encoding == "ue4m3":
        scale_mask[list(fmt.scale_fields)] = 0x78  # the exponent field is tamed; mantissa and bit 7 are any bits
    ones = np.unpackbits(blocks[:, :, None], axis=2).sum(axis=0)  # (bytes, 8): blocks with each bit set
    free = np.unpackbits(~scale_mask[:, None], axis=1).astype(bool)  # (bytes, 8): bits no scale holds
    assert free.any() and ones[free].min() > 0 and ones[free].max() < 256, "a quant or sub-block scale bit never varies"
    values = fmt.dequantize(blocks, 256 * fmt.block_size).astype(np.float64)
    assert np.isfinite(values).all()
    assert np.abs(values).max() <= 256  # finite and normal-range in F16 too (a backend may dequantize to F16)
    assert np.abs(values).max() > 0


@pytest.mark.parametrize("qtype", NEW_FORMATS)
def test_each_weight_format_has_its_signatures_and_rows(qtype: str) -> None:
    expected = {"MUL_MAT": [f"{qtype}_f32_to_f32", f"{qtype}_f16_to_f32"],
                "MUL_MAT_ID": [f"{qtype}_f32_i32_to_f32"], "GET_ROWS": [f"{qtype}_i32_to_f32"]}
    for op, labels in expected.items():
        spec = catalogue.get(op)
        drawn = [s.label() for s in spec.quantized_signatures]
        for label in labels:
            assert label in drawn, f"{op} does not draw {label}"
            if op != "GET_ROWS":  # a product row of its own, never the F32 dot-product fallback
                assert spec.tolerance_key("f32", label) == label
    assert qtype in matmul.WEIGHT_ACTIVATIONS


def test_existing_quantized_signatures_keep_their_order() -> None:
    """Test ids and draws of Q4_0/Q8_0 stay as they were: the new formats come after them."""
    labels = [s.label() for s in catalogue.get("MUL_MAT").quantized_signatures]
    assert labels[:4] == ["q4_0_f32_to_f32", "q8_0_f32_to_f32", "q4_0_f16_to_f32", "q8_0_f16_to_f32"]
    assert [s.label() for s in catalogue.get("GET_ROWS").quantized_signatures][:2] == [
        "q4_0_i32_to_f32", "q8_0_i32_to_f32"]


@pytest.mark.parametrize(("qtype", "k"), [("q4_k", 768), ("q6_k", 2304), ("q5_0", 96), ("mxfp4", 1056)])
def test_matmul_draws_reach_block_edges_and_tile_rows(qtype: str, k: int) -> None:
    """K at an odd multiple of the (super-)block, weight rows one past a 32-row tile, and src1 past the
    matrix-vector path are each drawn."""
    from conformance.cases import strategy_for

    sig = next(s for s in catalogue.get("MUL_MAT").quantized_signatures if s.label() == f"{qtype}_f32_to_f32")
    quick = settings(max_examples=2000, suppress_health_check=list(HealthCheck), database=None,
                     phases=[Phase.generate])
    for wanted in (lambda c: c.inputs[0].ne[0] == k, lambda c: c.inputs[0].ne[1] == 33,
                   lambda c: c.inputs[1].ne[1] > 8):
        found = find(strategy_for("MUL_MAT", sig), wanted, settings=quick)
        assert found.inputs[0].ne[0] % dtypes.block_size(qtype) == 0


def test_row_sizes_fall_on_block_and_super_block_edges() -> None:
    for block, sizes in quant_cases.FORMAT_ROW_SIZES.items():
        assert all(k % block == 0 for k in sizes)
        assert any((k // block) % 2 == 1 and k > block for k in sizes), "no odd multiple of the block"
        assert any(k % 256 == 0 and (k // 256) % 2 == 1 and k > 256 for k in sizes), "no odd multiple of 256"
    assert any(k % 256 for k in quant_cases.FORMAT_ROW_SIZES[32]), "32-block formats: K off the super-block"


def _case(dtype: str, distribution: str, k: int = 256) -> OpCase:
    return OpCase("GET_ROWS", (TensorSpec(dtype, (k, 3, 1, 1)), TensorSpec("i32", (2, 1, 1, 1))),
                  dst="f32", distribution=distribution)


@pytest.mark.parametrize("qtype", ["q4_1", "q5_0", "q5_1"])
def test_formats_with_a_quantizer_get_quantized_real_data_and_raw_blocks(qtype: str) -> None:
    fmt = formats.get(qtype)
    quantized = data.weight_format_input(np.random.default_rng(1), _case(qtype, "uniform").inputs[0], "uniform")
    values = fmt.dequantize(quantized, 3 * 256)
    np.testing.assert_array_equal(fmt.quantize(values.reshape(3, 256), "reference"), quantized.reshape(-1))
    assert np.abs(values).max() <= 1.0 + 1e-3
    raw = data.weight_format_input(np.random.default_rng(1), _case(qtype, "wide").inputs[0], "wide")
    assert raw.shape == (1, 1, 3, fmt.row_size(256))
    assert not np.array_equal(fmt.quantize(fmt.dequantize(raw, 768).reshape(3, 256), "reference"), raw.reshape(-1))


def test_a_type_the_bound_library_does_not_name_is_unsupported() -> None:
    graph._KNOWN_TYPES.clear()
    older = SimpleNamespace(version="0.0.1", ggml_type_name=lambda t: b"TYPE_Q4_0_4_4 REMOVED" if t == 39 else b"")
    with pytest.raises(Unsupported, match="has no mxfp4 type"):
        graph.check_type_known(older, "mxfp4")  # type: ignore[arg-type]
    current = SimpleNamespace(version="0.25.1", ggml_type_name=lambda t: b"q4_K")
    graph.check_type_known(current, "q4_k")  # type: ignore[arg-type]
    graph._KNOWN_TYPES.clear()


def test_conform_ops_lists_every_quantized_type_with_its_ops() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert listing.cmd_ops(SimpleNamespace(json=False)) == 0
    lines = {line.split()[0]: line for line in out.getvalue().split("QUANTIZED TYPE", 1)[1].splitlines()[1:] if line}
    for qtype in dtypes.QUANT_TYPES:
        assert qtype in lines, f"{qtype} missing from conform ops"
    for qtype in dtypes.DRAWN_WEIGHT_TYPES:
        assert all(op in lines[qtype] for op in ("MUL_MAT,", "MUL_MAT_ID", "GET_ROWS")), lines[qtype]
    assert "activation format" in lines["q8_k"]


def test_nvfp4_scale_bit7_only_under_special() -> None:
    """NVFP4's UE4M3 scale bytes carry bit 7 (ignored by ggml's to_float, never written by its quantizer)
    only under the special distribution; the other draws are the same bytes with it cleared."""
    spec = TensorSpec("nvfp4", (512, 4, 1, 1))
    drawn = {d: data.weight_format_input(np.random.default_rng(9), spec, d).reshape(-1, 36)
             for d in ("special", "wide", "uniform")}
    assert (drawn["special"][:, :4] & 0x80).any()
    for distribution in ("wide", "uniform"):
        assert not (drawn[distribution][:, :4] & 0x80).any(), distribution
        np.testing.assert_array_equal(drawn[distribution], drawn["special"] & np.array([0x7F] * 4 + [0xFF] * 32,
                                                                                        np.uint8))

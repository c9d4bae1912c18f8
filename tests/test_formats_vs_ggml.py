"""golden.formats against ggml itself (the wheel's libraries through ctypes), bit for bit.

* ``dequantize`` == ``ggml_get_type_traits(t)->to_float`` on random bytes (so random, zero,
  subnormal, inf and NaN f16 scales all occur), for every type ggml has a to_float for.
* ``quantize(x, t, "reference")`` == ``ggml_quantize_chunk`` (or ``from_float_ref`` where the chunk
  quantizer has no case), ``"x86"`` == the CPU backend's ``from_float``, on data with NaN, ±inf,
  ±0 and subnormals mixed in.
"""

from __future__ import annotations

import numpy as np
import pytest

from device.base import DeviceError
from device.ggml import quant as ggml_quant
from golden import dtypes, formats
from golden.case import OpCase, TensorSpec

try:
    FNS = ggml_quant.functions()
except (OSError, ImportError, DeviceError) as exc:
    pytest.skip(f"ggml CPU libraries not loadable: {exc}", allow_module_level=True)

TO_FLOAT_TYPES = [name for name, f in formats.FORMATS.items() if f.has_to_float]


def _skip_unless_bound(fmt: formats.Format) -> None:
    if not ggml_quant.has_type(fmt.ggml_name):
        pytest.skip(f"ggml {FNS.lib.version} at {FNS.lib.lib_dir} predates {fmt.ggml_name} "
                    f"(no dequantize_row_{fmt.ggml_name})")


def _ggml_quantize(fmt: formats.Format, x: np.ndarray, path: str) -> np.ndarray:
    x = np.ascontiguousarray(x, np.float32)
    out = np.zeros(x.size // fmt.block_size * fmt.type_size, np.uint8)
    if path == "chunk":
        FNS.quantize_chunk(fmt.ggml_type, x.ctypes.data, out.ctypes.data, 0, x.shape[0], x.shape[1], None)
    elif path == "ref":
        FNS.type_traits(fmt.ggml_type).contents.from_float_ref(x.ctypes.data, out.ctypes.data, x.size)
    else:
        FNS.type_traits_cpu(fmt.ggml_type).contents.from_float(x.ctypes.data, out.ctypes.data, x.size)
    return out


def _special(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    x = (rng.standard_normal(shape) * rng.uniform(1e-3, 1e3, (shape[0], 1))).astype(np.float32)
    u = rng.random(shape)
    nan_payload = np.array(0x7F812345, np.uint32).view(np.float32)
    for low, high, value in ((0, 0.005, np.nan), (0.005, 0.01, nan_payload), (0.01, 0.02, np.inf),
                             (0.02, 0.03, -np.inf), (0.03, 0.06, 0.0), (0.06, 0.08, -0.0), (0.08, 0.1, 1e-40)):
        x[(u >= low) & (u < high)] = value
    x[:4] = 0.0  # whole zero blocks
    x[4:6] = 2.0**-130  # tiny blocks whose reciprocal scale overflows
    return x


def test_registry_agrees_with_ggml_type_traits() -> None:
    bound = [fmt for fmt in formats.FORMATS.values() if ggml_quant.has_type(fmt.ggml_name)]
    assert {"q4_0", "q8_0", "q4_k", "iq2_xxs"} <= {fmt.name for fmt in bound}  # every release has these
    for fmt in bound:
        traits = FNS.type_traits(fmt.ggml_type).contents
        assert (traits.type_name.decode(), traits.blck_size, traits.type_size) == (
            fmt.ggml_name, fmt.block_size, fmt.type_size)
        assert bool(traits.to_float) == fmt.has_to_float, fmt.name


@pytest.mark.parametrize("qtype", TO_FLOAT_TYPES)
def test_dequantize_random_bytes_matches_to_float(qtype: str) -> None:
    fmt = formats.get(qtype)
    _skip_unless_bound(fmt)
    rng = np.random.default_rng(7)
    nblocks = 3000 if fmt.block_size == 32 else 400
    raw = rng.integers(0, 256, nblocks * fmt.type_size, dtype=np.uint8)
    n = nblocks * fmt.block_size
    expected = np.empty(n, np.float32)
    FNS.type_traits(fmt.ggml_type).contents.to_float(raw.ctypes.data, expected.ctypes.data, n)
    np.testing.assert_array_equal(formats.dequantize(raw, qtype, n).view(np.uint32), expected.view(np.uint32))


@pytest.mark.parametrize("qtype", formats.QUANTIZABLE)
@pytest.mark.parametrize("data", ["normal", "special"])
def test_quantize_matches_ggml_paths(qtype: str, data: str) -> None:
    fmt = formats.get(qtype)
    rng = np.random.default_rng(11)
    shape = (64, 512)
    x = rng.standard_normal(shape).astype(np.float32) if data == "normal" else _special(rng, shape)
    reference_path = "ref" if qtype in ("q8_1", "q8_k") else "chunk"
    checks = [("x86", "cpu")] + ([] if qtype == "q8_k" else [("reference", reference_path)])  # q8_K: no ref hook
    for rounding, path in checks:
        ours, theirs = formats.quantize(x, qtype, rounding), _ggml_quantize(fmt, x, path)
        if qtype == "iq4_nl" and rounding == "x86":
            _mask_unwritten_iq4_nl_quants(x, ours, theirs)
        np.testing.assert_array_equal(ours, theirs, err_msg=f"{qtype} {rounding}")


def _mask_unwritten_iq4_nl_quants(x: np.ndarray, ours: np.ndarray, theirs: np.ndarray) -> None:
    """quantize_row_iq4_nl_ref skips a block of amax < 1e-15 before writing its levels and then packs the
    array it left behind (uninitialised or the previous block's): only its scale, 0, is defined. (An
    all-NaN block is one: NaN never wins the amax scan.) Compare
    the scale there and blank the quants on both sides."""
    magnitude = np.abs(x.reshape(-1, 32))
    tiny = np.where(np.isnan(magnitude), np.float32(0), magnitude).max(axis=1) < np.float32(1e-15)  # NaN never wins
    ours_b, theirs_b = ours.reshape(-1, 18), theirs.reshape(-1, 18)
    np.testing.assert_array_equal(ours_b[tiny, :2], theirs_b[tiny, :2])
    ours_b[tiny, 2:] = 0
    theirs_b[tiny, 2:] = 0


def test_iq4_nl_quantizer_edges() -> None:
    """IQ4_NL on the block edges both paths meet: a tie between table entries, values beyond ±127·d,
    subnormal and mixed-sign blocks, each against ggml's chunk and from_float."""
    fmt = formats.get("iq4_nl")
    rng = np.random.default_rng(37)
    x = rng.standard_normal((96, 32)).astype(np.float32)
    x[0] = np.float32(-127) * np.linspace(-1, 1, 32, dtype=np.float32)
    x[1] = np.repeat(np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                              np.float32), 2)  # exactly on the table
    x[2] = (x[1] + np.roll(x[1], -2)) / 2  # half-way between neighbours: the ties
    x[3] = x[3] * np.float32(1e-14)  # above the 1e-15 cut, with subnormal w·q·x products
    x[4, :] = 0.5
    x[4, 7] = -3.0
    x[5] = np.float32(65504) * np.sign(x[5])
    for rounding, path in (("reference", "chunk"), ("x86", "cpu")):
        np.testing.assert_array_equal(formats.quantize(x, "iq4_nl", rounding), _ggml_quantize(fmt, x, path),
                                      err_msg=rounding)


def _edge_blocks(block: int) -> dict[str, np.ndarray]:
    """One block per family the quantizers branch on: all-equal blocks (a zero range for Q4_1/Q5_1),
    ±0, subnormals, a lone NaN or ±inf at the first, a middle and the last position, all-NaN and
    all-±inf blocks (where ggml's min/max scans keep their ±FLT_MAX start), and magnitudes near f32's
    top (an inf range) and bottom (a reciprocal that overflows)."""
    rng = np.random.default_rng(41)
    families: dict[str, np.ndarray] = {}

    def normal() -> np.ndarray:
        return rng.standard_normal(block).astype(np.float32)

    for name, value in (("zero", 0.0), ("negzero", -0.0), ("nan", np.nan), ("inf", np.inf), ("-inf", -np.inf),
                        ("one", 1.0), ("-one", -1.0), ("3.5", 3.5), ("-1e-3", -1e-3), ("65504", 65504.0),
                        ("1e30", 1e30), ("-1e-40", -1e-40), ("1e-45", 1e-45), ("2^-130", 2.0**-130),
                        ("1e-20", 1e-20), ("f32max", float(np.finfo(np.float32).max))):
        families[f"all {name}"] = np.full(block, value, np.float32)
    families["±0 alternating"] = np.where(np.arange(block) % 2, np.float32(-0.0), np.float32(0.0))
    for position in (0, 5, block - 1):
        for name, value in (("nan", np.nan), ("inf", np.inf), ("-inf", -np.inf)):
            x = normal()
            x[position] = value
            families[f"{name} at {position}"] = x
    x = normal()
    x[3], x[9] = np.inf, -np.inf
    families["inf and -inf"] = x
    x = normal()
    x[3], x[9] = np.nan, np.inf
    families["nan and inf"] = x
    x = np.full(block, np.nan, np.float32)
    x[4] = 1.0
    families["nan but one"] = x
    families["subnormals"] = (rng.uniform(-1, 1, block) * 1e-39).astype(np.float32)
    x = (normal() * np.float32(1e-39)).astype(np.float32)
    x[0] = 1.0
    families["subnormals and one"] = x
    x = np.zeros(block, np.float32)
    x[7] = -2.5
    families["zeros and one"] = x
    families["±3e38"] = (np.sign(normal()) * np.float32(3e38)).astype(np.float32)
    return families


@pytest.mark.parametrize("qtype", formats.QUANTIZABLE)
def test_quantizers_match_ggml_on_edge_blocks(qtype: str) -> None:
    """Each run-time quantizer (CPY/SET_ROWS destinations, vec_dot types) on every edge family, one block
    a row, against each of ggml's paths for it: bytes equal, block by block. IQ4_NL's from_float leaves the
    levels of a block below 1e-15 unwritten (undefined): its scale is compared there and its quants not."""
    fmt = formats.get(qtype)
    families = _edge_blocks(fmt.block_size)
    x = np.stack(list(families.values()))
    paths = [("x86", "cpu")]
    if qtype == "q8_1":
        paths.append(("reference", "ref"))
    elif qtype != "q8_k":  # q8_K has no reference hook
        paths.append(("reference", "chunk"))
    if qtype == "iq4_nl":
        paths.append(("x86", "ref"))  # CPY/SET_ROWS run from_float_ref on some builds: the same code
    for rounding, path in paths:
        ours = formats.quantize(x, qtype, rounding)
        theirs = _ggml_quantize(fmt, x, path)
        if qtype == "iq4_nl" and rounding == "x86":
            _mask_unwritten_iq4_nl_quants(x, ours, theirs)
        ours_b, theirs_b = ours.reshape(len(families), -1), theirs.reshape(len(families), -1)
        differ = [name for name, a, b in zip(families, ours_b, theirs_b, strict=True) if not np.array_equal(a, b)]
        assert not differ, f"{qtype} {rounding} vs ggml {path}: blocks differ: {differ}"


@pytest.mark.parametrize("qtype", dtypes.DRAWN_COPY_TYPES)
def test_cpy_and_set_rows_into_quantized_types_write_the_golden_bytes(qtype: str) -> None:
    """ggml's own CPY (F32 -> qtype) and SET_ROWS (F32 rows into a qtype table) on the CPU backend, one edge
    block a row: every written block is ``formats.quantize(x, qtype, "x86")`` byte for byte, so the
    quantizer the function tests above compare is the one the ops run. IQ4_NL blocks below 1e-15 (levels
    unwritten) compare by scale."""
    from device.ggml.device import GgmlDevice

    families = _edge_blocks(32)
    x = np.stack(list(families.values()))
    rows = x.shape[0]
    ne = (32, rows, 1, 1)
    cpy = OpCase("CPY", (TensorSpec("f32", ne),), params=(("dst_ne", ne), ("dst_pad", (0, 0, 0, 0)), ("dst_offset", 0)),
                 dst=qtype)
    set_rows = OpCase("SET_ROWS", (TensorSpec(qtype, ne), TensorSpec("f32", ne), TensorSpec("i64", (rows, 1, 1, 1))),
                      dst=qtype)
    table = np.zeros((1, 1, rows, dtypes.row_size(qtype, 32)), np.uint8)
    order = np.random.default_rng(3).permutation(rows).astype(np.int64)  # each row written once, out of order
    dev = GgmlDevice("CPU")
    try:
        written = {"CPY": np.asarray(dev.run(cpy, [x.reshape(1, 1, rows, 32)]).output),
                   "SET_ROWS": np.asarray(dev.run(set_rows, [table, x[order].reshape(1, 1, rows, 32),
                                                              order.reshape(1, 1, 1, rows)]).output)}
    finally:
        dev.close()
    for op, out in written.items():
        ours = formats.quantize(x, qtype, "x86")
        theirs = out.reshape(-1).copy()
        assert theirs.size == ours.size, op
        if qtype == "iq4_nl":
            _mask_unwritten_iq4_nl_quants(x, ours, theirs)
        ours_b, theirs_b = ours.reshape(rows, -1), theirs.reshape(rows, -1)
        differ = [name for name, a, b in zip(families, ours_b, theirs_b, strict=True) if not np.array_equal(a, b)]
        assert not differ, f"ggml {op} into {qtype}: blocks differ from the golden's: {differ}"

"""golden.quant against ggml itself (the wheel's CPU libraries, through device.ggml.quant).

* ``quantize(x, q)`` == ``ggml_quantize_chunk`` (the reference quantizer), bit for bit.
* ``quantize(x, q, "x86")`` == the CPU backend's ``from_float`` (AVX2 on this wheel), bit for bit.
* ``dequantize`` == ``ggml_get_type_traits(t)->to_float`` on any bytes, bit for bit (NaNs included).

NaN and ±inf are included: both ggml paths handle them deterministically on x86 (see the
golden.quant docstring for what they produce), so they are compared like any other value.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from device.base import DeviceError
from device.ggml import lib as ggml_lib
from device.ggml import quant as ggml_quant
from golden import dtypes
from golden.quant import BLOCK_BYTES, QK, QTYPES, dequantize, quantize

try:
    ggml_quant.functions()
except (OSError, ImportError, DeviceError) as exc:  # no wheel, or GGML_LIB_DIR points nowhere
    pytest.skip(f"ggml CPU libraries not loadable: {exc}", allow_module_level=True)

F32_MAX = float(np.finfo(np.float32).max)
F32_TINY = float(np.finfo(np.float32).tiny)  # smallest normal

# One block of 32 values from one of several families chosen to hit the quantizers' corners.
any_f32 = st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)
finite_f32 = st.floats(-F32_MAX, F32_MAX, width=32)
ordinary_f32 = st.floats(-(2.0**14), 2.0**14, width=32)
subnormal_f32 = st.floats(-F32_TINY, F32_TINY, width=32, allow_subnormal=True)
huge_f32 = st.floats(2.0**100, F32_MAX, width=32).flatmap(lambda v: st.sampled_from([v, -v]))


# NaNs with payload bits, either sign: the stored f16 of a NaN scale is canonical in ggml, not numpy's.
nan_payload_f32 = (
    st.integers(0x7F800001, 0x7FFFFFFF)
    .flatmap(lambda bits: st.sampled_from([bits, bits | 0x80000000]))
    .map(lambda bits: np.array(bits, np.uint32).view(np.float32).item())
)


def _block_of(values: st.SearchStrategy[float]) -> st.SearchStrategy[list[float]]:
    return st.lists(values, min_size=QK, max_size=QK)


@st.composite
def _equal_values(draw: st.DrawFn) -> list[float]:
    return [draw(finite_f32)] * QK


@st.composite
def _max_ties(draw: st.DrawFn) -> list[float]:
    """+m and -m both present (Q4_0's first-wins sign rule), the rest smaller."""
    m = draw(st.floats(2.0**-100, 2.0**100, width=32))
    rest = draw(_block_of(st.floats(-m, m, width=32)))
    for position in draw(st.lists(st.integers(0, QK - 1), min_size=1, max_size=4)):
        rest[position] = draw(st.sampled_from([m, -m]))
    return rest


@st.composite
def _half_integer_ties(draw: st.DrawFn) -> list[float]:
    """amax = 127·scale with values k/2·scale: x·id lands on .5 exactly, where Q8_0 paths differ."""
    scale = draw(st.sampled_from([1.0, 2.0, 0.25, 2.0**-10, 2.0**20]))
    halves = draw(_block_of(st.integers(-254, 254)))
    halves[draw(st.integers(0, QK - 1))] = draw(st.sampled_from([254, -254]))
    return [h / 2 * scale for h in halves]


@st.composite
def _zeros_with_few(draw: st.DrawFn) -> list[float]:
    block = [draw(st.sampled_from([0.0, -0.0]))] * QK
    for position in draw(st.lists(st.integers(0, QK - 1), max_size=3)):
        block[position] = draw(any_f32)
    return block


one_block = st.one_of(
    _block_of(ordinary_f32),
    _block_of(any_f32),
    _block_of(subnormal_f32),
    _block_of(st.one_of(ordinary_f32, nan_payload_f32)),
    _block_of(huge_f32),
    _block_of(st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, float("nan"), float("inf"), float("-inf")])),
    _equal_values(),
    _max_ties(),
    _half_integer_ties(),
    _zeros_with_few(),
)
rows_of_blocks = st.tuples(st.integers(1, 4), st.integers(1, 3)).flatmap(
    lambda shape: st.lists(one_block, min_size=shape[0] * shape[1], max_size=shape[0] * shape[1]).map(
        lambda blocks: np.array(blocks, np.float32).reshape(shape[0], shape[1] * QK)
    )
)


def _assert_same_blocks(golden: np.ndarray, ggml: np.ndarray, qtype: str, x: np.ndarray) -> None:
    if np.array_equal(golden, ggml):
        return
    block_bytes = BLOCK_BYTES[qtype]
    bad = np.nonzero((golden != ggml).reshape(-1, block_bytes).any(axis=1))[0][0]
    raise AssertionError(
        f"{qtype} block {bad} differs\n input  {x.reshape(-1, QK)[bad].tolist()}\n"
        f" golden {golden.reshape(-1, block_bytes)[bad].tolist()}\n"
        f" ggml   {ggml.reshape(-1, block_bytes)[bad].tolist()}"
    )


@pytest.mark.parametrize("qtype", QTYPES)
@given(x=rows_of_blocks)
def test_quantize_matches_ggml_quantize_chunk(qtype: str, x: np.ndarray) -> None:
    _assert_same_blocks(quantize(x, qtype), ggml_quant.ggml_quantize(x, qtype, "chunk"), qtype, x)


@pytest.mark.parametrize("qtype", QTYPES)
@given(x=rows_of_blocks)
def test_x86_quantize_matches_cpu_from_float(qtype: str, x: np.ndarray) -> None:
    _assert_same_blocks(quantize(x, qtype, "x86"), ggml_quant.ggml_quantize(x, qtype, "cpu"), qtype, x)


@pytest.mark.parametrize("qtype", QTYPES)
@given(data=st.data())
def test_dequantize_matches_ggml_to_float(qtype: str, data: st.DataObject) -> None:
    nblocks = data.draw(st.integers(0, 16))
    raw = np.frombuffer(
        data.draw(st.binary(min_size=nblocks * BLOCK_BYTES[qtype], max_size=nblocks * BLOCK_BYTES[qtype])),
        np.uint8,
    )
    n = nblocks * QK
    golden = dequantize(raw, qtype, n).view(np.uint32)
    ggml = ggml_quant.ggml_dequantize(raw, qtype, n).view(np.uint32)
    np.testing.assert_array_equal(golden, ggml)  # bit patterns, so NaN payloads count too


def test_q8_0_tie_rounding_of_both_ggml_paths() -> None:
    """The finding golden.quant encodes: the reference rounds ties away from zero, x86 to even."""
    x = np.zeros(QK, np.float32)
    x[:7] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5]
    x[-1] = 127.0
    reference = ggml_quant.ggml_quantize(x, "q8_0", "chunk")[2:9].view(np.int8)
    cpu = ggml_quant.ggml_quantize(x, "q8_0", "cpu")[2:9].view(np.int8)
    assert reference.tolist() == [1, 2, 3, -1, -2, -3, 4]
    assert cpu.tolist() == [0, 2, 2, 0, -2, -2, 4]


@pytest.mark.parametrize("nan_position", [0, 5, 30, 31])
def test_q8_0_nan_handling_of_both_paths(nan_position: int) -> None:
    """Reference: amax is the max of |x| after the last NaN (NaN if it is last), NaN quants are 0.
    x86: NaN lanes drop out of the maxps tree unless they win it, NaN quants are -128."""
    x = np.arange(QK, dtype=np.float32) - 5
    x[nan_position] = np.array(0x7F812345, np.uint32).view(np.float32)  # a payload, not the default NaN
    for rounding, path in (("reference", "chunk"), ("x86", "cpu")):
        golden = quantize(x, "q8_0", rounding)  # type: ignore[arg-type]
        np.testing.assert_array_equal(golden, ggml_quant.ggml_quantize(x, "q8_0", path))
    reference = quantize(x, "q8_0")
    if nan_position == QK - 1:
        assert reference[:2].view(np.uint16)[0] == 0x7E00 and not reference[2:].any()
    else:
        assert reference[2 + nan_position] == 0
        assert quantize(x, "q8_0", "x86")[2 + nan_position] == 0x80


def test_q4_0_cpu_path_is_the_reference() -> None:
    x = np.random.default_rng(7).standard_normal((64, QK)).astype(np.float32)
    np.testing.assert_array_equal(
        ggml_quant.ggml_quantize(x, "q4_0", "cpu"), ggml_quant.ggml_quantize(x, "q4_0", "chunk")
    )


def test_ggml_type_enum_values_match_the_header() -> None:
    header = ggml_quant.ggml_include_dir() / "ggml.h"
    if not header.exists():
        pytest.skip(f"no header at {header}")
    text = header.read_text()
    for name, value in dtypes.GGML_TYPE_ID.items():
        match = re.search(rf"GGML_TYPE_{name.upper()}\s*=\s*(\d+)", text)
        assert match is not None and int(match.group(1)) == value, name


def test_large_random_tensor_matches_bit_for_bit() -> None:
    # One big deterministic draw next to the small hypothesis ones: 8320 blocks cross the chunk
    # boundaries golden.quant works in (4096 blocks for quantize, 8192 for dequantize).
    rng = np.random.default_rng(20261130)
    x = (rng.standard_normal((520, 512)) * rng.uniform(1e-3, 1e3, (520, 1))).astype(np.float32)
    for qtype in QTYPES:
        raw = ggml_quant.ggml_quantize(x, qtype, "chunk")
        np.testing.assert_array_equal(quantize(x, qtype), raw)
        np.testing.assert_array_equal(quantize(x, qtype, "x86"), ggml_quant.ggml_quantize(x, qtype, "cpu"))
        np.testing.assert_array_equal(
            dequantize(raw, qtype, x.size).view(np.uint32),
            ggml_quant.ggml_dequantize(raw, qtype, x.size).view(np.uint32),
        )


def test_the_quantizers_use_the_devices_library_loader() -> None:
    """One loader: the quantizers bind the very libraries the ggml devices use."""
    assert ggml_quant.functions().lib is ggml_lib.load()
    traits = ggml_quant.functions().type_traits
    for qtype in QTYPES:  # and the one dtype table agrees with ggml's own type traits
        t = traits(dtypes.GGML_TYPE_ID[qtype]).contents
        assert (t.type_size, t.blck_size) == (dtypes.type_size(qtype), dtypes.block_size(qtype))
        assert (t.type_size, t.blck_size) == (BLOCK_BYTES[qtype], QK)
    for name in ("f32", "f16", "bf16", "i32"):
        t = traits(dtypes.GGML_TYPE_ID[name]).contents
        assert (t.type_size, t.blck_size, t.type_name.decode()) == (dtypes.type_size(name), 1, name)

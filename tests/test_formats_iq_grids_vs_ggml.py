"""The IQ tables of golden/formats/tables and the newer formats' dequantizers, against the bound library.

* Every grid entry: blocks whose indices run through the whole grid (unit scale, no sign flipped)
  decode in ``to_float`` to exactly ``grid[index]`` times the format's sub-block scale.
* Every sign code: ``to_float`` negates element j of a group exactly where the table's sign byte
  (``ksigns_iq2xs[code]``, or the stored byte) has ``kmask_iq2xs[j]`` set; IQ1_S/IQ1_M's delta sign
  adds ``∓IQ1S_DELTA``.
* ``dequantize`` on random bytes with ±0, subnormal, inf, NaN (payloads, both signs) and the largest
  f16 as ``d``, bit for bit.
* TQ1_0's base-3 digits and NVFP4's UE4M3 scales for every byte value.
* gguf-py's dequantizers, an independent reading of the same formats, agree on finite scales.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import numpy as np
import pytest

from device.base import DeviceError
from device.ggml import quant as ggml_quant
from golden import formats
from golden.formats import grids, mxfp4, ternary

try:
    ggml_quant.functions()
except (OSError, ImportError, DeviceError) as exc:
    pytest.skip(f"ggml CPU libraries not loadable: {exc}", allow_module_level=True)

F16_ONE = np.array([1.0], "<f2").view(np.uint8)
F16_SPECIALS = np.array([0x0000, 0x8000, 0x0001, 0x83FF, 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFE01, 0xFFFF, 0x7BFF,
                         0x0400, 0x3C00], np.uint16)


def ggml_to_float(raw: np.ndarray, name: str) -> np.ndarray:
    fmt = formats.get(name)
    if not ggml_quant.has_type(fmt.ggml_name):
        lib = ggml_quant.functions().lib
        pytest.skip(f"ggml {lib.version} at {lib.lib_dir} predates {name} (no dequantize_row_{fmt.ggml_name})")
    data = np.ascontiguousarray(raw, np.uint8).reshape(-1)
    n = data.size // fmt.type_size * fmt.block_size
    out = np.empty(n, np.float32)
    traits = ggml_quant.functions().type_traits(fmt.ggml_type).contents
    traits.to_float(data.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p), n)
    return out


def _put_u16(raw: np.ndarray, offset: int, values: np.ndarray) -> None:
    raw[:, offset : offset + 2 * values.shape[1]] = values.astype("<u2").view(np.uint8).reshape(raw.shape[0], -1)


def _put_u32(raw: np.ndarray, offset: int, values: np.ndarray) -> None:
    raw[:, offset : offset + 4 * values.shape[1]] = values.astype("<u4").view(np.uint8).reshape(raw.shape[0], -1)


# --- encoders: (grid indices per slot, sign or delta code per group or sub-block) -> blocks with
# unit d and the smallest sub-block scale code. Slots are in element order.

def _iq2_xxs(index: np.ndarray, code: np.ndarray) -> np.ndarray:
    m = index.shape[0]
    raw = np.zeros((m, 66), np.uint8)
    raw[:, :2] = F16_ONE
    sub = raw[:, 2:].reshape(m, 8, 8)
    sub[:, :, :4] = index.reshape(m, 8, 4)
    aux = (code.reshape(m, 8, 4).astype(np.uint32) << np.array([0, 7, 14, 21], np.uint32)).sum(axis=2)
    sub[:, :, 4:] = aux.astype("<u4").view(np.uint8).reshape(m, 8, 4)
    return raw


def _iq2_xs(index: np.ndarray, code: np.ndarray) -> np.ndarray:
    raw = np.zeros((index.shape[0], 74), np.uint8)
    raw[:, :2] = F16_ONE
    _put_u16(raw, 2, index | (code << 9))
    return raw


def _iq2_s(index: np.ndarray, code: np.ndarray) -> np.ndarray:
    m = index.shape[0]
    raw = np.zeros((m, 82), np.uint8)
    raw[:, :2] = F16_ONE
    raw[:, 2:34] = index & 255
    raw[:, 34:66] = code
    raw[:, 66:74] = ((index >> 8).reshape(m, 8, 4) << np.array([0, 2, 4, 6])).sum(axis=2)
    return raw


def _iq3_xxs(index: np.ndarray, code: np.ndarray) -> np.ndarray:
    m = index.shape[0]
    raw = np.zeros((m, 98), np.uint8)
    raw[:, :2] = F16_ONE
    raw[:, 2:66] = index
    _put_u32(raw, 66, (code.reshape(m, 8, 4).astype(np.uint32) << np.array([0, 7, 14, 21], np.uint32)).sum(axis=2))
    return raw


def _iq3_s(index: np.ndarray, code: np.ndarray) -> np.ndarray:
    m = index.shape[0]
    raw = np.zeros((m, 110), np.uint8)
    raw[:, :2] = F16_ONE
    raw[:, 2:66] = index & 255
    raw[:, 66:74] = ((index >> 8).reshape(m, 8, 8) << np.arange(8)).sum(axis=2)
    raw[:, 74:106] = code
    return raw


def _iq1_s(index: np.ndarray, code: np.ndarray) -> np.ndarray:
    m = index.shape[0]
    raw = np.zeros((m, 50), np.uint8)
    raw[:, :2] = F16_ONE
    raw[:, 2:34] = index & 255
    qh = ((index >> 8).reshape(m, 8, 4) << np.array([0, 3, 6, 9])).sum(axis=2) | (code << 15)
    _put_u16(raw, 34, qh)
    return raw


def _iq1_m(index: np.ndarray, code: np.ndarray) -> np.ndarray:
    m = index.shape[0]
    raw = np.zeros((m, 56), np.uint8)
    raw[:, :32] = index & 255
    nibble = ((index >> 8) | (code << 3)).reshape(m, 16, 2)
    raw[:, 32:48] = nibble[:, :, 0] | (nibble[:, :, 1] << 4)
    bits = int(F16_ONE.view("<u2")[0])  # d = f16 1.0 in the top nibbles of the four scale words
    _put_u16(raw, 48, np.array([[(bits >> (4 * k) & 15) << 12 for k in range(4)]] * m))
    return raw


# name -> (encoder, grid, slots per block, sign kind, unit-code sub-block scale)
# sign kind: "ksigns" (7-bit index into ksigns_iq2xs, one per 8-element group), "byte" (a stored sign
# byte per group), "delta_sub" / "delta_group" (IQ1's delta sign per sub-block / per group)
GRID_FORMATS: dict[str, tuple[Callable[[np.ndarray, np.ndarray], np.ndarray], str, int, str, float]] = {
    "iq2_xxs": (_iq2_xxs, "iq2xxs_grid", 32, "ksigns", 0.5 * 0.25),
    "iq2_xs": (_iq2_xs, "iq2xs_grid", 32, "ksigns", 0.5 * 0.25),
    "iq2_s": (_iq2_s, "iq2s_grid", 32, "byte", 0.5 * 0.25),
    "iq3_xxs": (_iq3_xxs, "iq3xxs_grid", 64, "ksigns", 0.5 * 0.5),
    "iq3_s": (_iq3_s, "iq3s_grid", 64, "byte", 1.0),
    "iq1_s": (_iq1_s, "iq1s_grid", 32, "delta_sub", 1.0),
    "iq1_m": (_iq1_m, "iq1s_grid", 32, "delta_group", 1.0),
}
CODES_PER_BLOCK = {"ksigns": 32, "byte": 32, "delta_sub": 8, "delta_group": 32}


def _expected(name: str, index: np.ndarray, code: np.ndarray) -> np.ndarray:
    """What the tables say the blocks decode to: ``grid[index]·scale``, signs or deltas applied."""
    _, grid_name, _, kind, scale = GRID_FORMATS[name]
    m = index.shape[0]
    values = grids.table(grid_name)[index].astype(np.float32).reshape(m, -1, 8)  # (block, group, 8)
    if kind.startswith("delta"):
        negative = np.repeat(code, 4 if kind == "delta_sub" else 1, axis=1)[:, :, None]
        values = values + np.where(negative, -grids.iq1s_delta(), grids.iq1s_delta())
        return (np.float32(scale) * values).reshape(-1)
    pattern = grids.table("ksigns_iq2xs")[code] if kind == "ksigns" else code.astype(np.uint8)
    negate = (pattern[:, :, None] & grids.table("kmask_iq2xs")) != 0
    return np.where(negate, -values, values).astype(np.float32).reshape(-1) * np.float32(scale)


@pytest.mark.parametrize("name", sorted(GRID_FORMATS))
def test_every_grid_entry_decodes_to_the_table(name: str) -> None:
    encode, grid_name, slots, kind, _ = GRID_FORMATS[name]
    entries = grids.table(grid_name).shape[0]
    nblocks = -(-entries // slots)
    index = np.resize(np.arange(entries), nblocks * slots).reshape(nblocks, slots)  # every index, wrapped
    code = np.zeros((nblocks, CODES_PER_BLOCK[kind]), np.int64)
    if kind.startswith("delta"):  # both delta signs for every index: a second pass with them flipped
        index, code = np.concatenate([index, index]), np.concatenate([code, code + 1])
    np.testing.assert_array_equal(ggml_to_float(encode(index, code), name), _expected(name, index, code))


@pytest.mark.parametrize("name", [name for name, spec in GRID_FORMATS.items() if spec[3] in ("ksigns", "byte")])
def test_every_sign_code_negates_as_the_table_says(name: str) -> None:
    encode, grid_name, slots, kind, _ = GRID_FORMATS[name]
    codes = 128 if kind == "ksigns" else 256
    nblocks = codes // 32
    code = np.arange(codes).reshape(nblocks, 32)
    rng = np.random.default_rng(17)
    index = rng.integers(0, grids.table(grid_name).shape[0], (nblocks, slots))
    np.testing.assert_array_equal(ggml_to_float(encode(index, code), name), _expected(name, index, code))


def test_sign_tables_hold_an_even_number_of_negations() -> None:
    """ksigns_iq2xs[s] is s with bit 7 set where s has an odd number of ones (what makes 7 bits enough)."""
    s = np.arange(128)
    odd = np.array([bin(v).count("1") % 2 for v in s])
    np.testing.assert_array_equal(grids.table("ksigns_iq2xs"), s | (odd << 7))
    np.testing.assert_array_equal(grids.table("kmask_iq2xs"), 1 << np.arange(8))


# --------------------------------------------------------------------------------------------
# random bytes with special scales, and every code of the small formats

NEW_TYPES = ["iq4_xs", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m", "tq1_0", "nvfp4", "q1_0",
             "q2_0"]
D_OFFSET = {"tq1_0": 52}  # where the f16 d starts, when not at byte 0 (IQ1_M: spread over its scales)
EVERY_BYTE = {"tq1_0": (0, 52), "q1_0": (2, 18), "q2_0": (2, 18), "nvfp4": (4, 36)}  # quant bytes: every value


def _special_scale_blocks(name: str, nblocks: int, rng: np.random.Generator) -> np.ndarray:
    fmt = formats.get(name)
    raw = rng.integers(0, 256, (nblocks, fmt.type_size), dtype=np.uint8)
    specials = np.resize(F16_SPECIALS, nblocks // 2)  # half the blocks: a special d, the rest random
    rows = np.arange(specials.size) * 2
    if name == "nvfp4":  # every UE4M3 byte in each of the four scale positions
        raw[:256, 0:4] = (np.arange(256)[:, None] + 64 * np.arange(4)) % 256
    elif name == "iq1_m":  # d's four nibbles are the top nibbles of the scale words
        words = raw[rows, 48:56].view("<u2") & np.uint16(0x0FFF)
        nibbles = (specials[:, None] >> np.array([0, 4, 8, 12], np.uint16)) & np.uint16(15)
        raw[rows, 48:56] = (words | (nibbles << np.uint16(12))).view(np.uint8)
    else:
        offset = D_OFFSET.get(name, 0)
        raw[rows, offset : offset + 2] = specials.astype("<u2").view(np.uint8).reshape(-1, 2)
    if name in EVERY_BYTE:
        start, stop = EVERY_BYTE[name]
        width = stop - start
        count = -(-256 // width)
        raw[1 : 2 * count : 2, start:stop] = np.resize(np.arange(256), count * width).reshape(count, width)
    return raw.reshape(-1)


@pytest.mark.parametrize("name", NEW_TYPES)
def test_dequantize_matches_to_float_with_special_scales(name: str) -> None:
    fmt = formats.get(name)
    nblocks = 2048
    raw = _special_scale_blocks(name, nblocks, np.random.default_rng(23))
    got = fmt.dequantize(raw, nblocks * fmt.block_size)
    expected = ggml_to_float(raw, name)
    if name != "nvfp4":  # UE4M3 scales are finite
        assert np.isnan(expected).any() and np.isinf(expected).any()  # the specials were reached
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))


def test_nvfp4_every_scale_byte_is_the_ue4m3_table() -> None:
    """E2M1 code 2 (1.0, stored doubled) times each of the 256 scale bytes: twice the module's table."""
    raw = np.full((64, 36), 0x22, np.uint8)
    raw[:, 0:4] = np.arange(256).reshape(64, 4)
    got = ggml_to_float(raw, "nvfp4").reshape(64, 4, 16)
    np.testing.assert_array_equal(got, np.broadcast_to((2 * mxfp4.UE4M3_HALF).reshape(64, 4, 1), got.shape))


def test_tq1_0_every_byte_gives_the_base3_digits() -> None:
    """Byte b in every qs and qh position: to_float's digits are the module's, each −1, 0 or 1 (243..255 too)."""
    raw = np.zeros((256, 54), np.uint8)
    raw[:, :52] = np.arange(256)[:, None]
    raw[:, 52:54] = F16_ONE
    got = ggml_to_float(raw, "tq1_0").reshape(256, 256)
    digits = ternary.TQ1_DIGITS
    np.testing.assert_array_equal(got[:, :160].reshape(256, 5, 32), np.repeat(digits[:, :, None], 32, axis=2))
    np.testing.assert_array_equal(got[:, 240:].reshape(256, 4, 4), np.repeat(digits[:, :4, None], 4, axis=2))
    assert set(np.unique(digits)) == {-1, 0, 1}


GGUF_TYPES = [name for name in NEW_TYPES if name not in ("q1_0", "q2_0")]  # gguf-py 0.19 has no Q1_0/Q2_0 dequantizer


@pytest.mark.parametrize("name", GGUF_TYPES)
def test_gguf_py_agrees_on_finite_scales(name: str) -> None:
    gguf = pytest.importorskip("gguf")
    fmt = formats.get(name)
    nblocks = 64
    raw = np.random.default_rng(29).integers(0, 256, (nblocks, fmt.type_size), dtype=np.uint8)
    if name == "iq1_m":
        raw[:, 55] &= 0xBF  # bit 14 of d (bit 6 of the last scale word's top byte) clear: a finite scale
    elif name != "nvfp4":
        raw[:, D_OFFSET.get(name, 0) + 1] &= 0x7B  # bits 10 and 15 of d clear: finite and positive
    ours = fmt.dequantize(raw.reshape(-1), nblocks * fmt.block_size)
    theirs = gguf.quants.dequantize(raw.reshape(1, -1), getattr(gguf.GGMLQuantizationType, name.upper()))
    np.testing.assert_array_equal(ours, np.asarray(theirs, np.float32).reshape(-1))

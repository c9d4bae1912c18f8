"""golden.formats' IQ4_NL and MXFP4 dequantizers against the bound library's ``to_float``, bit for bit."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from device.base import DeviceError
from device.ggml import quant as ggml_quant
from golden import formats
from golden.formats import iquants, mxfp4

try:
    ggml_quant.functions()
except (OSError, ImportError, DeviceError) as exc:
    pytest.skip(f"ggml CPU libraries not loadable: {exc}", allow_module_level=True)

FORMATS = {name: formats.get(name) for name in ("iq4_nl", "mxfp4", "tq2_0")}


def ggml_to_float(raw: np.ndarray, name: str, n: int) -> np.ndarray:
    traits = ggml_quant.functions().type_traits(FORMATS[name].ggml_type).contents
    out = np.empty(n, np.float32)
    data = np.ascontiguousarray(raw, np.uint8)
    traits.to_float(data.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p), n)
    return out


def test_type_traits_match_the_table() -> None:
    for name, fmt in FORMATS.items():
        t = ggml_quant.functions().type_traits(FORMATS[name].ggml_type).contents
        assert (t.type_name.decode(), t.blck_size, t.type_size) == (name, fmt.block_size, fmt.type_size)


def _special_blocks(name: str, nblocks: int, rng: np.random.Generator) -> np.ndarray:
    fmt = FORMATS[name]
    raw = rng.integers(0, 256, (nblocks, fmt.type_size), dtype=np.uint8)
    if name == "mxfp4":
        raw[:256, 0] = np.arange(256)  # every E8M0 exponent, subnormal 0/1 and 255 included
    elif name == "tq2_0":
        specials = np.array([0x0000, 0x8000, 0x0001, 0x83FF, 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFFFF, 0x7BFF],
                            np.uint16)
        raw[: specials.size, -2:] = specials.view(np.uint8).reshape(-1, 2)
    else:  # f16 scales: +-0, subnormal, inf, NaN with payloads, largest finite
        specials = np.array([0x0000, 0x8000, 0x0001, 0x83FF, 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFFFF, 0x7BFF],
                            np.uint16)
        raw[: specials.size, :2] = specials.view(np.uint8).reshape(-1, 2)
    qs = {"iq4_nl": 2, "mxfp4": 1, "tq2_0": 0}[name]  # where the quant bytes start
    raw[:16, qs : qs + 16] = (np.arange(16, dtype=np.uint8) * 0x11)[:, None]  # every code in both nibbles
    return raw.reshape(-1)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_dequantize_matches_to_float_on_any_bytes(name: str) -> None:
    fmt = FORMATS[name]
    nblocks = 4096
    raw = _special_blocks(name, nblocks, np.random.default_rng(3))
    n = nblocks * fmt.block_size
    np.testing.assert_array_equal(fmt.dequantize(raw, n).view(np.uint32), ggml_to_float(raw, name, n).view(np.uint32))


@pytest.mark.parametrize("name", ["iq4_nl", "mxfp4"])
def test_every_code_decodes_to_the_table_value(name: str) -> None:
    """A unit scale and each of the 16 codes: the library's table is the module's table."""
    fmt = FORMATS[name]
    block = np.zeros(fmt.type_size, np.uint8)
    if name == "mxfp4":
        block[0] = 128  # ggml halves the scale: 2**(128 - 128) = 1
        table = mxfp4.KVALUES_MXFP4
    else:
        block[:2] = np.array([1.0], "<f2").view(np.uint8)
        table = iquants.KVALUES_IQ4NL
    block[-16:] = np.arange(16, dtype=np.uint8) | (np.arange(16, dtype=np.uint8)[::-1] << 4)
    got = ggml_to_float(block, name, 32)
    np.testing.assert_array_equal(got[:16], table)
    np.testing.assert_array_equal(got[16:], table[::-1])


def test_gguf_py_agrees() -> None:
    gguf = pytest.importorskip("gguf")
    rng = np.random.default_rng(5)
    for name, fmt in FORMATS.items():
        raw = rng.integers(0, 256, 64 * fmt.type_size, dtype=np.uint8)
        if name == "tq2_0":
            raw.reshape(64, -1)[:, -1] &= 0x7B
        if name == "iq4_nl":  # finite scales: gguf-py computes in its own order, NaN payloads may differ
            raw.reshape(64, -1)[:, 1] &= 0x7B
        ours = fmt.dequantize(raw, 64 * fmt.block_size)
        theirs = gguf.quants.dequantize(raw.reshape(1, -1), getattr(gguf.GGMLQuantizationType, name.upper()))
        np.testing.assert_array_equal(ours, np.asarray(theirs, np.float32).reshape(-1))

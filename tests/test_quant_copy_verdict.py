"""The quantized-output verdict (conformance/verdict/quant.py) for every destination the copies draw: ggml's
own blocks pass on both quantizer paths, and blocks a step off (a quant, the scale, the min) fail."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.verdict.quant import block_elements_ok
from golden import dtypes, formats


def _data(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(256, 32)).astype(np.float32)
    x[0] = 0.0  # an all-zero block
    x[1] = 1.5  # a constant block
    x[2, :16] = -x[2, 16:]  # +amax and −amax both present
    x[3] *= np.float32(1e-3)
    x[4] = np.round(x[4] * 4) / 4  # values on half-way points of some grids
    return x


@pytest.mark.parametrize("qtype", dtypes.DRAWN_COPY_TYPES)
@pytest.mark.parametrize("rounding", formats.ROUNDINGS)
def test_ggml_blocks_pass(qtype: str, rounding: formats.Rounding) -> None:
    x = _data(1)
    raw = formats.quantize(x, qtype, rounding)
    assert block_elements_ok(x.reshape(-1), raw, qtype).all()


@pytest.mark.parametrize("qtype", dtypes.DRAWN_COPY_TYPES)
def test_a_flipped_quant_or_scale_fails(qtype: str) -> None:
    x = _data(2)
    blocks = formats.quantize(x, qtype, "x86").reshape(x.shape[0], -1).copy()
    blocks[10, -1] ^= 0x11  # the last qs byte: two quants moved by one
    blocks[20, 1] ^= 0x04  # the scale's exponent bits
    ok = block_elements_ok(x.reshape(-1), blocks.reshape(-1), qtype).reshape(x.shape)
    assert np.flatnonzero(~ok.all(axis=1)).tolist() == [10, 20]


@pytest.mark.parametrize("qtype", ["q4_1", "q5_1"])
def test_a_wrong_min_fails(qtype: str) -> None:
    x = _data(3)
    blocks = formats.quantize(x, qtype, "x86").reshape(x.shape[0], -1).copy()
    blocks[30, 2:4] = np.array([0], "<f2").view(np.uint8)  # m dropped
    ok = block_elements_ok(x.reshape(-1), blocks.reshape(-1), qtype).reshape(x.shape)
    assert not ok[30].all() and ok[np.arange(x.shape[0]) != 30].all()

"""Quantizing copies, and products of weight formats, that are wrong the way a backend author could ship them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from device.base import RunResult
from device.golden_device import GoldenDevice
from golden import catalogue, dtypes, formats, matmul, quant
from golden.case import OpCase
from tests.plugins import Distortion, FaultyDevice, planted


def _q8_0_scale_over_128(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """Q8_0 with d = amax/128 (the quants then use 128/amax): every value lands within one step."""
    if case.dst != "q8_0" or case.inputs[0].dtype == "q8_0":
        return golden.run(case, inputs)
    exact = catalogue.evaluate(case, catalogue.golden_inputs(case, inputs))
    blocks = np.asarray(exact, np.float32).reshape(-1, 32).astype(np.float64)
    amax = np.abs(blocks).max(axis=1, keepdims=True)
    d = amax / 128.0
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.clip(np.rint(np.where(d > 0, blocks / d, 0.0)), -127, 127).astype(np.int8)
    out = np.empty((blocks.shape[0], 34), np.uint8)
    out[:, :2] = np.float16(d[:, 0]).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return RunResult(out.reshape(-1), [np.array(x) for x in inputs])


def _q4_0_truncating(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """Q4_0 whose quants truncate x/d + 8 instead of rounding it (a missing +0.5)."""
    if case.dst != "q4_0" or case.inputs[0].dtype == "q4_0":
        return golden.run(case, inputs)
    exact = catalogue.evaluate(case, catalogue.golden_inputs(case, inputs))
    blocks = quant.quantize(np.asarray(exact, np.float32).reshape(-1, 32), "q4_0").reshape(-1, 18)
    d = blocks[:, :2].copy().view(np.float16).astype(np.float64)
    x = np.asarray(exact, np.float32).reshape(-1, 32).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.clip(np.floor(np.where(d != 0, x / d, 0.0) + 8.0), 0, 15).astype(np.uint8)
    blocks[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return RunResult(blocks.reshape(-1), [np.array(v) for v in inputs])


@planted("quantized and cpy and q8_0", "a Q8_0 quantizer with the scale amax/128 (one step looser than ggml's)")
def q8_0_scale_over_128(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("q8_0_scale_over_128", "CPY", _q8_0_scale_over_128)


@planted("quantized and cpy and q4_0", "a Q4_0 quantizer that truncates instead of rounding")
def q4_0_truncating(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("q4_0_truncating", "CPY", _q4_0_truncating)


# ---- weight formats read wrongly (issue 37): each shows only on that format's MUL_MAT draws ----------------


def _reading_src0_as(qtype: str, misread: Callable[[np.ndarray], np.ndarray]) -> Distortion:
    """A device that reads src0's ``qtype`` blocks as if their bytes were ``misread(blocks)`` (a copy of the
    (blocks, type_size) uint8 array): the golden on the misread bytes, the inputs handed back as sent."""

    def distortion(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        if case.inputs[0].dtype != qtype:
            return golden.run(case, inputs)
        raw = np.array(inputs[0], np.uint8)
        blocks = raw.reshape(-1, dtypes.type_size(qtype))
        misread_inputs = [misread(blocks.copy()).reshape(raw.shape), *inputs[1:]]
        result = golden.run(case, misread_inputs)
        return RunResult(result.output, [np.array(x) for x in inputs])

    return distortion


def _q4_k_scale_bit5_lost(blocks: np.ndarray) -> np.ndarray:
    """get_scale_min_k4 masking the first four 6-bit scales with 31: bit 5 of scales[0..3] is dropped."""
    blocks[:, 4:8] &= np.uint8(0xDF)
    return blocks


def _q5_0_high_bits_reversed(blocks: np.ndarray) -> np.ndarray:
    """qh read most significant bit first: element j takes bit 31 − j as its fifth bit."""
    bits = np.unpackbits(blocks[:, 2:6], axis=1, bitorder="little")[:, ::-1]
    blocks[:, 2:6] = np.packbits(bits, axis=1, bitorder="little")
    return blocks


def _mxfp4_exponent_plus_one(blocks: np.ndarray) -> np.ndarray:
    """The E8M0 byte decoded as 2^(e − 127) (ggml stores the E2M1 values doubled and halves the scale: the
    half forgotten), i.e. every block's exponent one too high."""
    blocks[:, 0] = np.minimum(blocks[:, 0].astype(np.int32) + 1, 255).astype(np.uint8)
    return blocks


def _tq2_0_codes_swapped(blocks: np.ndarray) -> np.ndarray:
    """TQ2_0's 2-bit codes 0 and 2 swapped (−1 read as +1 and back): the ternary mapping mirrored."""
    qs = blocks[:, :64]
    low_bits_clear = ~qs & np.uint8(0x55)  # per 2-bit field: 1 where the code's low bit is 0 (codes 0 and 2)
    blocks[:, :64] = qs ^ (low_bits_clear << np.uint8(1))
    return blocks


def _iq2_s_eighth_sign_lost(blocks: np.ndarray) -> np.ndarray:
    """IQ2_S's stored sign bytes (signs[32] after the 32 grid bytes) read without bit 7: the last element
    of every group of eight keeps the grid's positive value."""
    blocks[:, 34:66] &= np.uint8(0x7F)
    return blocks


def _q4_1_sum_without_scale(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
    """Q4_1 × Q8_1's vec_dot adding m·Σq8 instead of m·s (s = d8·Σq8): the activation block's sum without
    its scale. The src1 rounding itself is left out (the golden's exact src1), so only the sum is wrong:
    each block adds m_b·Σ_block b·(1/d8 − 1), d8 = amax/127 of the src1 block."""
    if case.inputs[0].dtype != "q4_1":
        return golden.run(case, inputs)
    exact = golden.run(case, inputs)
    a_raw = np.asarray(inputs[0], np.uint8)
    k = case.inputs[0].ne[0]
    minimum = a_raw.reshape(-1, 20)[:, 2:4].copy().view("<f2").astype(np.float64)
    minimum = minimum.reshape(a_raw.shape[:-1] + (k // 32,))
    b = np.asarray(catalogue.golden_inputs(case, inputs)[1], np.float64)
    blocks = b.reshape(b.shape[:-1] + (k // 32, 32))
    d8 = np.abs(blocks).max(axis=-1) / 127.0
    with np.errstate(divide="ignore", invalid="ignore"):
        extra = np.where(d8 > 0, blocks.sum(axis=-1) * (1.0 / d8 - 1.0), 0.0)
    out = np.asarray(exact.output, np.float64) + matmul.mul_mat(minimum, extra)
    return RunResult(out, [np.array(x) for x in inputs])


def _iq1_m_scale_nibbles_reversed(blocks: np.ndarray) -> np.ndarray:
    """IQ1_M's F16 d assembled from the top nibbles of its four scale words in the wrong order (word 3's
    nibble as the lowest, word 0's as the sign and top exponent bits)."""
    words = blocks[:, 48:56].copy().view("<u2")
    top = words >> np.uint16(12)
    blocks[:, 48:56] = ((words & np.uint16(0x0FFF)) | (top[:, ::-1] << np.uint16(12))).astype("<u2").view(np.uint8)
    return blocks


def _nvfp4_scale_not_halved(blocks: np.ndarray) -> np.ndarray:
    """NVFP4's UE4M3 scales used whole with the doubled E2M1 table (the halving forgotten): the exponent
    field one higher, for the drawn scales (exponent 0..11) every value twice too large or more."""
    exponent = (blocks[:, 0:4] >> np.uint8(3)) & np.uint8(15)
    blocks[:, 0:4] = (blocks[:, 0:4] & np.uint8(0x87)) | (np.minimum(exponent + 1, 14) << np.uint8(3))
    return blocks


@planted("quantized and mul_mat- and iq1_m", "IQ1_M's d taken from its scale words' top nibbles in reverse order")
def iq1_m_scale_nibbles_reversed(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("iq1_m_scale_nibbles_reversed", "MUL_MAT",
                        _reading_src0_as("iq1_m", _iq1_m_scale_nibbles_reversed))


@planted("quantized and mul_mat- and nvfp4", "NVFP4's UE4M3 sub-block scales not halved for the doubled E2M1 table")
def nvfp4_scale_not_halved(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("nvfp4_scale_not_halved", "MUL_MAT", _reading_src0_as("nvfp4", _nvfp4_scale_not_halved))


@planted("quantized and mul_mat- and q4_k", "Q4_K's get_scale_min_k4 masks the first four sub-block scales with 31: "
                                            "bit 5 of a 6-bit scale lost (random scale bytes set it half the time)")
def q4_k_scale_bit_lost(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("q4_k_scale_bit_lost", "MUL_MAT", _reading_src0_as("q4_k", _q4_k_scale_bit5_lost))


@planted("quantized and mul_mat- and q5_0", "Q5_0's qh read in the wrong order: element j takes bit 31 − j as its "
                                            "fifth bit")
def q5_0_high_bits_reversed(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("q5_0_high_bits_reversed", "MUL_MAT", _reading_src0_as("q5_0", _q5_0_high_bits_reversed))


@planted("quantized and mul_mat- and mxfp4", "MXFP4's E8M0 scale decoded as 2^(e − 127), not 2^(e − 128) with the "
                                             "doubled E2M1 table: every block twice too large")
def mxfp4_exponent_off_by_one(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("mxfp4_exponent_off_by_one", "MUL_MAT", _reading_src0_as("mxfp4", _mxfp4_exponent_plus_one))


@planted("quantized and mul_mat- and tq2_0", "TQ2_0's ternary codes 0 and 2 swapped: −1 and +1 mirrored")
def tq2_0_ternary_swapped(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("tq2_0_ternary_swapped", "MUL_MAT", _reading_src0_as("tq2_0", _tq2_0_codes_swapped))


@planted("quantized and mul_mat- and q4_1", "Q4_1 × Q8_1 adds the weight block's minimum times Σq8, the activation "
                                            "block's sum without its scale d8")
def q4_1_sum_without_scale(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("q4_1_sum_without_scale", "MUL_MAT", _q4_1_sum_without_scale)


@planted("quantized and mul_mat- and iq2_s", "IQ2_S's sign bytes read as 7 bits: the eighth element of every "
                                             "grid group loses its sign")
def iq2_s_grid_sign_lost(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("iq2_s_grid_sign_lost", "MUL_MAT", _reading_src0_as("iq2_s", _iq2_s_eighth_sign_lost))


# ---- quantizing copies into the other KV-cache types (CPY F32/F16 → Q4_1, Q5_0, IQ4_NL) -------------------


def _requantized(qtype: str, edit: Callable[[np.ndarray, np.ndarray], None]) -> Distortion:
    """A CPY into ``qtype`` whose blocks are ggml's x86 ones after ``edit(blocks, exact float blocks)``."""

    def distortion(golden: GoldenDevice, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        if case.dst != qtype or case.inputs[0].dtype == qtype:
            return golden.run(case, inputs)
        exact = np.asarray(catalogue.evaluate(case, catalogue.golden_inputs(case, inputs)), np.float32)
        x = exact.reshape(-1, 32)
        blocks = formats.quantize(x, qtype, "x86").reshape(x.shape[0], -1)
        edit(blocks, x)
        return RunResult(blocks.reshape(-1), [np.array(v) for v in inputs])

    return distortion


def _q4_1_truncate(blocks: np.ndarray, x: np.ndarray) -> None:
    """Q4_1 quants (x − min)/d truncated: the +0.5 of ggml's rounding missing."""
    d = blocks[:, 0:2].copy().view("<f2").astype(np.float64)
    m = x.min(axis=1, keepdims=True).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.clip(np.floor(np.where(d != 0, (x - m) / d, 0.0)), 0, 15).astype(np.uint8)
    blocks[:, 4:20] = q[:, :16] | (q[:, 16:] << np.uint8(4))


def _q5_0_qh_reversed(blocks: np.ndarray, x: np.ndarray) -> None:
    """Q5_0's fifth bits stored most significant first: element j's in bit 31 − j of qh."""
    blocks[:] = _q5_0_high_bits_reversed(blocks)


def _iq4_nl_no_refit(blocks: np.ndarray, x: np.ndarray) -> None:
    """IQ4_NL storing the first-pass scale max/−127 instead of the least-squares fit of the levels."""
    magnitude = np.abs(x)
    signed_max = np.take_along_axis(x, magnitude.argmax(axis=1)[:, None], axis=1)[:, 0]
    blocks[:, 0:2] = (signed_max / np.float32(-127)).astype("<f2").view(np.uint8).reshape(-1, 2)


@planted("quantized and cpy and q4_1", "a Q4_1 quantizer that truncates (x − min)/d instead of rounding it")
def q4_1_truncating(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("q4_1_truncating", "CPY", _requantized("q4_1", _q4_1_truncate))


@planted("quantized and cpy and q5_0", "a Q5_0 quantizer storing the fifth bits in qh in the wrong order")
def q5_0_cpy_high_bits_reversed(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("q5_0_cpy_high_bits_reversed", "CPY", _requantized("q5_0", _q5_0_qh_reversed))


@planted("quantized and cpy and iq4_nl", "an IQ4_NL quantizer that stores the first-pass scale max/−127 "
                                         "without the least-squares refit of the levels")
def iq4_nl_scale_not_refit(options: dict[str, Any]) -> FaultyDevice:
    return FaultyDevice("iq4_nl_scale_not_refit", "CPY", _requantized("iq4_nl", _iq4_nl_no_refit))

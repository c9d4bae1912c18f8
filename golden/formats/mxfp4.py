"""MXFP4 (OCP microscaling FP4, 32 elements, 17 bytes): one E8M0 exponent byte ``e`` + 16 ``qs`` bytes.

Each nibble is an E2M1 code (sign, 2 exponent bits, 1 mantissa bit); ggml stores the E2M1 values
doubled as int8 (``kvalues_mxfp4``) and halves the scale instead: ``d = 2**(e - 128)``, built from its
bits (``e < 2`` gives the subnormals 2**-128 and 2**-127; ``e = 255`` is 2**127, not NaN). Element
j < 16 is ``kvalues[qs[j] & 15] * d``, element j + 16 the high nibble's.
"""

from __future__ import annotations

import numpy as np

from golden.formats.format import Format, block_rows, nibbles


def _e2m1_doubled() -> np.ndarray:
    """The 16 E2M1 values times two, generated from the format: 0, 1, 2, 3, 4, 6, 8, 12 and negatives."""
    codes = np.arange(16)
    exponent, mantissa = (codes >> 1) & 3, codes & 1
    magnitude = np.where(exponent == 0, mantissa, (2 + mantissa) * 2.0 ** (exponent - 1))  # x2: 0.5 -> 1
    # int8 in ggml, so code 8 (negative zero in E2M1) is +0 and 0 * d is +0
    return np.where(codes & 8, -magnitude, magnitude).astype(np.int8).astype(np.float32)


KVALUES_MXFP4 = _e2m1_doubled()


def e8m0_half(e: np.ndarray) -> np.ndarray:
    """``ggml_e8m0_to_fp32_half``: 2**(e - 128) as f32 bits."""
    e = e.astype(np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << 23).astype(np.uint32)
    return bits.view(np.float32)


def dequantize_mxfp4(raw: np.ndarray, n: int) -> np.ndarray:
    blocks = block_rows(raw, "mxfp4", 32, 17, n)
    d = e8m0_half(blocks[:, 0])[:, None]
    values = KVALUES_MXFP4[nibbles(blocks[:, 1:])]
    with np.errstate(over="ignore"):  # 12 * 2**127 is inf in f32, as in C
        return (values * d).reshape(-1)


FORMATS: tuple[Format, ...] = (
    Format("mxfp4", "mxfp4", 39, 32, 17, dequantize_mxfp4, scale_fields=(0,), scale_encoding="e8m0"),)

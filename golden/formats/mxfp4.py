"""The FP4 (E2M1) formats: MXFP4 (32 elements, 17 bytes) and NVFP4 (64 elements, 36 bytes).

MXFP4 (OCP microscaling FP4): one E8M0 exponent byte ``e`` + 16 ``qs`` bytes.

Each nibble is an E2M1 code (sign, 2 exponent bits, 1 mantissa bit); ggml stores the E2M1 values
doubled as int8 (``kvalues_mxfp4``) and halves the scale instead: ``d = 2**(e - 128)``, built from its
bits (``e < 2`` gives the subnormals 2**-128 and 2**-127; ``e = 255`` is 2**127, not NaN). Element
j < 16 is ``kvalues[qs[j] & 15] * d``, element j + 16 the high nibble's.

NVFP4: four UE4M3 scale bytes ``d[4]`` (one per 16 elements), then 32 ``qs`` bytes. Sub-block ``s``'s
element j < 8 is ``kvalues[qs[8s + j] & 15] * scale(d[s])``, element j + 8 the high nibble's, where
``scale`` (``ggml_ue4m3_to_fp32``) halves the UE4M3 value to match the doubled table: bit 7 is
ignored, exponent bits 6..3 (bias 7), mantissa bits 2..0, exponent 0 subnormal (``man·2**-9``), and
the bytes 0x00 and 0x7F (UE4M3's NaN) read as 0; 0xFF, the same NaN with bit 7 set, reads as 240.
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


def _ue4m3_half() -> np.ndarray:
    """The 256 scale bytes' ``ggml_ue4m3_to_fp32`` values, from the format (every one exact in f32)."""
    code = np.arange(256)
    exponent, mantissa = (code >> 3) & 15, code & 7
    raw = np.where(exponent == 0, mantissa * 2.0**-9, (1 + mantissa / 8) * 2.0 ** (exponent - 7))
    return np.where((code == 0) | (code == 0x7F), 0.0, raw * 0.5).astype(np.float32)


UE4M3_HALF = _ue4m3_half()


_CHUNK_BLOCKS = 4096  # 1 MiB of f32 output a chunk


def _nvfp4_body(blocks: np.ndarray, out: np.ndarray) -> None:
    m = blocks.shape[0]
    view = out.reshape(m, 4, 16)
    np.take(KVALUES_MXFP4, nibbles(blocks[:, 4:36].reshape(m * 4, 8)).reshape(m, 4, 16), out=view)
    np.multiply(view, UE4M3_HALF[blocks[:, 0:4]][:, :, None], out=view)


FORMATS: tuple[Format, ...] = (
    Format("mxfp4", "mxfp4", 39, 32, 17, dequantize_mxfp4, scale_fields=(0,), scale_encoding="e8m0"),
    Format.of_blocks("nvfp4", "nvfp4", 40, 64, 36, _nvfp4_body, _CHUNK_BLOCKS, scale_fields=(0, 1, 2, 3),
                     scale_encoding="ue4m3"),  # one UE4M3 scale per 16 elements, no super-scale
)

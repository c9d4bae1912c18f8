"""ggml's non-linear 4-bit format IQ4_NL (32 elements, 18 bytes): f16 ``d`` + 16 ``qs`` bytes.

Element j < 16 is ``d * KVALUES_IQ4NL[qs[j] & 15]``, element j + 16 uses the high nibble; the product
is one f32 multiplication of the widened f16 scale and the table value, as in
``dequantize_row_iq4_nl`` (ggml-quants.c), so it is bit for bit on any bytes.
"""

from __future__ import annotations

import numpy as np

from golden.formats.format import Format, block_rows, nibbles

# ggml-common.h ``kvalues_iq4nl``; tests/test_formats_iq_vs_ggml.py checks it against to_float.
KVALUES_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32)


def dequantize_iq4_nl(raw: np.ndarray, n: int) -> np.ndarray:
    blocks = block_rows(raw, "iq4_nl", 32, 18, n)
    d = np.ascontiguousarray(blocks[:, :2]).view("<f2").astype(np.float32)  # [nblocks, 1]
    values = KVALUES_IQ4NL[nibbles(blocks[:, 2:])]
    with np.errstate(invalid="ignore", over="ignore"):  # inf/NaN scales propagate as in C
        return (values * d).reshape(-1)


FORMATS: tuple[Format, ...] = (Format("iq4_nl", "iq4_nl", 20, 32, 18, dequantize_iq4_nl, scale_fields=(0,)),)

"""ggml's ternary TQ2_0 (256 elements, 66 bytes): 64 ``qs`` bytes of four 2-bit codes each, then f16 ``d``.

Element ``32*l + m`` of each 128-element half ``h`` is ``((qs[32*h + m] >> 2*l) & 3) - 1`` times ``d``
(code 3 gives 2, which ggml's quantizer never writes but ``to_float`` decodes), one f32 product as in
``dequantize_row_tq2_0``.
"""

from __future__ import annotations

import numpy as np

from golden.formats.format import Format, block_rows

_SHIFTS = np.array([0, 2, 4, 6], np.uint8)


def dequantize_tq2_0(raw: np.ndarray, n: int) -> np.ndarray:
    blocks = block_rows(raw, "tq2_0", 256, 66, n)
    d = np.ascontiguousarray(blocks[:, 64:]).view("<f2").astype(np.float32)  # [nblocks, 1]
    qs = blocks[:, :64].reshape(-1, 2, 1, 32)  # [block, half, 1, m]
    codes = (qs >> _SHIFTS[None, None, :, None]) & 3  # [block, half, l, m]
    values = codes.reshape(blocks.shape[0], 256).astype(np.float32) - np.float32(1)
    with np.errstate(invalid="ignore", over="ignore"):  # inf/NaN scales propagate as in C
        return (values * d).reshape(-1)


FORMATS: tuple[Format, ...] = (Format("tq2_0", "tq2_0", 35, 256, 66, dequantize_tq2_0, scale_fields=(64,)),)

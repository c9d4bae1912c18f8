"""ggml's ternary formats TQ1_0 and TQ2_0 (256 elements), f16 ``d`` last; one f32 product ``(q − 1)·d``.

* TQ2_0, 66 bytes: 64 ``qs`` bytes of four 2-bit codes each. Element ``32*l + m`` of each 128-element
  half ``h`` is ``((qs[32*h + m] >> 2*l) & 3) - 1`` (code 3 gives 2, which ggml's quantizer never
  writes but ``to_float`` decodes), as in ``dequantize_row_tq2_0``.
* TQ1_0, 54 bytes: ``qs[48]`` of five base-3 digits each, ``qh[4]`` of four, ``d``. Digit ``n`` of a
  byte ``b`` is ``((uint8)(b·3**n) · 3) >> 8`` (a byte holds a fixed-point fraction of 3**5 and each
  multiplication by 3 brings the next digit into the top: any byte decodes, 243..255 included).
  Elements ``32n + m`` (m < 32) are digit n of ``qs[m]``, ``160 + 16n + m`` digit n of ``qs[32 + m]``,
  ``240 + 4n + j`` digit n (< 4) of ``qh[j]``, as in ``dequantize_row_tq1_0``.
"""

from __future__ import annotations

import numpy as np

from golden.formats.format import Format, f16_column

_SHIFTS = np.array([0, 2, 4, 6], np.uint8)


def _codes_times_scale(codes: np.ndarray, d: np.ndarray, out: np.ndarray) -> None:
    """out = (code − 1)·d: small uint8 codes to f32 (exact) in one pass, then the one f32 product."""
    np.subtract(codes, np.float32(1), out=out, dtype=np.float32)
    np.multiply(out, d[:, None], out=out)


def _tq2_0_body(blocks: np.ndarray, out: np.ndarray) -> None:
    codes = np.empty(out.shape, np.uint8)  # element 128h + 32l + m: field l of qs[32h + m]
    for half in range(2):
        source = blocks[:, 32 * half : 32 * half + 32]
        for field in range(4):  # scalar shifts: NumPy's broadcast uint8 loops are several times slower
            start = 128 * half + 32 * field
            np.right_shift(source, _SHIFTS[field], out=codes[:, start : start + 32])
    np.bitwise_and(codes, np.uint8(3), out=codes)
    _codes_times_scale(codes, f16_column(blocks, 64), out)


def _base3_codes() -> np.ndarray:
    """(256,) uint8: the digit ``(q·3) >> 8`` that the uint8 product ``q`` brings to the top (at most 2)."""
    return ((np.arange(256, dtype=np.uint32) * np.uint32(3)) >> np.uint32(8)).astype(np.uint8)


# (byte, digit n): digit n of every byte, less one (−1, 0 or 1); what a byte decodes to wherever it is stored
TQ1_DIGITS = _base3_codes()[(np.arange(256)[:, None] * 3 ** np.arange(5)[None, :]) & 0xFF].astype(np.float32) - 1
# (q·3) >> 8 is 1 from q = 86 (258 >> 8) and 2 from q = 171 (513 >> 8): two compares instead of a gather
_DIGIT_STEPS = (np.uint8(86), np.uint8(171))
_CHUNK_BLOCKS = 1024  # 1 MiB of f32 output a chunk
# (first byte, last byte + 1, digits, first element): qs[0:32], qs[32:48], qh[0:4]
_TQ1_RUNS = ((0, 32, 5, 0), (32, 48, 5, 160), (48, 52, 4, 240))


def _tq1_0_body(blocks: np.ndarray, out: np.ndarray) -> None:
    products = np.empty(out.shape, np.uint8)  # b·3ⁿ in uint8 (wrapping, as the C's uint8_t product), element order
    for first, stop, digits, element in _TQ1_RUNS:
        width = stop - first
        for digit in range(digits):
            start = element + digit * width
            np.multiply(blocks[:, first:stop], np.uint8(3**digit), out=products[:, start : start + width])
    codes = np.greater_equal(products, _DIGIT_STEPS[0]).view(np.uint8)
    codes += np.greater_equal(products, _DIGIT_STEPS[1]).view(np.uint8)
    _codes_times_scale(codes, f16_column(blocks, 52), out)


FORMATS: tuple[Format, ...] = (
    Format.of_blocks("tq1_0", "tq1_0", 34, 256, 54, _tq1_0_body, _CHUNK_BLOCKS, scale_fields=(52,)),
    Format.of_blocks("tq2_0", "tq2_0", 35, 256, 66, _tq2_0_body, _CHUNK_BLOCKS, scale_fields=(64,)),
)

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


_FIELD_SHIFTS = _SHIFTS[None, None, :, None]


def _codes_times_scale(codes: np.ndarray, d: np.ndarray, out: np.ndarray) -> None:
    """out = (code − 1)·d: small uint8 codes to f32 (exact) in one pass, then the one f32 product."""
    np.subtract(codes, np.float32(1), out=out, dtype=np.float32)
    np.multiply(out, d[:, None], out=out)


def _tq2_0_body(blocks: np.ndarray, out: np.ndarray) -> None:
    m = blocks.shape[0]
    codes = blocks[:, :64].reshape(m, 2, 1, 32) >> _FIELD_SHIFTS  # [block, half, l, m]
    np.bitwise_and(codes, np.uint8(3), out=codes)
    _codes_times_scale(codes.reshape(m, 256), f16_column(blocks, 64), out)


def _base3_codes() -> np.ndarray:
    """(5, 256) uint8: digit n of every byte (``(q·3) >> 8`` of the uint8 product, at most 2)."""
    byte = np.arange(256, dtype=np.uint32)[None, :]
    shifted = (byte * 3 ** np.arange(5, dtype=np.uint32)[:, None]) & np.uint32(0xFF)  # the uint8 product
    return ((shifted * np.uint32(3)) >> np.uint32(8)).astype(np.uint8)


_DIGIT_ROWS = _base3_codes()  # (digit, byte): one gather per digit and byte range
TQ1_DIGITS = _DIGIT_ROWS.T.astype(np.float32) - np.float32(1)  # (byte, digit): −1, 0 or 1
_CHUNK_BLOCKS = 1024  # 1 MiB of f32 output a chunk
# (first byte, last byte + 1, digits, first element): qs[0:32], qs[32:48], qh[0:4]
_TQ1_RUNS = ((0, 32, 5, 0), (32, 48, 5, 160), (48, 52, 4, 240))


def _tq1_0_body(blocks: np.ndarray, out: np.ndarray) -> None:
    codes = np.empty(out.shape, np.uint8)
    for first, stop, digits, element in _TQ1_RUNS:
        width = stop - first
        source = blocks[:, first:stop]
        for digit in range(digits):
            start = element + digit * width
            np.take(_DIGIT_ROWS[digit], source, out=codes[:, start : start + width], mode="clip")
    _codes_times_scale(codes, f16_column(blocks, 52), out)


FORMATS: tuple[Format, ...] = (
    Format.of_blocks("tq1_0", "tq1_0", 34, 256, 54, _tq1_0_body, _CHUNK_BLOCKS),
    Format.of_blocks("tq2_0", "tq2_0", 35, 256, 66, _tq2_0_body, _CHUNK_BLOCKS),
)

"""ggml's 1- and 2-bit formats with one f16 scale: Q1_0 (128 elements, 18 bytes) and Q2_0 (64, 18).

* Q1_0: ``d, qs[16]``; bit ``j % 8`` of ``qs[j / 8]`` picks ``d`` (1) or ``−d`` (0). No arithmetic
  touches ``d``, so two facts of the C show: its f16 widening (``ggml_compute_fp16_to_fp32``) ends in
  a multiplication by 2**-112, which quiets a signalling NaN (numpy's widening keeps it signalling),
  and the negation flips the sign bit, a NaN's included (``neg_d = -d``).
* Q2_0: ``d, qs[16]``; bits ``2(j % 4)``..+1 of ``qs[j / 4]`` are ``q``, the value ``(q − 1)·d``, one f32
  product (q = 3 gives ``2·d``), as in ``dequantize_row_q2_0``. Its element order is the bytes'
  (four consecutive elements a byte), not TQ2_0's strided one.
"""

from __future__ import annotations

import numpy as np

from golden.formats.format import Format, f16_column

_TWO_BIT_SHIFTS = np.array([0, 2, 4, 6], np.uint8)


_F32_QUIET_BIT = np.uint32(0x00400000)
_CHUNK_BLOCKS = 4096  # 2 MiB / 1 MiB of f32 output a chunk


def _q1_0_body(blocks: np.ndarray, out: np.ndarray) -> None:
    d = f16_column(blocks, 0)
    d_bits = d.view(np.uint32)
    d_bits[np.isnan(d)] |= _F32_QUIET_BIT
    np.copyto(out, d[:, None])
    clear = np.unpackbits(~blocks[:, 2:18], axis=1, bitorder="little").astype(np.uint32)  # 1 where the bit is 0
    bits = out.view(np.uint32)
    np.bitwise_xor(bits, clear << np.uint32(31), out=bits)  # -d: the sign bit flipped


def _q2_0_body(blocks: np.ndarray, out: np.ndarray) -> None:
    codes = (blocks[:, 2:18, None] >> _TWO_BIT_SHIFTS) & np.uint8(3)  # (block, byte, element of the byte)
    np.copyto(out, codes.reshape(-1, 64), casting="unsafe")
    np.subtract(out, np.float32(1), out=out)
    np.multiply(out, f16_column(blocks, 0)[:, None], out=out)


FORMATS: tuple[Format, ...] = (
    Format.of_blocks("q1_0", "q1_0", 41, 128, 18, _q1_0_body, _CHUNK_BLOCKS, scale_fields=(0,)),
    Format.of_blocks("q2_0", "q2_0", 42, 64, 18, _q2_0_body, _CHUNK_BLOCKS, scale_fields=(0,)),
)

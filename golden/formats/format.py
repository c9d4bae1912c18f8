"""What the registry knows of one ggml block format, and the block plumbing every format shares."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

# "reference": ggml_quantize_chunk / the type's from_float_ref (what writes model files);
# "x86": the CPU backend's from_float on this x86 build (CPY/SET_ROWS into the type, vec_dot_type
# conversion of mul_mat's src1). Where the two are the same code, both names give the same bytes.
Rounding = Literal["reference", "x86"]
ROUNDINGS: tuple[Rounding, ...] = ("reference", "x86")

Dequantize = Callable[[np.ndarray, int], np.ndarray]
Quantize = Callable[[np.ndarray, Rounding], np.ndarray]


@dataclass(frozen=True)
class Format:
    """One quantized ggml type: its block geometry and the golden's functions for it."""

    name: str  # the harness's name, lower case: q4_1, q4_k ...
    ggml_name: str  # ggml's type_name: q4_1, q4_K ...
    ggml_type: int  # enum ggml_type value (ggml.h of the bound release)
    block_size: int  # elements per block
    type_size: int  # bytes per block
    dequantize: Dequantize  # (raw uint8 blocks, n elements) -> float32[n], bit for bit with to_float
    quantize: Quantize | None = None  # (float rows, rounding) -> flat raw blocks; None: ggml has none at run time
    has_to_float: bool = True  # False for the vec_dot-only types (Q8_1, Q8_K): ggml has no to_float

    def row_size(self, ne0: int) -> int:
        """``ggml_row_size``: bytes of ``ne0`` elements (a multiple of the block)."""
        if ne0 % self.block_size:
            raise ValueError(f"{self.name} rows need a multiple of {self.block_size} elements, got {ne0}")
        return ne0 // self.block_size * self.type_size


def block_rows(raw: np.ndarray, fmt_name: str, block_size: int, type_size: int, n: int) -> np.ndarray:
    """The first ``n`` elements' blocks of ``raw`` as a (blocks, type_size) uint8 array.

    Extra bytes are ignored, missing ones are an error (as golden.quant.dequantize does).
    """
    if n < 0 or n % block_size:
        raise ValueError(f"n must be a non-negative multiple of {block_size} for {fmt_name}, got {n}")
    nblocks = n // block_size
    data = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    if data.size < nblocks * type_size:
        raise ValueError(f"{n} {fmt_name} elements need {nblocks * type_size} bytes, got {data.size}")
    return data[: nblocks * type_size].reshape(nblocks, type_size)


def float_blocks(x: np.ndarray, fmt_name: str, block_size: int) -> np.ndarray:
    """Float rows (last dim a multiple of the block) as a (blocks, block_size) float32 array."""
    values = np.ascontiguousarray(x, dtype=np.float32)
    if values.ndim == 0 or values.shape[-1] % block_size:
        raise ValueError(
            f"{fmt_name} quantize needs a last dimension that is a multiple of {block_size}, got {values.shape}"
        )
    return values.reshape(-1, block_size)


def f16_column(blocks: np.ndarray, offset: int) -> np.ndarray:
    """The little-endian f16 at byte ``offset`` of every block, widened to float32 (exact, NaN payloads kept)."""
    return blocks[:, offset : offset + 2].view("<f2")[:, 0].astype(np.float32)


def chunked(nblocks: int, chunk_blocks: int) -> range:
    return range(0, nblocks, chunk_blocks)


def check_rounding(rounding: str) -> None:
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")

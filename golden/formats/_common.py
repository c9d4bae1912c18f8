"""What every format module shares: the table entry type and the block view of raw bytes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Dequantize = Callable[[np.ndarray, int], np.ndarray]


@dataclass(frozen=True)
class Format:
    """One ggml block format: elements and bytes per block, ``to_float`` and (if modelled) a quantizer."""

    name: str
    block_elements: int
    block_bytes: int
    dequantize: Dequantize
    quantize: Callable[[np.ndarray], np.ndarray] | None


def blocks_of(raw: np.ndarray, n: int, block_elements: int, block_bytes: int, name: str) -> np.ndarray:
    """The first ``n`` elements' blocks of ``raw`` as a ``[nblocks, block_bytes]`` uint8 array."""
    if n < 0 or n % block_elements:
        raise ValueError(f"{name}: n must be a non-negative multiple of {block_elements}, got {n}")
    data = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    nblocks = n // block_elements
    if data.size < nblocks * block_bytes:
        raise ValueError(f"{name}: {n} elements need {nblocks * block_bytes} bytes, got {data.size}")
    return data[: nblocks * block_bytes].reshape(nblocks, block_bytes)


def nibbles_split(qs: np.ndarray) -> np.ndarray:
    """``qs[j]``'s low nibble is element j, its high nibble element j + len(qs) (ggml's 4-bit order)."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)

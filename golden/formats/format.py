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
BlockBody = Callable[[np.ndarray, np.ndarray], None]  # (raw blocks, float32 out rows) -> None, in place
# how a format's super-scale fields are stored: little-endian F16 or f32, one E8M0 exponent byte (MXFP4),
# one UE4M3 byte (NVFP4's sub-block scales), or an F16 spread over the top nibbles of four little-endian
# u16 words whose low 12 bits hold other fields (IQ1_M: nibble k of d is the top nibble of word k)
ScaleEncoding = Literal["f16", "f32", "e8m0", "ue4m3", "f16_nibbles"]
SCALE_FIELD_BYTES: dict[str, int] = {"f16": 2, "f32": 4, "e8m0": 1, "ue4m3": 1, "f16_nibbles": 8}
# the bits of a scale field's bytes that are the scale (the rest belong to other fields)
SCALE_FIELD_BITS: dict[str, tuple[int, ...]] = {
    "f16": (0xFF,) * 2, "f32": (0xFF,) * 4, "e8m0": (0xFF,), "ue4m3": (0xFF,), "f16_nibbles": (0x00, 0xF0) * 4}


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
    # byte offsets in a block of the super-scale fields every value of the block is a multiple of (the
    # F16 d, and dmin/m where the format has one; MXFP4's E8M0 exponent byte; Q8_K's f32 d): what a
    # raw random block must keep finite and sane, everything else may hold any bits
    scale_fields: tuple[int, ...] = ()
    scale_encoding: ScaleEncoding = "f16"

    @classmethod
    def of_blocks(
        cls, name: str, ggml_name: str, ggml_type: int, block_size: int, type_size: int, body: BlockBody,
        chunk_blocks: int, quantize: Quantize | None = None, has_to_float: bool = True,
        scale_fields: tuple[int, ...] = (), scale_encoding: ScaleEncoding = "f16",
    ) -> Format:
        """A format whose dequantize runs ``body`` over chunks of blocks (:func:`block_dequantizer`)."""
        dequantize = block_dequantizer(name, block_size, type_size, body, chunk_blocks)
        return cls(name, ggml_name, ggml_type, block_size, type_size, dequantize, quantize, has_to_float,
                   scale_fields, scale_encoding)

    def write_scales(self, blocks: np.ndarray, scales: np.ndarray) -> None:
        """Store ``scales`` (blocks, len(scale_fields)) into the scale fields of (blocks, type_size) uint8
        ``blocks``, in place: rounded to F16/f32 (nearest even; ``f16_nibbles`` keeps the words' low 12
        bits), or for E8M0 and UE4M3 the byte itself (``scales`` then holds the bytes 0..255)."""
        width = SCALE_FIELD_BYTES[self.scale_encoding]
        for i, offset in enumerate(self.scale_fields):
            column = np.asarray(scales[:, i])
            if self.scale_encoding in ("e8m0", "ue4m3"):
                encoded = column.astype(np.uint8).reshape(-1, 1)
            elif self.scale_encoding == "f16_nibbles":
                bits = column.astype("<f2").view(np.uint16).reshape(-1, 1)
                words = np.ascontiguousarray(blocks[:, offset : offset + 8]).view("<u2")
                nibble = (bits >> (4 * np.arange(4, dtype=np.uint16))) & np.uint16(0xF)
                encoded = ((words & np.uint16(0x0FFF)) | (nibble << np.uint16(12))).astype("<u2").view(np.uint8)
            else:
                encoded = column.astype("<f2" if self.scale_encoding == "f16" else "<f4").view(np.uint8)
            blocks[:, offset : offset + width] = encoded.reshape(-1, width)

    def read_scales(self, blocks: np.ndarray) -> np.ndarray:
        """The scale fields of (blocks, type_size) uint8 ``blocks`` as (blocks, len(scale_fields)) float64:
        the F16/f32 values, or for E8M0 and UE4M3 the bytes (as :meth:`write_scales` takes them)."""
        columns = []
        for offset in self.scale_fields:
            if self.scale_encoding in ("e8m0", "ue4m3"):
                columns.append(blocks[:, offset].astype(np.float64))
                continue
            if self.scale_encoding == "f16_nibbles":
                words = np.ascontiguousarray(blocks[:, offset : offset + 8]).view("<u2")
                bits = ((words >> np.uint16(12)) << (4 * np.arange(4, dtype=np.uint16))).sum(axis=1, dtype=np.uint16)
                columns.append(bits.view("<f2").astype(np.float64))
                continue
            kind = "<f2" if self.scale_encoding == "f16" else "<f4"
            width = SCALE_FIELD_BYTES[self.scale_encoding]
            columns.append(np.ascontiguousarray(blocks[:, offset : offset + width]).view(kind)[:, 0].astype(np.float64))
        return np.stack(columns, axis=1) if columns else np.zeros((blocks.shape[0], 0))

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


def nibbles(qs: np.ndarray) -> np.ndarray:
    """(blocks, k) qs bytes -> (blocks, 2k) uint8: the low nibbles (elements 0..k-1), then the high (ggml's order)."""
    half = qs.shape[1]
    q = np.empty((qs.shape[0], 2 * half), np.uint8)
    np.bitwise_and(qs, np.uint8(0x0F), out=q[:, :half])
    np.right_shift(qs, np.uint8(4), out=q[:, half:])
    return q



def block_dequantizer(fmt_name: str, block_size: int, type_size: int, body: BlockBody, chunk_blocks: int) -> Dequantize:
    """A ``dequantize(raw, n)`` that runs ``body`` over chunks of blocks (inf/NaN scales behave as in C)."""

    def dequantize(raw: np.ndarray, n: int) -> np.ndarray:
        blocks = block_rows(raw, fmt_name, block_size, type_size, n)
        out = np.empty((blocks.shape[0], block_size), np.float32)
        with np.errstate(invalid="ignore", over="ignore"):
            for start in chunked(blocks.shape[0], chunk_blocks):
                body(blocks[start : start + chunk_blocks], out[start : start + chunk_blocks])
        return out.reshape(-1)

    dequantize.__name__ = f"dequantize_{fmt_name}"
    return dequantize


def check_rounding(rounding: str) -> None:
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")

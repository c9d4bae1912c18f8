"""Verdict on device bytes: the uploaded quantized inputs as the device really stores them.

ggml-cann does not keep Q4_0/Q8_0 tensors in ggml's block layout: on upload it packs all quants
first, then all F16 scales, and pads rows to MATRIX_ROW_PADDING with zeros. ggml's own
``get_tensor`` converts back, so a layout bug can cancel itself out in a round trip. A device with
:attr:`~device.base.Capability.RAW_MEMORY` returns the stored bytes (``RunResult.raw_inputs``);
here they are compared with what the device must have stored: ``golden.quant.to_cann`` of the
blocks sent on a device with :attr:`~device.base.Capability.CANN_QUANT_LAYOUT` (whose padding must
also be zero: its matmul kernels read it), the blocks themselves elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from device.base import DeviceBytes
from golden import quant
from golden.case import OpCase

# How many differing offsets a comparison keeps: enough to see a pattern, small enough for a record.
MAX_REPORTED_OFFSETS = 16


@dataclass(frozen=True)
class ByteComparison:
    """Device bytes against expected bytes."""

    expected_size: int
    mismatched: int  # count of differing bytes (a short read counts its missing bytes)
    first_offsets: tuple[int, ...]  # up to MAX_REPORTED_OFFSETS differing byte offsets

    @property
    def ok(self) -> bool:
        return self.mismatched == 0

    def as_record(self) -> dict[str, Any]:
        return {"ok": self.ok, "expected_size": self.expected_size, "mismatched": self.mismatched,
                "first_offsets": list(self.first_offsets)}


def compare_bytes(actual: np.ndarray, expected: np.ndarray, base_offset: int = 0) -> ByteComparison:
    """Byte-by-byte comparison; offsets are reported from ``base_offset`` (where ``actual`` starts)."""
    expected = np.asarray(expected, dtype=np.uint8).reshape(-1)
    actual = np.asarray(actual, dtype=np.uint8).reshape(-1)
    common = min(actual.size, expected.size)
    differing = np.flatnonzero(actual[:common] != expected[:common])
    if actual.size < expected.size:
        differing = np.concatenate([differing, np.arange(common, expected.size)])
    first = tuple(base_offset + int(i) for i in differing[:MAX_REPORTED_OFFSETS])
    return ByteComparison(int(expected.size), int(differing.size), first)


def expected_layout(blocks: np.ndarray, dtype: str, cann_layout: bool) -> np.ndarray:
    """The bytes a device must store for ggml ``blocks`` of ``dtype``."""
    flat = np.ascontiguousarray(blocks, dtype=np.uint8).reshape(-1)
    return np.asarray(quant.to_cann(flat, dtype), dtype=np.uint8).reshape(-1) if cann_layout else flat


@dataclass(frozen=True)
class RawVerdict:
    """Per checked input, the layout comparison and (CANN layout) the padding comparison."""

    checks: dict[str, dict[str, Any]]  # "src0_layout" / "src0_padding" -> ByteComparison record

    @property
    def failures(self) -> list[str]:
        return [name for name, check in self.checks.items() if not check["ok"]]


def judge_raw_inputs(
    case: OpCase, inputs: list[np.ndarray], raw_inputs: list[DeviceBytes | None], cann_layout: bool
) -> RawVerdict:
    """Compare each input the device returned bytes for with the layout it must have stored.

    ``inputs`` are the stored inputs as the harness sent them (raw ggml blocks for quantized ones).
    """
    checks: dict[str, dict[str, Any]] = {}
    for i, (spec, sent, raw) in enumerate(zip(case.inputs, inputs, raw_inputs, strict=True)):
        if raw is None:
            continue
        expected = expected_layout(sent, spec.dtype, cann_layout)
        checks[f"src{i}_layout"] = compare_bytes(raw.data, expected).as_record()
        if cann_layout:
            padding = raw.padding
            checks[f"src{i}_padding"] = compare_bytes(padding, np.zeros_like(padding), raw.data_size).as_record() \
                | {"alloc_size": int(raw.stored.size)}
    return RawVerdict(checks)

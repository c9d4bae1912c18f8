"""Deliberately wrong devices: the harness must report each of them (tests of the harness).

Each factory takes the options dict and returns an object with the Device members; the suite
loads them with ``--device tests.plugins.faulty:<factory>``.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any

import numpy as np

from device.base import Capability, DeviceBytes, RunResult, as_output
from device.golden_device import GoldenDevice
from golden import dtypes
from golden.case import OpCase
from tests.plugins import planted

_erf = np.vectorize(math.erf, otypes=[np.float64])


class ErfGeluQuick(GoldenDevice):
    """Computes GELU_QUICK as exact erf-GELU, as the seed's CANN backend does (aclnnGelu)."""

    name = "tests.plugins.faulty:erf_gelu_quick"

    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        if case.op != "GELU_QUICK":
            return super().run(case, inputs)
        x = np.asarray(inputs[0], dtype=np.float64)
        y = 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
        return RunResult(as_output(y, case.dst), [np.array(v) for v in inputs])


class AbortsOnOddRows(GoldenDevice):
    """Aborts the process, as a failed GGML_ASSERT does, on RELU cases whose rows have odd length."""

    name = "tests.plugins.faulty:aborts_on_odd_rows"

    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        if case.op == "RELU" and case.inputs[0].ne[0] % 2:
            sys.stderr.write(f"ggml-fake.c:42: GGML_ASSERT(ne0 % 2 == 0) failed for {case.op}\n")
            sys.stderr.flush()
            os.abort()
        return super().run(case, inputs)


class HangsOnSilu(GoldenDevice):
    """Never answers SILU cases (a hung device call)."""

    name = "tests.plugins.faulty:hangs_on_silu"

    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        if case.op == "SILU":
            import time

            time.sleep(3600)
        return super().run(case, inputs)


class WritesIntoInputs(GoldenDevice):
    """Correct output, but scribbles over src0 afterwards (CANN's COUNT_EQUAL bug, B17)."""

    name = "tests.plugins.faulty:writes_into_inputs"

    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        result = super().run(case, inputs)
        after = [np.array(v) for v in inputs]
        if after and after[0].size:
            after[0].flat[0] = after[0].flat[0] + 1
        return RunResult(result.output, after)


class CachesByShape(GoldenDevice):
    """Keys its "compiled graphs" by (op, input shapes) alone: the first case of a shape fixes the
    op params, and every later case of that op and shape runs with its new inputs but those stale
    params, as backends that cache graphs or executors by shape have done (SCALE(s=3) computing s=2).
    """

    name = "tests.plugins.faulty:caches_by_shape"

    def __init__(self) -> None:
        self._graphs: dict[tuple, OpCase] = {}

    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        from dataclasses import replace

        compiled = self._graphs.setdefault((case.op, tuple(t.ne for t in case.inputs)), case)
        return super().run(replace(case, params=compiled.params), inputs)


@planted("gelu_quick", "B1: ggml-cann computes GELU_QUICK as erf-GELU")
def erf_gelu_quick(options: dict[str, Any]) -> ErfGeluQuick:
    return ErfGeluQuick()


def aborts_on_odd_rows(options: dict[str, Any]) -> AbortsOnOddRows:
    return AbortsOnOddRows()


def hangs_on_silu(options: dict[str, Any]) -> HangsOnSilu:
    return HangsOnSilu()


def writes_into_inputs(options: dict[str, Any]) -> WritesIntoInputs:
    return WritesIntoInputs()


def caches_by_shape(options: dict[str, Any]) -> CachesByShape:
    return CachesByShape()


class SeedLikeQuantTransfers(GoldenDevice):
    """Stores Q4_0/Q8_0 tensors in the CANN device layout the way the seed's set/get_tensor do:
    each set_tensor call transforms *its own chunk* as if it were the whole tensor, and each
    get_tensor transforms back *its read* as if it were the whole tensor. Whole-tensor copies round
    trip; chunked uploads (B18) and offset or partial reads (L1) do not."""

    name = "tests.plugins.faulty:seed_like_quant_transfers"
    capabilities = frozenset({Capability.TRANSFER})

    def transfer(self, spec, raw, writes, reads):  # type: ignore[no-untyped-def]
        from golden import quant

        raw = np.asarray(raw, dtype=np.uint8)
        memory = np.zeros(raw.size, dtype=np.uint8)
        quantized = dtypes.is_quantized(spec.dtype)
        block = dtypes.type_size(spec.dtype)

        def transform(chunk, fn):  # type: ignore[no-untyped-def]
            whole = chunk.size - chunk.size % block
            out = chunk.copy()
            if quantized and whole:
                out[:whole] = fn(chunk[:whole], spec.dtype)
            return out

        for offset, size in writes:
            memory[offset:offset + size] = transform(raw[offset:offset + size], quant.to_cann)
        whole = transform(memory, quant.from_cann)
        pieces = [transform(memory[o:o + s], quant.from_cann) for o, s in reads]
        return {"whole": whole, "pieces": pieces, "nbytes": raw.size, "alloc_size": raw.size}


def seed_like_quant_transfers(options: dict[str, Any]) -> SeedLikeQuantTransfers:
    return SeedLikeQuantTransfers()


class CannLayoutModel(GoldenDevice):
    """Returns the raw bytes of its quantized inputs as ggml-cann stores them (``to_cann`` of the
    blocks, zero padding up to ``cann_alloc_size``), declaring RAW_MEMORY and CANN_QUANT_LAYOUT:
    the verdict on device bytes must pass it. ``stores_ggml_blocks`` keeps ggml's own block layout
    instead, as a backend whose upload transform is skipped does; ``dirty_padding`` leaves the
    padding unset. Both must fail."""

    name = "tests.plugins.faulty:cann_layout_model"
    capabilities = frozenset({Capability.RAW_MEMORY, Capability.CANN_QUANT_LAYOUT})

    def __init__(self, stores_ggml_blocks: bool = False, dirty_padding: bool = False) -> None:
        self.stores_ggml_blocks = stores_ggml_blocks
        self.dirty_padding = dirty_padding

    def run(self, case: OpCase, inputs: list[np.ndarray]) -> RunResult:
        from golden import quant

        result = super().run(case, inputs)
        raw: list[DeviceBytes | None] = []
        for spec, values in zip(case.inputs, inputs, strict=True):
            if not dtypes.is_quantized(spec.dtype) or not spec.layout.is_contiguous:
                raw.append(None)
                continue
            blocks = np.ascontiguousarray(values, dtype=np.uint8).reshape(-1)
            stored = blocks if self.stores_ggml_blocks else quant.to_cann(blocks, spec.dtype)
            alloc = quant.cann_alloc_size(spec.dtype, spec.ne)
            padding = np.full(alloc - blocks.size, 0xA5 if self.dirty_padding else 0, np.uint8)
            raw.append(DeviceBytes(np.concatenate([stored, padding]), blocks.size))
        return RunResult(result.output, result.inputs_after, result.extra, raw)


def cann_layout_model(options: dict[str, Any]) -> CannLayoutModel:
    return CannLayoutModel()


def stores_ggml_blocks(options: dict[str, Any]) -> CannLayoutModel:
    return CannLayoutModel(stores_ggml_blocks=True)


def dirty_padding(options: dict[str, Any]) -> CannLayoutModel:
    return CannLayoutModel(dirty_padding=True)

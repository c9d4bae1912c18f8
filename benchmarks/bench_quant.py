"""Throughput of golden.quant next to a memory copy, a plain C loop and ggml's own quantizers.

Run from the repository root::

    python benchmarks/bench_quant.py [--elements 33554432] [--repeat 5] [--no-c]

Each figure is the best of ``--repeat`` wall-clock runs of one call on the whole tensor (fresh output
each call, as the seed's ``malloc`` per ``set_tensor`` does). GB/s counts bytes read plus bytes
written; Melem/s counts tensor elements. The C loops are compiled here with ``gcc -O2`` (skipped
with ``--no-c`` or without gcc): one straightforward loop over blocks per transform, written from
the layout description, the speed a hand-written host transform would have.
"""

from __future__ import annotations

import argparse
import ctypes
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, not installed

from device.ggml.quant import ggml_dequantize, ggml_quantize  # noqa: E402
from golden.quant import BLOCK_BYTES, QK, dequantize, from_cann, quantize, to_cann  # noqa: E402

C_LOOPS = r"""
#include <stdint.h>
#include <string.h>

void q4_0_to_cann(const uint8_t *src, uint8_t *dst, int64_t nblocks) {
    uint8_t *quants = dst, *scales = dst + nblocks * 16;
    for (int64_t i = 0; i < nblocks; i++) {
        const uint8_t *block = src + i * 18, *qs = block + 2;
        memcpy(scales + 2 * i, block, 2);
        for (int k = 0; k < 8; k++) {
            quants[16 * i + k] = (uint8_t)(((qs[2 * k] & 0x0F) | (qs[2 * k + 1] << 4)) ^ 0x88);
            quants[16 * i + 8 + k] = (uint8_t)(((qs[2 * k] >> 4) | (qs[2 * k + 1] & 0xF0)) ^ 0x88);
        }
    }
}

void q4_0_from_cann(const uint8_t *src, uint8_t *dst, int64_t nblocks) {
    const uint8_t *quants = src, *scales = src + nblocks * 16;
    for (int64_t i = 0; i < nblocks; i++) {
        uint8_t *block = dst + i * 18;
        memcpy(block, scales + 2 * i, 2);
        for (int k = 0; k < 8; k++) {
            uint8_t first = quants[16 * i + k] ^ 0x88, second = quants[16 * i + 8 + k] ^ 0x88;
            block[2 + 2 * k] = (uint8_t)((first & 0x0F) | (second << 4));
            block[3 + 2 * k] = (uint8_t)((first >> 4) | (second & 0xF0));
        }
    }
}

void q8_0_to_cann(const uint8_t *src, uint8_t *dst, int64_t nblocks) {
    for (int64_t i = 0; i < nblocks; i++) {
        memcpy(dst + nblocks * 32 + 2 * i, src + 34 * i, 2);
        memcpy(dst + 32 * i, src + 34 * i + 2, 32);
    }
}

void q8_0_from_cann(const uint8_t *src, uint8_t *dst, int64_t nblocks) {
    for (int64_t i = 0; i < nblocks; i++) {
        memcpy(dst + 34 * i, src + nblocks * 32 + 2 * i, 2);
        memcpy(dst + 34 * i + 2, src + 32 * i, 32);
    }
}
"""


def compile_c_loops(workdir: Path) -> ctypes.CDLL | None:
    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    source, library = workdir / "loops.c", workdir / "loops.so"
    source.write_text(C_LOOPS)
    subprocess.run([gcc, "-O2", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return ctypes.CDLL(str(library))


def c_transform(lib: ctypes.CDLL, name: str, qtype: str) -> Callable[[np.ndarray], np.ndarray]:
    function = getattr(lib, name)
    function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]

    def run(data: np.ndarray) -> np.ndarray:
        out = np.empty_like(data)
        function(data.ctypes.data, out.ctypes.data, data.size // BLOCK_BYTES[qtype])
        return out

    return run


def best_seconds(call: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def bench_type(
    qtype: str, x: np.ndarray, lib: ctypes.CDLL | None, repeat: int
) -> list[tuple[str, float, int]]:
    """(what, best seconds, bytes moved) for every measured call on one quantized type."""
    n = x.size
    raw = ggml_quantize(x, qtype)
    dev = to_cann(raw, qtype)
    moved = 2 * raw.size  # read the blocks once, write them once
    cases: list[tuple[str, Callable[[], object], int]] = [
        ("numpy copy of the blocks (floor)", raw.copy, moved),
        ("golden to_cann", lambda: to_cann(raw, qtype), moved),
        ("golden from_cann", lambda: from_cann(dev, qtype), moved),
    ]
    if lib is not None:
        to_c = c_transform(lib, f"{qtype}_to_cann", qtype)
        from_c = c_transform(lib, f"{qtype}_from_cann", qtype)
        # The C loops must agree with golden, or their timing means nothing.
        assert np.array_equal(to_c(raw), dev) and np.array_equal(from_c(dev), raw)
        cases += [
            ("C loop to_cann (gcc -O2)", lambda: to_c(raw), moved),
            ("C loop from_cann (gcc -O2)", lambda: from_c(dev), moved),
        ]
    convert = 4 * n + raw.size  # f32 values on one side, blocks on the other
    cases += [
        ("golden quantize (reference)", lambda: quantize(x, qtype), convert),
        ("golden quantize (x86)", lambda: quantize(x, qtype, "x86"), convert),
        ("ggml_quantize_chunk", lambda: ggml_quantize(x, qtype, "chunk"), convert),
        ("ggml CPU from_float (AVX2)", lambda: ggml_quantize(x, qtype, "cpu"), convert),
        ("golden dequantize", lambda: dequantize(raw, qtype, n), convert),
        ("ggml to_float", lambda: ggml_dequantize(raw, qtype, n), convert),
    ]
    return [(what, best_seconds(call, repeat), nbytes) for what, call, nbytes in cases]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--elements", type=int, default=32 * 1024 * 1024, help="tensor size (multiple of 32)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-c", action="store_true", help="skip the compiled C loops")
    args = parser.parse_args()
    n = args.elements - args.elements % QK
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)

    with tempfile.TemporaryDirectory() as workdir:
        lib = None if args.no_c else compile_c_loops(Path(workdir))
        results = {qtype: bench_type(qtype, x, lib, args.repeat) for qtype in BLOCK_BYTES}

    print(f"{n} elements ({n / 2**20:.0f} Mi), best of {args.repeat}")
    print(f"{'type':5} {'what':34} {'ms':>9} {'GB/s':>7} {'Melem/s':>9}")
    for qtype, rows in results.items():
        for what, seconds, nbytes in rows:
            rate, elements = nbytes / seconds / 1e9, n / seconds / 1e6
            print(f"{qtype:5} {what:34} {seconds * 1e3:9.2f} {rate:7.2f} {elements:9.0f}")


if __name__ == "__main__":
    main()

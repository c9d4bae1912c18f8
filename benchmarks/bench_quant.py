"""golden.quant's speed next to what it must keep up with, from one run.

Run from the repository root::

    python benchmarks/bench_quant.py [--elements 4194304 33554432] [--repeat 7] [--clock cpu|wall] [--no-c]
    python benchmarks/bench_quant.py --registry [--registry-elements 1048576] [--repeat 7]

For each tensor size (floats in rows of 1024, default 4096x1024 and 32 Mi) and each of Q4_0 and Q8_0
it prints every golden operation's time and its speed ratio against

* the bar it must reach: for ``to_cann``/``from_cann`` a plain C loop over blocks (compiled here
  with ``gcc -O2``: one loop per transform, the seed's per-block logic with its XOR pass fused in,
  so at least as fast as the seed's own code); for ``quantize``/``dequantize`` gguf-py's numpy
  quantizer (``gguf.quants``, ``pip install -e '.[bench]'``);
* a numpy copy of the same bytes (the blocks for the transforms, the float32 values for the
  quantizers), the memory floor.

A ratio is the other side's time divided by golden's: 1.00x or more means golden is at least as
fast. ggml's own C quantizers (through ``device.ggml.quant``) are printed for context, and last,
Q8_0's layout change per block with each of NumPy's strided copies next to the C loop. Each figure
is the best of ``--repeat`` rounds; the calls of one row take turns, so the sides of a ratio see the
same machine load. ``--clock cpu`` (the default) counts the calling thread's CPU time, page faults
of fresh outputs included, and ignores time spent waiting for a core on a shared machine; ``wall``
counts elapsed time. Every call makes a fresh output, as the seed's ``malloc`` per ``set_tensor``
does. Before timing, each bar's output is checked to equal golden's, or the ratio would mean nothing.

``--registry`` prints instead one table over every type of :mod:`golden.formats`: dequantize of
random blocks (any bytes: inf/NaN scales included) and, for the types golden quantizes, quantize of
normal floats (reference and x86 paths), each against gguf-py's ``dequantize``/``quantize`` where
gguf-py implements the type. Each figure is the median of ``--repeat`` rounds in which golden and
gguf-py alternate. gguf-py's dequantize output is compared with golden's bit for bit (NaN payloads
aside) and the row marked where it differs: gguf-py is a cross-check, not the oracle.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, not installed

from device.base import DeviceError  # noqa: E402
from golden import formats  # noqa: E402
from golden.quant import BLOCK_BYTES, QTYPES, dequantize, from_cann, quantize, to_cann  # noqa: E402

ROW = 1024  # floats per row: weight-like 2-D tensors, which is also how gguf-py groups its work

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

Call = Callable[[], np.ndarray]


@dataclass(frozen=True)
class Bar:
    label: str
    call: Call


@dataclass(frozen=True)
class Case:
    qtype: str
    operation: str
    golden: Call
    bar: Bar | None
    copy: Call  # numpy copy of the same bytes


@dataclass(frozen=True)
class Context:
    label: str
    call: Call


def compile_c_loops(workdir: Path) -> ctypes.CDLL | None:
    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    source, library = workdir / "loops.c", workdir / "loops.so"
    source.write_text(C_LOOPS)
    subprocess.run([gcc, "-O2", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return ctypes.CDLL(str(library))


def c_transform(lib: ctypes.CDLL, name: str, qtype: str, data: np.ndarray) -> Call:
    function = getattr(lib, name)
    function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]

    def run() -> np.ndarray:
        out = np.empty_like(data)
        function(data.ctypes.data, out.ctypes.data, data.size // BLOCK_BYTES[qtype])
        return out

    return run


def load_gguf() -> ModuleType | None:
    try:
        import gguf  # type: ignore[import-untyped]
    except ImportError:
        return None
    return gguf


def load_ggml() -> ModuleType | None:
    try:
        from device.ggml import quant as ggml_quant

        ggml_quant.functions()
    except (ImportError, OSError, DeviceError):
        return None
    return ggml_quant


def must_equal(golden: np.ndarray, other: np.ndarray, what: str) -> None:
    if not np.array_equal(golden.reshape(-1), other.reshape(-1)):
        raise SystemExit(f"bench_quant: {what} differs from golden, so its timing would mean nothing")


def cases_for(
    qtype: str, x: np.ndarray, lib: ctypes.CDLL | None, gguf: ModuleType | None, ggml: ModuleType | None
) -> tuple[list[Case], list[Context]]:
    raw = quantize(x, qtype)
    dev = to_cann(raw, qtype)
    n = x.size
    copy_blocks, copy_floats = raw.copy, x.copy
    to_bar = from_bar = None
    if lib is not None:
        to_c = c_transform(lib, f"{qtype}_to_cann", qtype, raw)
        from_c = c_transform(lib, f"{qtype}_from_cann", qtype, dev)
        must_equal(dev, to_c(), "the C to_cann loop")
        must_equal(raw, from_c(), "the C from_cann loop")
        to_bar, from_bar = Bar("C loop (gcc -O2)", to_c), Bar("C loop (gcc -O2)", from_c)
    quant_bar = dequant_bar = None
    if gguf is not None:
        gtype = getattr(gguf.GGMLQuantizationType, qtype.upper())
        graw = gguf.quants.quantize(x, gtype)
        must_equal(raw, graw, "gguf-py's quantize")
        must_equal(dequantize(raw, qtype, n), gguf.quants.dequantize(graw, gtype), "gguf-py's dequantize")
        quant_bar = Bar("gguf-py", lambda: gguf.quants.quantize(x, gtype))
        dequant_bar = Bar("gguf-py", lambda: gguf.quants.dequantize(graw, gtype))
    cases = [
        Case(qtype, "to_cann", lambda: to_cann(raw, qtype), to_bar, copy_blocks),
        Case(qtype, "from_cann", lambda: from_cann(dev, qtype), from_bar, copy_blocks),
        Case(qtype, "quantize (reference)", lambda: quantize(x, qtype), quant_bar, copy_floats),
        Case(qtype, "quantize (x86)", lambda: quantize(x, qtype, "x86"), quant_bar, copy_floats),
        Case(qtype, "dequantize", lambda: dequantize(raw, qtype, n), dequant_bar, copy_floats),
    ]
    context = []
    if ggml is not None:
        context = [
            Context("ggml_quantize_chunk", lambda: ggml.ggml_quantize(x, qtype, "chunk")),
            Context("ggml CPU from_float", lambda: ggml.ggml_quantize(x, qtype, "cpu")),
            Context("ggml to_float", lambda: ggml.ggml_dequantize(raw, qtype, n)),
        ]
    return cases, context


def best_of_rounds(calls: list[Call], rounds: int, clock: Callable[[], float]) -> list[float]:
    """Seconds per call, the best of ``rounds`` rounds that each run every call once."""
    best = [float("inf")] * len(calls)
    for _ in range(rounds):
        for index, call in enumerate(calls):
            start = clock()
            call()
            best[index] = min(best[index], clock() - start)
    return best


def time_cases(
    per_type: dict[str, tuple[list[Case], list[Context]]], rounds: int, clock: Callable[[], float]
) -> dict[int, float]:
    """Best seconds of every call, by identity. The calls of one row (golden, its bar, the copy)
    take turns, so both sides of a ratio see the same load, each call with caches as warm as its
    neighbours leave them; then the next row. A call shared by two rows is timed once."""
    seconds: dict[int, float] = {}
    for cases, context in per_type.values():
        groups = [[case.golden, case.copy] + ([case.bar.call] if case.bar else []) for case in cases]
        groups += [[c.call] for c in context]
        for group in groups:
            todo = [call for call in group if id(call) not in seconds]
            seconds.update(zip(map(id, todo), best_of_rounds(todo, rounds, clock), strict=True))
    return seconds


def speed(other: float, golden: float) -> str:
    return f"{other / golden:6.2f}x"


def run_size(
    n: int, rounds: int, clock: Callable[[], float], lib: ctypes.CDLL | None, gguf: ModuleType | None,
    ggml: ModuleType | None,
) -> None:
    x = np.random.default_rng(0).standard_normal((n // ROW, ROW)).astype(np.float32)
    per_type = {qtype: cases_for(qtype, x, lib, gguf, ggml) for qtype in QTYPES}
    seconds = time_cases(per_type, rounds, clock)

    def ms(call: Call) -> float:
        return seconds[id(call)] * 1e3

    sizes = ", ".join(f"{q} blocks {n // 32 * BLOCK_BYTES[q] / 2**20:.1f} MiB" for q in QTYPES)
    print(f"\n{x.shape[0]}x{ROW} floats ({n / 2**20:g} Mi elements; {sizes})")
    print(f"{'type':5} {'operation':21} {'golden ms':>9}  {'against':17} {'ms':>8} {'speed':>7}"
          f"  {'copy ms':>7} {'speed':>7}")
    for qtype, (cases, context) in per_type.items():
        for case in cases:
            golden = ms(case.golden)
            if case.bar is None:
                against = f"{'(not available)':17} {'':>8} {'':>7}"
            else:
                against = f"{case.bar.label:17} {ms(case.bar.call):8.2f} {speed(ms(case.bar.call), golden)}"
            copy = ms(case.copy)
            print(f"{qtype:5} {case.operation:21} {golden:9.2f}  {against}  {copy:7.2f} {speed(copy, golden)}")
        if context:
            print(f"{'':5} ggml's own C: " + ", ".join(f"{c.label} {ms(c.call):.2f} ms" for c in context))


FLOOR_BLOCKS = 8192  # 272 KiB of Q8_0 blocks: in cache, so the figures are NumPy's per-item cost


def q8_0_numpy_floor(lib: ctypes.CDLL | None, rounds: int, clock: Callable[[], float]) -> None:
    """Q8_0's layout change per block, as NumPy can do it, next to the C loop: why ``to_cann`` stays
    below 1.0x. The change is one 2-byte and one 32-byte move per block at a 34-byte stride. NumPy's
    cheapest strided copies move one item per step; the figures bound any formulation made of them."""
    n = FLOOR_BLOCKS
    src = np.zeros(n * 34 + 64, np.uint8)
    dst = np.zeros(n * 34 + 64, np.uint8)
    base, out = src.ctypes.data % 16, dst.ctypes.data % 16  # offsets that make 16-byte items aligned

    def strided(buffer: np.ndarray, dtype: str | type, offset: int, stride: int) -> np.ndarray:
        return np.ndarray((n,), dtype=dtype, buffer=buffer, offset=offset, strides=(stride,))

    def copy(dst_view: np.ndarray, src_view: np.ndarray) -> Call:
        def run() -> np.ndarray:
            np.copyto(dst_view, src_view)
            return dst_view
        return run

    rows: list[tuple[str, Call, int]] = [
        ("scales: 2-byte item at a 34-byte stride (every formulation)",
         copy(strided(dst, np.uint16, 0, 2), strided(src, np.uint16, 0, 34)), 1),
        ("quants: one 32-byte item a block (golden's)",
         copy(strided(dst, "V32", 0, 32), strided(src, "V32", 2, 34)), 1),
        ("quants: 16-byte items, aligned (best case; 1 block in 8 is)",
         copy(strided(dst, np.longdouble, (16 - out) % 16, 32), strided(src, np.longdouble, (16 - base) % 16, 32)), 2),
        ("quants: 8-byte items at a 34-byte stride",
         copy(strided(dst, np.uint64, 0, 32), strided(src, np.uint64, 2, 34)), 4),
        ("quants: 2-byte items (always aligned)",
         copy(strided(dst, np.uint16, 0, 32), strided(src, np.uint16, 2, 34)), 16),
    ]
    calls = [call for _, call, _ in rows]
    c_loop = None
    if lib is not None:
        blocks = np.zeros(n * 34, np.uint8)
        c_loop = c_transform(lib, "q8_0_to_cann", "q8_0", blocks)
        calls.append(c_loop)
    repeat = max(rounds, 50)
    seconds = best_of_rounds(calls, repeat, clock)
    print(f"\nq8_0 to_cann per block, {n} blocks in cache, best of {repeat}: NumPy's strided copies")
    per_block = []
    for (label, _, items), sec in zip(rows, seconds, strict=False):
        per_item = sec / n * 1e9  # each view holds one item per block
        per_block.append(per_item * items)
        print(f"  {label:62} {per_item * items:6.2f} ns a block ({items} x {per_item:.2f} ns)")
    if c_loop is not None:
        c_ns = seconds[-1] / n * 1e9
        floor = per_block[0] + per_block[2]
        print(f"  {'the C loop (gcc -O2), scales and quants':62} {c_ns:6.2f} ns a block")
        print(f"  NumPy's floor, scales + aligned 16-byte quants (reachable for 1 block in 8 only): "
              f"{floor:.2f} ns a block, {c_ns / floor:.2f}x the C loop's speed at best")


def median_of_rounds(calls: list[Call], rounds: int, clock: Callable[[], float]) -> list[float]:
    """Seconds per call, the median of ``rounds`` rounds that each run every call once, in turn."""
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(rounds):
        for index, call in enumerate(calls):
            start = clock()
            call()
            times[index].append(clock() - start)
    return [float(np.median(t)) for t in times]


def same_floats(golden: np.ndarray, other: np.ndarray) -> bool:
    """Bit for bit, except that any NaN matches any NaN (gguf-py does not promise payloads)."""
    a, b = golden.reshape(-1), np.asarray(other, np.float32).reshape(-1)
    if a.shape != b.shape:
        return False
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32)))


def gguf_type(gguf: ModuleType | None, fmt: formats.Format) -> object | None:
    """gguf-py's type for ``fmt`` if gguf-py dequantizes it."""
    if gguf is None:
        return None
    gtype = getattr(gguf.GGMLQuantizationType, fmt.ggml_name.upper(), None)
    if gtype is None or gtype not in gguf.quants._type_traits:
        return None
    return gtype


RegistryRow = tuple[str, Call, Call | None, str]  # operation, golden's call, gguf-py's or None, note


def registry_rows(
    fmt: formats.Format, x: np.ndarray, raw: np.ndarray, n: int, gguf: ModuleType | None
) -> list[RegistryRow]:
    """The timed calls of one type: dequantize of ``raw``, and quantize of ``x`` on each rounding path."""
    gtype = gguf_type(gguf, fmt)
    gguf_dequant: Call | None = None
    note = ""
    if gguf is not None and gtype is not None:
        try:
            if not same_floats(fmt.dequantize(raw, n), gguf.quants.dequantize(raw, gtype)):
                note = "gguf-py output differs on random bytes"
        except Exception as error:  # noqa: BLE001 - gguf-py is only a yardstick here
            note = f"gguf-py fails: {type(error).__name__}"
        gguf_dequant = functools.partial(gguf.quants.dequantize, raw, gtype)
    rows: list[RegistryRow] = [("dequantize", functools.partial(fmt.dequantize, raw, n), gguf_dequant, note)]
    if fmt.quantize is None:
        return rows
    gguf_quant: Call | None = None
    note = ""
    if gguf is not None and gtype is not None:
        try:
            if not np.array_equal(gguf.quants.quantize(x, gtype).reshape(-1), fmt.quantize(x, "reference")):
                note = "gguf-py bytes differ"
            gguf_quant = functools.partial(gguf.quants.quantize, x, gtype)
        except NotImplementedError:
            note = "gguf-py has no quantizer"
    for rounding in formats.ROUNDINGS:
        rows.append((f"quantize ({rounding})", functools.partial(fmt.quantize, x, rounding), gguf_quant, note))
    return rows


def registry_table(
    n: int, rounds: int, clock: Callable[[], float], gguf: ModuleType | None, types: list[str] | None
) -> None:
    """Every registry type's dequantize and quantize against gguf-py's, in Mi elements a second."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n // ROW, ROW)).astype(np.float32)
    print(f"\nevery golden.formats type, {n / 2**20:g} Mi elements, median of {rounds} alternating rounds, "
          f"{'CPU' if clock is time.thread_time else 'wall'} clock")
    print(f"{'type':8} {'operation':21} {'golden Mi/s':>11} {'gguf-py Mi/s':>12} {'speed':>7}  note")
    for fmt in formats.FORMATS.values():
        if types and fmt.name not in types:
            continue
        raw = rng.integers(0, 256, n // fmt.block_size * fmt.type_size, dtype=np.uint8)
        for operation, golden_call, gguf_call, note in registry_rows(fmt, x, raw, n, gguf):
            calls = [golden_call] + ([gguf_call] if gguf_call is not None else [])
            seconds = median_of_rounds(calls, rounds, clock)
            rate = n / 2**20 / seconds[0]
            if gguf_call is None:
                other = f"{'—':>12} {'':>7}"
            else:
                other = f"{n / 2**20 / seconds[1]:12.1f} {seconds[1] / seconds[0]:6.2f}x"
            print(f"{fmt.name:8} {operation:21} {rate:11.1f} {other}  {note}".rstrip(), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--elements", type=int, nargs="+", default=[4096 * 1024, 32 * 2**20],
                        help=f"tensor sizes in floats, each a positive multiple of {ROW}")
    parser.add_argument("--repeat", type=int, default=7, help="rounds; each figure is the best one")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    parser.add_argument("--no-c", action="store_true", help="skip the compiled C loops")
    parser.add_argument("--registry", action="store_true",
                        help="one table over every golden.formats type against gguf-py, then stop")
    parser.add_argument("--types", nargs="+", choices=formats.TYPES, metavar="TYPE",
                        help="with --registry: only these types")
    parser.add_argument("--registry-elements", type=int, default=2**20,
                        help=f"tensor size in floats for --registry, a positive multiple of {ROW * 256 // 4}")
    args = parser.parse_args()
    if any(n <= 0 or n % ROW for n in args.elements):
        parser.error(f"--elements must be positive multiples of {ROW}, got {args.elements}")
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter

    if args.registry:
        if args.registry_elements <= 0 or args.registry_elements % (ROW * 256 // 4):
            parser.error(f"--registry-elements must be a positive multiple of {ROW * 256 // 4}, "
                         f"got {args.registry_elements}")
        gguf = load_gguf()
        if gguf is None:
            print("gguf-py not installed (pip install -e '.[bench]'): golden's figures only")
        with np.errstate(all="ignore"):  # gguf-py warns on the inf/NaN scales of random bytes; golden never does
            registry_table(args.registry_elements, args.repeat, clock, gguf, args.types)
        return
    gguf, ggml = load_gguf(), load_ggml()
    if gguf is None:
        print("gguf-py not installed (pip install -e '.[bench]'): no bar for quantize/dequantize")
    if ggml is None:
        print("ggml's CPU libraries not loadable: no ggml context line")
    with tempfile.TemporaryDirectory() as workdir:
        lib = None if args.no_c else compile_c_loops(Path(workdir))
        if lib is None and not args.no_c:
            print("gcc not found: no C loop bar for the transforms")
        print(f"best of {args.repeat} rounds, {args.clock} clock; speed = other's time / golden's time")
        for n in args.elements:
            run_size(n, args.repeat, clock, lib, gguf, ggml)
        q8_0_numpy_floor(lib, args.repeat, clock)


if __name__ == "__main__":
    main()

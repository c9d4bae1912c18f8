"""Keep freed memory in the process while the model tier judges: glibc's malloc otherwise gives each large
array its own mmap and returns it on free, so every weight-sized temporary of a node's golden and error
model (a 135M-class model's 49152×576 output matrix is 226 MB in float64) is faulted in page by page again.

Measured on the synthetic 135M-class llama (Q8_0, 8 decode steps, ggml:CPU, 2-core host at load 6-8):
judging and the golden's forward pass took 1.46M minor faults and 20.7 s of system time of 44 CPU-s;
with the heap kept, 0.26M faults, 3.6 s of system time, 27.6 CPU-s, peak RSS 1.51 -> 1.57 GiB.

Inside :func:`reused_heap` malloc takes every block from the heap (``M_MMAP_MAX`` 0) and keeps up to
``KEEP_BYTES`` free at its top (``M_TRIM_THRESHOLD``); on leaving, mmap is allowed again and the free top
goes back to the system (``malloc_trim``). A libc without ``mallopt`` (not glibc) leaves it as it is.

numpy also asks for transparent huge pages on every array of 4 MiB or more (madvise); with the kernel's
``defrag=madvise`` (this host's) each such fault may compact memory first. The block turns that off too:
135M-class run, system time 4.3-4.6 -> 2.2 s, CPU 27.7 -> 23.4 s; a 1B-class run spent 109 s of its 224 CPU-s
in the kernel with it on."""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Iterator
from contextlib import contextmanager

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # <malloc.h>
DEFAULT_MMAP_MAX = 65536  # glibc's default
DEFAULT_TRIM_THRESHOLD = 128 * 1024
KEEP_BYTES = 2**31 - 1  # mallopt takes an int

_depth = 0


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if not (hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim")):
        return None
    libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    return libc


def _set_madvise_hugepage(enabled: bool) -> bool | None:
    """numpy's switch (private, numpy >= 1.20); returns the previous setting, None where there is none."""
    try:
        from numpy._core import multiarray
    except ImportError:  # numpy 1.x
        from numpy.core import multiarray  # type: ignore[no-redef]
    switch = getattr(multiarray, "_set_madvise_hugepage", None)
    return bool(switch(enabled)) if switch is not None else None


@contextmanager
def reused_heap() -> Iterator[None]:
    """Large allocations reuse freed heap memory inside the block (nested blocks: the outermost restores)."""
    global _depth
    libc = _libc() if _depth == 0 else None
    if libc is not None:
        libc.mallopt(M_MMAP_MAX, 0)
        libc.mallopt(M_TRIM_THRESHOLD, KEEP_BYTES)
    hugepages = _set_madvise_hugepage(False) if _depth == 0 else None
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if hugepages is not None:
            _set_madvise_hugepage(hugepages)
        if libc is not None:
            libc.mallopt(M_MMAP_MAX, DEFAULT_MMAP_MAX)
            libc.mallopt(M_TRIM_THRESHOLD, DEFAULT_TRIM_THRESHOLD)
            libc.malloc_trim(0)

"""The IQ formats' lookup tables, read from the plain-text files in ``tables/``.

The files are written by scripts/gen_iq_tables.py from ggml's ggml-common.h (not copied by hand);
tests/test_formats_iq_grids_vs_ggml.py checks every entry against the bound library's ``to_float``.
A grid row is the bytes of one grid entry in the order ``to_float`` reads them: element ``j`` of the
group an index selects is ``grid[index, j]``.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

TABLES_DIR = Path(__file__).resolve().with_name("tables")

# file -> (dtype, columns): what scripts/gen_iq_tables.py writes
_LAYOUT: dict[str, tuple[type[np.integer], int]] = {
    "kmask_iq2xs": (np.uint8, 1),
    "ksigns_iq2xs": (np.uint8, 1),
    "iq2xxs_grid": (np.uint8, 8),
    "iq2xs_grid": (np.uint8, 8),
    "iq2s_grid": (np.uint8, 8),
    "iq3xxs_grid": (np.uint8, 4),
    "iq3s_grid": (np.uint8, 4),
    "iq1s_grid": (np.int8, 8),
    "kvalues_iq4nl": (np.int8, 1),
}


@functools.cache
def table(name: str) -> np.ndarray:
    """The table ``name`` of ggml-common.h: (entries, columns), read-only; 1-D for a one-column table."""
    dtype, columns = _LAYOUT[name]
    values = np.loadtxt(TABLES_DIR / f"{name}.txt", dtype=np.int64, comments="#", ndmin=2)
    if values.shape[1] != columns:
        raise RuntimeError(f"{TABLES_DIR / name}.txt has {values.shape[1]} columns, expected {columns}")
    out = values.astype(dtype)
    if not np.array_equal(out, values):
        raise RuntimeError(f"{TABLES_DIR / name}.txt holds values outside {np.dtype(dtype).name}")
    out = out[:, 0] if columns == 1 else out
    out.setflags(write=False)
    return out


@functools.cache
def float_grid(name: str) -> np.ndarray:
    """A grid's entries widened to float32 (what ``to_float`` multiplies), read-only."""
    out = table(name).astype(np.float32)
    out.setflags(write=False)
    return out


_SIGN_BIT = np.uint32(0x80000000)


def _sign_bit_masks(negated: np.ndarray) -> np.ndarray:
    out = np.where(negated, _SIGN_BIT, np.uint32(0)).astype(np.uint32)
    out.setflags(write=False)
    return out


@functools.cache
def sign_masks() -> np.ndarray:
    """(128, 8) uint32: the f32 sign bit where ``ksigns_iq2xs[s] & kmask_iq2xs[j]`` negates element ``j``.

    ``to_float``'s ``x * (negated ? -1.f : 1.f)`` is compiled to a flip of the sign bit (a NaN's
    too, which a multiplication by −1 on x86 would keep), so the golden XORs these masks in.
    """
    return _sign_bit_masks((table("ksigns_iq2xs")[:, None] & table("kmask_iq2xs")[None, :]) != 0)


@functools.cache
def byte_sign_masks() -> np.ndarray:
    """(256, 8) uint32: as :func:`sign_masks` for a whole stored sign byte ``b`` (IQ2_S, IQ3_S)."""
    return _sign_bit_masks((np.arange(256)[:, None] & table("kmask_iq2xs")[None, :]) != 0)


@functools.cache
def iq1s_delta() -> np.float32:
    """``IQ1S_DELTA``: the shift IQ1_S and IQ1_M (whose ``to_float`` uses it too) add to a grid value."""
    values = np.loadtxt(TABLES_DIR / "iq1_deltas.txt", dtype=np.float32, comments="#", ndmin=1)
    return np.float32(values[0])

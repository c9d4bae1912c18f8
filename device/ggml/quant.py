"""ggml's own quantizers and dequantizers, through the ggml libraries the devices load.

Used to check :mod:`golden.quant` bit for bit and to benchmark against it. Three entry points:

* :func:`ggml_quantize` with ``path="chunk"``: ``ggml_quantize_chunk`` in libggml-base, the reference
  quantizer (``quantize_row_q*_0_ref``); ``path="cpu"``: ``ggml_get_type_traits_cpu(t)->from_float``
  in the CPU backend, the SIMD quantizer it uses for CPY into a quantized tensor and for mul_mat's
  src1 conversion.
* :func:`ggml_dequantize`: ``ggml_get_type_traits(t)->to_float``.

The libraries are the ones :func:`device.ggml.lib.load` loads (``--ggml-lib``/``$GGML_LIB_DIR``, else
the wheel); the type ids and block sizes come from :mod:`golden.dtypes`.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from device.base import DeviceError
from device.ggml import lib as ggml_lib
from golden import dtypes

if TYPE_CHECKING:
    from ctypes import _NamedFuncPointer

QuantPath = Literal["chunk", "cpu"]

_FromFloat = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
_ToFloat = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


class _TypeTraits(ctypes.Structure):  # struct ggml_type_traits (ggml.h)
    _fields_ = [
        ("type_name", ctypes.c_char_p),
        ("blck_size", ctypes.c_int64),
        ("blck_size_interleave", ctypes.c_int64),
        ("type_size", ctypes.c_size_t),
        ("is_quantized", ctypes.c_bool),
        ("to_float", _ToFloat),
        ("from_float_ref", _FromFloat),
    ]


class _TypeTraitsCpu(ctypes.Structure):  # struct ggml_type_traits_cpu (ggml-cpu.h)
    _fields_ = [
        ("from_float", _FromFloat),
        ("vec_dot", ctypes.c_void_p),
        ("vec_dot_type", ctypes.c_int),
        ("nrows", ctypes.c_int64),
    ]


@dataclass(frozen=True)
class QuantFunctions:
    """The bound entry points (own function objects: the shared CDLL attributes keep lib.py's types)."""

    lib: ggml_lib.GgmlLib
    quantize_chunk: _NamedFuncPointer
    type_traits: _NamedFuncPointer
    type_traits_cpu: _NamedFuncPointer


def ggml_include_dir() -> Path:
    """The headers next to the loaded libraries (the wheel's ``include``, beside ``lib64``)."""
    return Path(ggml_lib.load().lib_dir).parent / "include"


def _cpu_backend_libraries(lib: ggml_lib.GgmlLib) -> list[ctypes.CDLL]:
    """Where ``ggml_get_type_traits_cpu`` may live: libggml (CPU linked in, as in the wheel) or the
    CPU backend library ggml loaded dynamically (``libggml-cpu*.so``, found in this process' maps)."""
    found = [lib.registry]
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        maps = ""
    paths = {line.split(maxsplit=5)[5] for line in maps.splitlines() if len(line.split(maxsplit=5)) == 6}
    for path in sorted(p for p in paths if Path(p).name.startswith("libggml-cpu")):
        found.append(ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL))  # already mapped: the same handle
    return found


@functools.cache
def functions() -> QuantFunctions:
    lib = ggml_lib.load()
    quantize_chunk = lib.base["ggml_quantize_chunk"]  # [] makes a new function object to type here
    quantize_chunk.restype = ctypes.c_size_t
    quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                               ctypes.c_int64, ctypes.c_void_p]
    type_traits = lib.base["ggml_get_type_traits"]
    type_traits.restype = ctypes.POINTER(_TypeTraits)
    type_traits.argtypes = [ctypes.c_int]
    for candidate in _cpu_backend_libraries(lib):
        try:
            type_traits_cpu = candidate["ggml_get_type_traits_cpu"]
            cpu_init = candidate["ggml_cpu_init"]
        except AttributeError:
            continue
        break
    else:
        raise DeviceError(f"{lib.lib_dir}: no CPU backend with ggml_get_type_traits_cpu is loaded")
    type_traits_cpu.restype = ctypes.POINTER(_TypeTraitsCpu)
    type_traits_cpu.argtypes = [ctypes.c_int]
    cpu_init.restype, cpu_init.argtypes = None, []
    cpu_init()  # fills the CPU backend's f16 tables (idempotent)
    return QuantFunctions(lib, quantize_chunk, type_traits, type_traits_cpu)


def _type_id(qtype: str) -> int:
    if not dtypes.is_quantized(qtype):
        raise ValueError(f"unknown quantized type {qtype!r}")
    return dtypes.GGML_TYPE_ID[qtype]


# ggml_quantize_chunk refuses these without an importance matrix (ggml_quantize_requires_imatrix)
NEEDS_IMATRIX = frozenset({"iq2_xxs", "iq2_xs", "iq1_s", "iq1_m"})


def ggml_quantize(x: np.ndarray, qtype: str, path: QuantPath = "chunk") -> np.ndarray:
    """Quantize float rows (last dim a multiple of the block) with ggml itself: flat raw uint8 blocks.
    The types that need an importance matrix get a flat one (every column weighs the same)."""
    fns = functions()
    qk = dtypes.block_size(qtype) if dtypes.is_quantized(qtype) else 0
    type_id = _type_id(qtype)
    values = np.ascontiguousarray(x, dtype=np.float32)
    if values.ndim == 0 or values.shape[-1] % qk:
        raise ValueError(f"last dimension must be a multiple of {qk}, got {values.shape}")
    n_per_row = values.shape[-1] if values.ndim > 1 else values.size
    nrows = values.size // n_per_row if n_per_row else 0
    out = np.zeros(values.size // qk * dtypes.type_size(qtype), np.uint8)
    if values.size == 0:
        return out
    if path == "chunk":
        imatrix = np.ones(n_per_row, np.float32) if qtype in NEEDS_IMATRIX else None
        written = fns.quantize_chunk(type_id, values.ctypes.data, out.ctypes.data, 0, nrows, n_per_row,
                                     None if imatrix is None else imatrix.ctypes.data)
        if written != out.size:
            raise RuntimeError(f"ggml_quantize_chunk wrote {written} bytes, expected {out.size}")
    elif path == "cpu":
        from_float = fns.type_traits_cpu(type_id).contents.from_float
        from_float(values.ctypes.data, out.ctypes.data, values.size)
    else:
        raise ValueError(f"path must be 'chunk' or 'cpu', got {path!r}")
    return out


def ggml_dequantize(raw: np.ndarray, qtype: str, n: int) -> np.ndarray:
    """ggml's ``to_float`` of the first ``n`` elements of raw blocks: flat float32."""
    fns = functions()
    type_id = _type_id(qtype)
    qk = dtypes.block_size(qtype)
    if n % qk:
        raise ValueError(f"n must be a multiple of {qk}, got {n}")
    data = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    if data.size < n // qk * dtypes.type_size(qtype):
        raise ValueError("raw holds fewer than n elements")
    out = np.empty(n, np.float32)
    if n:
        fns.type_traits(type_id).contents.to_float(data.ctypes.data, out.ctypes.data, n)
    return out


def has_type(ggml_name: str) -> bool:
    """Whether the bound release has the quant type ``ggml_name`` (ggml's ``type_name``: q4_K, nvfp4 …).

    Told by the ``dequantize_row_<name>`` libggml-base exports for every type with a ``to_float``: a
    type newer than the release (NVFP4, Q1_0 and Q2_0 are absent from b8121, Q1_0 and Q2_0 from
    b8390) has none, and its id must not reach ``ggml_get_type_traits``, which reads past its table
    without a check. Types without a ``to_float`` (q8_1, q8_K) are in every release this binds.
    """
    if ggml_name in ("q8_1", "q8_K"):
        return True
    return hasattr(functions().lib.base, f"dequantize_row_{ggml_name}")

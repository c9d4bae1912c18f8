"""ctypes access to ggml's own quantizers and dequantizers (the CPU libraries of the wheel).

Used to check :mod:`golden.quant` bit for bit and to benchmark against it. Three entry points:

* :func:`ggml_quantize` with ``path="chunk"``: ``ggml_quantize_chunk`` in libggml-base, the reference
  quantizer (``quantize_row_q*_0_ref``); ``path="cpu"``: ``ggml_get_type_traits_cpu(t)->from_float``
  in libggml-cpu, the SIMD quantizer the CPU backend uses for CPY into a quantized tensor and for
  mul_mat's src1 conversion.
* :func:`ggml_dequantize`: ``ggml_get_type_traits(t)->to_float``.

The libraries are loaded from ``$GGML_LIB_DIR`` when set, else from the ``libggml`` wheel's lib64.
"""

from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path
from typing import Literal

import numpy as np

from golden.quant import BLOCK_BYTES, QK

# enum ggml_type values from ggml.h (checked against the wheel's header by the tests)
GGML_TYPE: dict[str, int] = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 8}

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


def ggml_lib_dir() -> Path:
    """Where the ggml shared libraries are: ``$GGML_LIB_DIR`` or the libggml wheel's lib64."""
    override = os.environ.get("GGML_LIB_DIR")
    if override:
        return Path(override)
    import libggml  # the wheel; imported lazily so golden users never need it

    return Path(libggml.__file__).parent / "lib64"


def ggml_include_dir() -> Path:
    """The wheel's headers (for checking enum values); next to lib64."""
    return ggml_lib_dir().parent / "include"


@functools.cache
def _libs() -> tuple[ctypes.CDLL, ctypes.CDLL]:
    lib_dir = ggml_lib_dir()
    # RTLD_GLOBAL so libggml-cpu resolves its base symbols from the copy we loaded.
    base = ctypes.CDLL(str(lib_dir / "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
    cpu = ctypes.CDLL(str(lib_dir / "libggml-cpu.so"), mode=ctypes.RTLD_GLOBAL)
    base.ggml_quantize_chunk.restype = ctypes.c_size_t
    base.ggml_quantize_chunk.argtypes = [
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_void_p,
    ]
    base.ggml_get_type_traits.restype = ctypes.POINTER(_TypeTraits)
    base.ggml_get_type_traits.argtypes = [ctypes.c_int]
    cpu.ggml_get_type_traits_cpu.restype = ctypes.POINTER(_TypeTraitsCpu)
    cpu.ggml_get_type_traits_cpu.argtypes = [ctypes.c_int]
    cpu.ggml_cpu_init.restype = None
    cpu.ggml_cpu_init()  # fills the CPU backend's f16 tables
    return base, cpu


def _type_id(qtype: str) -> int:
    if qtype not in BLOCK_BYTES:
        raise ValueError(f"unknown quantized type {qtype!r}")
    return GGML_TYPE[qtype]


def ggml_quantize(x: np.ndarray, qtype: str, path: QuantPath = "chunk") -> np.ndarray:
    """Quantize float rows (last dim a multiple of 32) with ggml itself: flat raw uint8 blocks."""
    base, cpu = _libs()
    values = np.ascontiguousarray(x, dtype=np.float32)
    if values.ndim == 0 or values.shape[-1] % QK:
        raise ValueError(f"last dimension must be a multiple of {QK}, got {values.shape}")
    n_per_row = values.shape[-1] if values.ndim > 1 else values.size
    nrows = values.size // n_per_row if n_per_row else 0
    out = np.zeros(values.size // QK * BLOCK_BYTES[qtype], np.uint8)
    if values.size == 0:
        return out
    type_id = _type_id(qtype)
    if path == "chunk":
        written = base.ggml_quantize_chunk(
            type_id, values.ctypes.data, out.ctypes.data, 0, nrows, n_per_row, None
        )
        if written != out.size:
            raise RuntimeError(f"ggml_quantize_chunk wrote {written} bytes, expected {out.size}")
    elif path == "cpu":
        from_float = cpu.ggml_get_type_traits_cpu(type_id).contents.from_float
        from_float(values.ctypes.data, out.ctypes.data, values.size)
    else:
        raise ValueError(f"path must be 'chunk' or 'cpu', got {path!r}")
    return out


def ggml_dequantize(raw: np.ndarray, qtype: str, n: int) -> np.ndarray:
    """ggml's ``to_float`` of the first ``n`` elements of raw blocks: flat float32."""
    base, _ = _libs()
    if n % QK:
        raise ValueError(f"n must be a multiple of {QK}, got {n}")
    data = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    if data.size < n // QK * BLOCK_BYTES[qtype]:
        raise ValueError("raw holds fewer than n elements")
    out = np.empty(n, np.float32)
    if n:
        base.ggml_get_type_traits(_type_id(qtype)).contents.to_float(data.ctypes.data, out.ctypes.data, n)
    return out

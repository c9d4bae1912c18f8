"""Every quantized ggml block format the golden reads: a registry by the harness's type name.

Each module of this package lists its formats in a ``FORMATS`` tuple of :class:`Format`; the
registry gathers the modules named below. Per type it knows the block size, the bytes per block,
``dequantize(raw, n) -> float32[n]`` (bit for bit ggml's ``to_float`` on any bytes) and, for the
types ggml quantizes at run time, ``quantize(x, rounding)`` (bit for bit ggml's quantizer of that
path). Q4_0 and Q8_0 are :mod:`golden.quant`'s, reached through here as well.
"""

from __future__ import annotations

import importlib

import numpy as np

from golden.formats.format import ROUNDINGS, Format, Rounding

_MODULES: tuple[str, ...] = ("legacy", "kquants", "iquants", "ternary", "mxfp4", "lowbit")


def _gather() -> dict[str, Format]:
    formats: dict[str, Format] = {}
    for module in _MODULES:
        for fmt in importlib.import_module(f"{__name__}.{module}").FORMATS:
            if fmt.name in formats:
                raise RuntimeError(f"quant format {fmt.name} is defined twice (second time in {module})")
            formats[fmt.name] = fmt
    return formats


FORMATS: dict[str, Format] = _gather()
TYPES: tuple[str, ...] = tuple(FORMATS)
QUANTIZABLE: tuple[str, ...] = tuple(name for name, fmt in FORMATS.items() if fmt.quantize is not None)


def get(qtype: str) -> Format:
    try:
        return FORMATS[qtype]
    except KeyError:
        raise ValueError(f"unknown quantized type {qtype!r}; expected one of {', '.join(TYPES)}") from None


def dequantize(raw: np.ndarray, qtype: str, n: int) -> np.ndarray:
    """``to_float`` of the first ``n`` elements of raw ``qtype`` blocks: flat float32."""
    return get(qtype).dequantize(raw, n)


def quantize(x: np.ndarray, qtype: str, rounding: Rounding = "reference") -> np.ndarray:
    """Float rows (last dim a multiple of the block) to flat raw ``qtype`` blocks on ggml's ``rounding`` path."""
    fmt = get(qtype)
    if fmt.quantize is None:
        raise ValueError(f"{qtype} has no run-time quantizer in ggml; quantizable: {', '.join(QUANTIZABLE)}")
    return fmt.quantize(x, rounding)


__all__ = ["FORMATS", "QUANTIZABLE", "ROUNDINGS", "TYPES", "Format", "Rounding", "dequantize", "get", "quantize"]

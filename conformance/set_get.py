"""A set/get round trip as a case with an id: ``SET_GET(type=q4_0,ne=[64,4,1,1],writes=[[0,72],[72,72]],
reads=[[36,72]],data=bytes:7)``.

The tensor's bytes are uploaded through the backend's ``set_tensor`` in the ``writes`` chunks
(offset, size), read back whole and in the ``reads`` chunks; every byte must come back. The bytes
are drawn from ``data=bytes:SEED`` (:meth:`SetGetCase.raw_bytes`), so the id alone reproduces the
case: ``conform repro 'SET_GET(...)'`` and a crash history replay run it like any op case.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from golden import dtypes, quant
from golden.case import TensorSpec, parse_case_id

OP = "SET_GET"
DISTRIBUTION = "bytes"
VALUE_RANGE = 4.0  # the float values quantized or stored: uniform in [-4, 4]

Chunk = tuple[int, int]  # (offset, size) in bytes


def is_set_get_id(case_id: str) -> bool:
    return case_id.strip().startswith(f"{OP}(")


@dataclass(frozen=True)
class SetGetCase:
    tensor: TensorSpec  # contiguous; its name reaches name-matched paths (CANN's NZ weights)
    writes: tuple[Chunk, ...]
    reads: tuple[Chunk, ...]
    data_seed: int = 0

    @property
    def op(self) -> str:
        return OP

    @property
    def nbytes(self) -> int:
        ne0, ne1, ne2, ne3 = self.tensor.ne
        return dtypes.row_size(self.tensor.dtype, ne0) * ne1 * ne2 * ne3

    @property
    def case_id(self) -> str:
        t = self.tensor
        name = f",name={t.name}" if t.name else ""
        chunks = {key: "[" + ",".join(f"[{o},{s}]" for o, s in value) + "]"
                  for key, value in (("writes", self.writes), ("reads", self.reads))}
        return (f"{OP}(type={t.dtype},ne=[{','.join(map(str, t.ne))}]{name},writes={chunks['writes']},"
                f"reads={chunks['reads']},data={DISTRIBUTION}:{self.data_seed})")

    def raw_bytes(self) -> np.ndarray:
        """The tensor's bytes for ``data_seed``: uniform float rows, quantized or stored as the dtype."""
        ne0, ne1, ne2, ne3 = self.tensor.ne
        rng = np.random.default_rng(self.data_seed)
        values = rng.uniform(-VALUE_RANGE, VALUE_RANGE, size=(ne3 * ne2 * ne1, ne0)).astype(np.float32)
        if dtypes.is_quantized(self.tensor.dtype):
            return quant.quantize(values, self.tensor.dtype)
        return np.ascontiguousarray(dtypes.to_storage(values, self.tensor.dtype)).view(np.uint8).reshape(-1)

    def check(self) -> None:
        """ValueError naming what is wrong, for a case that cannot be run as given."""
        t = self.tensor
        if t.dtype not in dtypes.ALL_TYPES:
            raise ValueError(f"unknown dtype {t.dtype!r} (known: {', '.join(dtypes.ALL_TYPES)})")
        if len(t.ne) != 4 or any(n < 1 for n in t.ne):
            raise ValueError(f"shape ne={list(t.ne)} is not 4 positive sizes")
        if t.ne[0] % dtypes.block_size(t.dtype):
            raise ValueError(f"{t.dtype} rows need a multiple of {dtypes.block_size(t.dtype)} elements")
        if not t.layout.is_contiguous:
            raise ValueError("a set/get tensor is contiguous")
        for key, chunks in (("writes", self.writes), ("reads", self.reads)):
            if not chunks:
                raise ValueError(f"no {key}")
            for offset, size in chunks:
                if offset < 0 or size < 1 or offset + size > self.nbytes:
                    raise ValueError(f"{key} chunk [{offset},{size}] is outside the tensor's {self.nbytes} bytes")

    @classmethod
    def parse(cls, case_id: str) -> SetGetCase:
        """The inverse of :attr:`case_id`; ValueError (or KeyError for a missing tensor field) otherwise."""
        parsed = parse_case_id(case_id)
        if parsed.op != OP:
            raise ValueError(f"not a {OP} case id: {case_id!r}")
        if len(parsed.inputs) != 1:
            raise ValueError(f"{OP} takes one tensor (type=...,ne=[...])")
        if parsed.distribution != DISTRIBUTION:
            raise ValueError(f"{OP} data is data={DISTRIBUTION}:SEED, not {parsed.distribution!r}")
        params = dict(parsed.params)
        unknown = sorted(set(params) - {"writes", "reads"})
        if unknown:
            raise ValueError(f"{OP} has no parameter {unknown[0]!r} (it takes writes and reads)")
        chunks = {}
        for key in ("writes", "reads"):
            value = params.get(key, ())
            if not isinstance(value, tuple) or not all(
                    isinstance(c, tuple) and len(c) == 2 and all(isinstance(v, int) for v in c) for c in value):
                raise ValueError(f"{key} must be a list of [offset,size] pairs")
            chunks[key] = tuple((int(c[0]), int(c[1])) for c in value)
        case = cls(parsed.inputs[0], chunks["writes"], chunks["reads"], parsed.data_seed)
        case.check()
        return case

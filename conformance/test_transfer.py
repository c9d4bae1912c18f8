"""Device round trips through the backend's set_tensor/get_tensor: whole tensors, and chunked writes
and reads at non-zero offsets and partial sizes, for F32, F16, Q4_0 and Q8_0.

On CANN, quantized tensors pass through the device layout transform both ways; ggml-cann has shipped
bugs exactly here (chunked uploads transformed per chunk, B18; reads at an offset decoded as if the
whole tensor were read, L1)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.strategies import weight_names
from golden import dtypes, quant
from golden.case import TensorSpec


@st.composite
def chunks(draw: st.DrawFn, nbytes: int) -> list[tuple[int, int]]:
    """A split of [0, nbytes) into consecutive chunks (one chunk = the whole tensor)."""
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, nbytes - 1)), max_size=4))) - {nbytes})
    edges = [0, *cuts, nbytes]
    chunks = [(a, b - a) for a, b in zip(edges, edges[1:], strict=False) if b > a]
    return draw(st.permutations(chunks)) if len(chunks) > 1 else chunks


@st.composite
def reads(draw: st.DrawFn, nbytes: int) -> list[tuple[int, int]]:
    out = []
    for _ in range(draw(st.integers(1, 4))):
        offset = draw(st.integers(0, nbytes - 1))
        out.append((offset, draw(st.integers(1, nbytes - offset))))
    return out


@pytest.mark.parametrize("dtype", ["f32", "f16", "q4_0", "q8_0"])
@given(data=st.data())
def test_set_get_round_trip(conform, dtype: str, data: st.DataObject) -> None:
    ne0 = data.draw(st.sampled_from([32, 64, 96, 512, 544, 1024]) if dtypes.is_quantized(dtype)
                    else st.integers(1, 1100), label="ne0")
    ne = (ne0, data.draw(st.integers(1, 6), label="ne1"), data.draw(st.integers(1, 3), label="ne2"), 1)
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    rng = np.random.default_rng(seed)
    values = rng.uniform(-4, 4, size=(ne[3] * ne[2] * ne[1], ne0)).astype(np.float32)
    if dtypes.is_quantized(dtype):
        raw = quant.quantize(values, dtype)
    else:
        raw = dtypes.to_storage(values, dtype).view(np.uint8).reshape(-1)
    nbytes = raw.size
    spec = TensorSpec(dtype, ne, name=data.draw(weight_names, label="name"))  # named weights: CANN's NZ path
    writes = data.draw(chunks(nbytes), label="writes")
    conform.check_transfer(spec, raw, writes, data.draw(reads(nbytes), label="reads"), data_seed=seed)

"""SET_ROWS: the case strategies (plain and quantized destinations), the index maker and the verdict.

The destination is drawn as llama.cpp's caches are: a slice of a larger allocation (spare cells
after the rows in use, an offset for the layer), rows of one element (the transposed V cache is
written element by element), and row-keeping permutes and padded views. Indices are a run of
consecutive cells (a ring buffer), scattered distinct cells, or cells with repeats.

Repeated indices are undefined in ggml (ggml.h): the verdict accepts, element by element, the value
of any source row that targets the destination row. Quantized destinations are judged in
dequantized space: every written element within one quant step of the exact source value (the
convention of every Q destination here), every other row exactly as it was.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from conformance.cases.registry import register
from conformance.data import floats, plain_input
from conformance.strategies import finish, input_layouts, one_in, row_size, spec
from conformance.verdict import Metrics, compare
from conformance.verdict.quant import block_elements_ok, quant_step
from golden import catalogue, dtypes, formats, quant
from golden.case import Layout, OpCase
from golden.kvcache import index_planes, writers
from golden.spec import GRID_BLOCKS, InputLayouts, Signature
from golden.tolerance import Tolerance

MAX_ELEMENTS = 1 << 15
MANY_ROWS = GRID_BLOCKS + 1  # more source rows than a grid dimension has blocks
QUANT_ROW_SIZES = (32, 64, 96, 128, 256, 512, 1024)
FINITE = st.sampled_from(["uniform", "dense", "wide"])  # one NaN poisons a whole Q block's scale


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def _cache_layout(draw: st.DrawFn, quantized: bool) -> Layout:
    """A slice of a larger cache: spare rows (cells) after those in use and an offset; quantized
    caches keep whole blocks (no permute, padding and offset in blocks)."""
    if quantized:
        return draw(st.sampled_from([Layout(), Layout(pad=(0, 3, 0, 0)), Layout(pad=(32, 1, 0, 0), offset=64),
                                     Layout(pad=(0, 17, 1, 0), offset=32)]))
    kind = draw(st.sampled_from(["contiguous", "cache", "cache", "any"]))
    if kind == "contiguous":
        return Layout()
    if kind == "cache":
        return Layout(pad=(0, draw(st.sampled_from([1, 7, 64])), 0, 0), offset=draw(st.sampled_from([0, 5, 256])))
    return draw(input_layouts(InputLayouts.ROWS))


@st.composite
def _shape(draw: st.DrawFn, quantized: bool) -> tuple[int, int, int, int]:
    if quantized:
        ne0 = draw(st.sampled_from(QUANT_ROW_SIZES))
    else:
        ne0 = draw(st.one_of(st.just(1), row_size(max_ne0=2048)))
    ne2, ne3 = draw(st.sampled_from([1, 1, 2, 3, 4])), draw(st.sampled_from([1, 1, 2]))
    ne1 = draw(st.integers(1, max(1, min(96, MAX_ELEMENTS // (ne0 * ne2 * ne3)))))
    return (ne0, ne1, ne2, ne3)


@st.composite
def set_rows_case(draw: st.DrawFn, op: str, sig: Signature, quantized: bool = False) -> OpCase:
    dst_type, src_type, idx_type = sig.srcs
    ne0, ne1, ne2, ne3 = draw(_shape(quantized))
    room = max(1, MAX_ELEMENTS // (ne0 * ne2 * ne3))
    n_rows = draw(st.integers(1, max(1, min(ne1 + 3, 48, room))))  # more rows than cells: repeats
    ne11 = draw(st.sampled_from(_divisors(ne2)))
    ne12 = draw(st.sampled_from(_divisors(ne3)))
    # the grid regimes: 65,537 one- or two-element rows, in one case of 8 (each takes a third of a second on
    # ggml:CPU; a dozen signatures draw it, so the op reaches it on every seed)
    if one_in(draw, 8) and not quantized:
        ne0, ne2, ne3, ne11, ne12 = min(ne0, 2), 1, 1, 1, 1
        n_rows = MANY_ROWS
        ne1 = MANY_ROWS + ne1 % 4  # spare cells after the rows written
    inputs = (
        spec(dst_type, (ne0, ne1, ne2, ne3), draw(_cache_layout(quantized))),
        spec(src_type, (ne0, n_rows, ne2, ne3), draw(input_layouts(InputLayouts.ROWS))),
        spec(idx_type, (n_rows, ne11, ne12, 1), draw(input_layouts(InputLayouts.ANY))),
    )
    case = OpCase(op, inputs, dst=sig.dst)
    return finish(draw, case, distribution=FINITE if quantized else None)


def set_rows_quantized(op: str, sig: Signature) -> st.SearchStrategy[OpCase]:
    return set_rows_case(op, sig, quantized=True)


def set_rows_inputs(case: OpCase, rng: np.random.Generator) -> list[np.ndarray]:
    """The cache as usual; the source as usual; indices: a run of consecutive cells (a ring buffer
    that wraps), distinct cells anywhere, or cells drawn with repeats."""
    dst_spec, src_spec, idx_spec = case.inputs
    op = catalogue.get(case.op)
    cache = plain_input(rng, dst_spec, case)
    src = floats(rng, src_spec, case.distribution, op.specials)
    ne1 = dst_spec.ne[1]
    shape = idx_spec.np_shape
    n_rows = shape[-1]
    kind = rng.integers(0, 3) if n_rows <= ne1 else 2
    if kind == 0:
        start = rng.integers(0, ne1, size=shape[:-1] + (1,))
        idx = (start + np.arange(n_rows)) % ne1
    elif kind == 1:
        idx = np.stack([rng.permutation(ne1)[:n_rows] for _ in range(int(np.prod(shape[:-1])))]).reshape(shape)
    else:
        idx = rng.integers(0, ne1, size=shape)
        if n_rows >= 2:
            idx[..., -1] = idx[..., 0]  # at least one repeat per plane
    return [cache, src, idx.astype(np.int64 if idx_spec.dtype == "i64" else np.int32)]


# ---- verdict -----------------------------------------------------------------------------------------
def _candidates(case: OpCase, inputs: list[np.ndarray]) -> dict[tuple[int, int, int], np.ndarray]:
    """Destination rows written more than once: the values each writer would leave, (k, ne0)."""
    dst, src, idx = case.inputs[0], np.asarray(inputs[1], np.float64), inputs[2]
    ne2, ne3 = dst.ne[2], dst.ne[3]
    found = {}
    for (i3, i2, i1), rows in writers(idx, ne2, ne3).items():
        values = src[i3, i2, rows, :]
        found[(i3, i2, i1)] = values if dtypes.is_quantized(dst.dtype) else dtypes.round_to(values, dst.dtype)
    return found


def judge_set_rows(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray, device: np.ndarray,
                   tol: Tolerance) -> Metrics:
    if dtypes.is_quantized(case.dst):
        return _judge_quantized(case, inputs, golden, device)
    g = np.array(golden, dtype=np.float64, copy=True)
    d = np.asarray(device, dtype=np.float64).reshape(g.shape)
    for (i3, i2, i1), values in _candidates(case, inputs).items():
        got = d[i3, i2, i1]
        same = (values == got) | (np.isnan(values) & np.isnan(got))
        g[i3, i2, i1] = np.where(same.any(axis=0), got, g[i3, i2, i1])
    return compare(case, inputs, g, d, tol)


def _judge_quantized(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray, device: np.ndarray) -> Metrics:
    qtype = case.dst
    dst = case.inputs[0]
    ne0, ne1, ne2, ne3 = dst.ne
    m = Metrics(n=int(np.asarray(golden).size))
    raw = np.asarray(device, dtype=np.uint8).reshape(-1)
    expected_bytes = dtypes.row_size(qtype, ne0) * ne1 * ne2 * ne3
    if raw.size != expected_bytes:
        m.passed, m.error_ratio = False, float("inf")
        m.detail = f"device returned {raw.size} bytes for a {qtype} destination of {expected_bytes}"
        return m
    if qtype not in dtypes.DRAWN_QUANT_TYPES:
        return _judge_quantized_blocks(case, inputs, golden, raw, m)
    got = quant.dequantize(raw, qtype, m.n).astype(np.float64).reshape(golden.shape)
    before = np.asarray(inputs[0], np.float64)
    written = np.zeros(golden.shape[:3], dtype=bool)
    rows = index_planes(inputs[2], ne2, ne3)
    i3, i2 = np.meshgrid(np.arange(ne3), np.arange(ne2), indexing="ij")
    for i in range(rows.shape[-1]):
        written[i3, i2, rows[:, :, i]] = True
    # rows nobody writes must come back exactly; written rows within one quant step of a writer
    kept_ok = (got == before) | (np.isnan(got) & np.isnan(before))
    ratio = np.where(kept_ok, 0.0, np.inf)
    exact = np.asarray(golden, np.float64)
    step = quant_step(exact.reshape(-1), qtype).reshape(golden.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        near = np.abs(got - exact) / step
    near = np.where(np.isnan(near), np.inf, near)
    for (j3, j2, j1), values in _candidates(case, inputs).items():
        for value in values:
            other = quant_step(value, qtype)
            with np.errstate(divide="ignore", invalid="ignore"):
                r = np.abs(got[j3, j2, j1] - value) / other
            near[j3, j2, j1] = np.minimum(near[j3, j2, j1], np.where(np.isnan(r), np.inf, r))
    ratio = np.where(written[..., None], near, ratio)
    worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    m.error_ratio = float(ratio[worst])
    m.n_bad = int((ratio > 1).sum())
    m.worst_index = [int(i) for i in reversed(worst)]
    m.worst_device, m.worst_golden = float(got[worst]), float(exact[worst])
    err = np.where(np.isfinite(got - exact), np.abs(got - exact), 0.0)
    m.max_abs = float(err.max()) if err.size else 0.0
    denom = float(np.sum(exact * exact))
    m.nmse = float(np.sum(err * err)) / denom if denom > 0 else float(np.sum(err * err))
    reference = quant.quantize(exact[written].astype(np.float32).reshape(-1, 32), qtype, rounding="x86")
    device_rows = raw.reshape(ne3, ne2, ne1, -1)[written].reshape(-1)
    m.n_quants_differ = int((_quants(reference, qtype) != _quants(device_rows, qtype)).sum())
    m.passed = m.n_bad == 0
    if not m.passed:
        where = "[" + ",".join(map(str, m.worst_index)) + "]"
        kind = "a written row is" if written[worst[:3]] else "a row no index names was changed:"
        m.detail = (f"out{where} dequantizes to {m.worst_device!r}, but should be {m.worst_golden!r}: {kind} "
                    f"{m.error_ratio:.3g} quant steps off ({m.n_bad}/{m.n} elements; {m.n_quants_differ} quants "
                    "differ from ggml's quantizer)")
    return m


def _written(case: OpCase, idx: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    ne2, ne3 = case.inputs[0].ne[2], case.inputs[0].ne[3]
    written = np.zeros(shape[:3], dtype=bool)
    rows = index_planes(idx, ne2, ne3)
    i3, i2 = np.meshgrid(np.arange(ne3), np.arange(ne2), indexing="ij")
    for i in range(rows.shape[-1]):
        written[i3, i2, rows[:, :, i]] = True
    return written


def _judge_quantized_blocks(case: OpCase, inputs: list[np.ndarray], golden: np.ndarray, raw: np.ndarray,
                            m: Metrics) -> Metrics:
    """The formats beyond Q4_0/Q8_0: each written row's blocks pass the exact-block verdict of a quantizing
    CPY against the source row of one of its writers; rows nobody writes come back unchanged (dequantized)."""
    qtype = case.dst
    exact = np.asarray(golden, np.float64)
    got = formats.dequantize(raw, qtype, m.n).astype(np.float64).reshape(exact.shape)
    row_bytes = raw.reshape(exact.shape[:3] + (-1,))
    before = np.asarray(inputs[0], np.float64).reshape(exact.shape)
    written = _written(case, inputs[2], exact.shape)
    ok = (got == before) | (np.isnan(got) & np.isnan(before))
    ok[written] = block_elements_ok(exact[written].reshape(-1), row_bytes[written].reshape(-1),
                                    qtype).reshape(-1, exact.shape[-1])
    for (j3, j2, j1), values in _candidates(case, inputs).items():
        for value in values:
            ok[j3, j2, j1] |= block_elements_ok(value, row_bytes[j3, j2, j1], qtype)
    err = np.where(np.isfinite(got - exact), np.abs(got - exact), 0.0)
    m.max_abs = float(err.max()) if err.size else 0.0
    denom = float(np.sum(exact * exact))
    m.nmse = float(np.sum(err * err)) / denom if denom > 0 else float(np.sum(err * err))
    reference = formats.quantize(exact[written].astype(np.float32).reshape(-1, 32), qtype, rounding="x86")
    m.n_quants_differ = int((formats.dequantize(reference, qtype, int(written.sum()) * exact.shape[-1])
                             != got[written].reshape(-1)).sum())
    m.n_bad = int((~ok).sum())
    m.passed = m.n_bad == 0
    m.error_ratio = float("inf") if m.n_bad else 0.0
    worst = np.unravel_index(int(np.argmax(~ok)) if m.n_bad else int(np.argmax(err)), exact.shape)
    m.worst_index = [int(i) for i in reversed(worst)]
    m.worst_device, m.worst_golden = float(got[worst]), float(exact[worst])
    if not m.passed:
        where = "[" + ",".join(map(str, m.worst_index)) + "]"
        kind = ("a written row's block fails the exact-block verdict (scale, min or a quant off)"
                if written[worst[:3]] else "a row no index names was changed")
        m.detail = (f"out{where} dequantizes to {m.worst_device!r} (source {m.worst_golden!r}): {kind}; "
                    f"{m.n_bad}/{m.n} elements bad, {m.n_quants_differ} values differ from ggml's quantizer")
    return m


def _quants(raw: np.ndarray, qtype: str) -> np.ndarray:
    size = dtypes.type_size(qtype)
    blocks = np.asarray(raw, dtype=np.uint8).reshape(-1, size)[:, 2:]
    if qtype == "q8_0":
        return blocks.view(np.int8).reshape(-1).astype(np.int16)
    return np.concatenate([blocks & 0x0F, blocks >> 4], axis=1).reshape(-1).astype(np.int16)


register("SET_ROWS", group="set_rows", draw=set_rows_case, quantized=set_rows_quantized,
         make_inputs=set_rows_inputs, judge=judge_set_rows)

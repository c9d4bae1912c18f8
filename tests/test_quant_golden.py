"""Properties of golden.quant on its own: the CANN layout transforms, quantizer round trips, error
bounds and the seed's allocation size. ggml itself is not needed here (see test_quant_vs_ggml.py).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from golden import quant
from golden.quant import (
    BLOCK_BYTES,
    MATRIX_ROW_PADDING,
    QK,
    QTYPES,
    cann_alloc_size,
    dequantize,
    from_cann,
    quantize,
    row_size,
    to_cann,
)

qtypes = st.sampled_from(QTYPES)


@st.composite
def raw_blocks(draw: st.DrawFn, qtype: str | None = None) -> tuple[str, np.ndarray]:
    """Any bytes, any block count (0 included): transforms must not care what the bytes mean."""
    qt = qtype or draw(qtypes)
    nblocks = draw(st.integers(0, 40))
    data = draw(st.binary(min_size=nblocks * BLOCK_BYTES[qt], max_size=nblocks * BLOCK_BYTES[qt]))
    return qt, np.frombuffer(data, np.uint8).copy()


def _seed_layout_per_element(raw: np.ndarray, qtype: str) -> np.ndarray:
    """Where the seed puts each scale and each quant, one element at a time (slow, obviously right).

    Scales: block i's two bytes at ``quant_bytes + 2i``. Q8_0: element e of block i at byte
    ``32i + e``. Q4_0: element e's nibble (host: low nibble of qs[e] for e < 16, else high nibble of
    qs[e - 16]) goes to byte ``16i + e // 2``, low nibble for even e, XOR 8.
    """
    block_bytes = BLOCK_BYTES[qtype]
    nblocks = raw.size // block_bytes
    quant_bytes = nblocks * (block_bytes - 2)
    dev = np.zeros(raw.size, np.uint8)
    for i in range(nblocks):
        block = raw[i * block_bytes : (i + 1) * block_bytes]
        dev[quant_bytes + 2 * i] = block[0]
        dev[quant_bytes + 2 * i + 1] = block[1]
        for e in range(QK):
            if qtype == "q8_0":
                dev[QK * i + e] = block[2 + e]
                continue
            host_byte = int(block[2 + e % 16])
            nibble = host_byte & 0xF if e < 16 else host_byte >> 4
            dev[16 * i + e // 2] |= (nibble ^ 0x8) << (4 * (e % 2))
    return dev


# ---------------------------------------------------------------------------------------------
# CANN layout


@given(raw_blocks())
def test_from_cann_inverts_to_cann(case: tuple[str, np.ndarray]) -> None:
    qtype, raw = case
    dev = to_cann(raw, qtype)
    assert dev.dtype == np.uint8 and dev.size == raw.size
    np.testing.assert_array_equal(from_cann(dev, qtype), raw)


@given(raw_blocks())
def test_to_cann_inverts_from_cann(case: tuple[str, np.ndarray]) -> None:
    # Together with the test above: to_cann is a bijection on n-block buffers.
    qtype, buf = case
    np.testing.assert_array_equal(to_cann(from_cann(buf, qtype), qtype), buf)


@given(raw_blocks())
def test_to_cann_places_every_byte_where_the_seed_does(case: tuple[str, np.ndarray]) -> None:
    qtype, raw = case
    np.testing.assert_array_equal(to_cann(raw, qtype), _seed_layout_per_element(raw, qtype))


def _seed_layout_by_index(raw: np.ndarray, qtype: str) -> np.ndarray:
    """The same placement rule as :func:`_seed_layout_per_element`, as numpy scatter indices (for
    buffers too big for a Python loop)."""
    block_bytes = BLOCK_BYTES[qtype]
    nblocks = raw.size // block_bytes
    quant_bytes = nblocks * (block_bytes - 2)
    block = np.arange(nblocks)[:, None]
    dev = np.zeros(raw.size, np.uint8)
    scale_byte = np.arange(2)[None, :]
    dev[quant_bytes + 2 * block + scale_byte] = raw[block_bytes * block + scale_byte]
    element = np.arange(QK)[None, :]
    if qtype == "q8_0":
        dev[QK * block + element] = raw[block_bytes * block + 2 + element]
        return dev
    nibble = (raw[block_bytes * block + 2 + element % 16] >> (4 * (element // 16))) & 0xF
    shifted = ((nibble ^ 0x8) << (4 * (element % 2))).astype(np.uint8)
    np.bitwise_or.at(dev, 16 * block + element // 2, shifted)
    return dev


@pytest.mark.parametrize("qtype", QTYPES)
def test_transforms_of_large_buffers(qtype: str) -> None:
    # Past the transforms' chunks, with a partial last chunk.
    nblocks = quant._CHUNK_BLOCKS + 500
    raw = np.random.default_rng(5).integers(0, 256, nblocks * BLOCK_BYTES[qtype], dtype=np.uint8)
    dev = to_cann(raw, qtype)
    np.testing.assert_array_equal(dev, _seed_layout_by_index(raw, qtype))
    np.testing.assert_array_equal(from_cann(dev, qtype), raw)


@pytest.mark.parametrize("qtype", QTYPES)
def test_transforms_reuse_their_work_buffers_cleanly(qtype: str) -> None:
    """Big, small, big again: each call is right whatever an earlier call left in the per-thread
    work buffers (small calls do not use them, big ones reuse them)."""
    rng = np.random.default_rng(8)
    for nblocks in (quant._CHUNK_BLOCKS + 77, 3, 2 * quant._CHUNK_BLOCKS + 1, 5000):
        raw = rng.integers(0, 256, nblocks * BLOCK_BYTES[qtype], dtype=np.uint8)
        dev = to_cann(raw, qtype)
        np.testing.assert_array_equal(dev, _seed_layout_by_index(raw, qtype))
        np.testing.assert_array_equal(from_cann(dev, qtype), raw)


@given(raw_blocks())
def test_both_layout_oracles_agree(case: tuple[str, np.ndarray]) -> None:
    qtype, raw = case
    np.testing.assert_array_equal(_seed_layout_by_index(raw, qtype), _seed_layout_per_element(raw, qtype))


def test_q4_0_layout_worked_example() -> None:
    # Two blocks. Block 0: element j holds nibble j % 16 (so elements j and j + 16 share host byte j),
    # scale bytes 0xAA 0xBB. Block 1: all nibbles 8 (the value 0), scale 0xCC 0xDD.
    block0 = np.array([0xAA, 0xBB] + [j | (j << 4) for j in range(16)], np.uint8)
    block1 = np.array([0xCC, 0xDD] + [0x88] * 16, np.uint8)
    dev = to_cann(np.concatenate([block0, block1]), "q4_0")
    # byte k of block 0 = (element 2k) | (element 2k+1) << 4, then ^ 0x88
    first_half = [0x98, 0xBA, 0xDC, 0xFE, 0x10, 0x32, 0x54, 0x76]
    expected = first_half * 2 + [0x00] * 16 + [0xAA, 0xBB, 0xCC, 0xDD]
    assert dev.tolist() == expected


def test_q8_0_layout_worked_example() -> None:
    blocks = np.concatenate(
        [np.array([1, 2] + list(range(32)), np.uint8), np.array([3, 4] + list(range(100, 132)), np.uint8)]
    )
    dev = to_cann(blocks, "q8_0")
    assert dev.tolist() == list(range(32)) + list(range(100, 132)) + [1, 2, 3, 4]


def test_transforms_reject_partial_blocks() -> None:
    with pytest.raises(ValueError):
        to_cann(np.zeros(19, np.uint8), "q4_0")
    with pytest.raises(ValueError):
        from_cann(np.zeros(35, np.uint8), "q8_0")
    with pytest.raises(ValueError):
        to_cann(np.zeros(18, np.uint8), "q5_0")


# ---------------------------------------------------------------------------------------------
# quantize / dequantize


def float_blocks(min_value: float = -5e5, max_value: float = 5e5) -> st.SearchStrategy[np.ndarray]:
    """Finite f32 rows of 1..8 blocks whose scale f16 can hold: |x| < 8·65504 keeps f16(max/8) finite."""
    elements = st.floats(min_value, max_value, width=32, allow_subnormal=True)
    return st.integers(1, 8).flatmap(lambda nb: hnp.arrays(np.float32, (nb, QK), elements=elements))


def _scales(raw: np.ndarray, qtype: str) -> np.ndarray:
    blocks = raw.reshape(-1, BLOCK_BYTES[qtype])
    return np.ascontiguousarray(blocks[:, :2]).view(np.float16).astype(np.float64).reshape(-1)


@given(float_blocks(), qtypes, st.sampled_from(["reference", "x86"]))
def test_requantizing_dequantized_blocks_is_stable(x: np.ndarray, qtype: str, rounding: str) -> None:
    """quantize(dequantize(q)) == q for every block whose stored f16 scale is finite and nonzero, or
    whose values are all zero. (A nonzero block whose scale underflows f16 dequantizes to zeros, which is
    the one way the round trip can lose information; test_scale_underflow_is_not_stable shows it.)"""
    raw = quantize(x, qtype, rounding)  # type: ignore[arg-type]
    again = quantize(dequantize(raw, qtype, x.size), qtype, rounding)  # type: ignore[arg-type]
    scales = _scales(raw, qtype)
    keep = ((scales != 0) & np.isfinite(scales)) | ~x.any(axis=1)
    blocks, blocks_again = raw.reshape(x.shape[0], -1), again.reshape(x.shape[0], -1)
    np.testing.assert_array_equal(blocks_again[keep], blocks[keep])


def test_scale_underflow_is_not_stable() -> None:
    x = np.zeros(QK, np.float32)
    x[0] = 1e-7  # d = 1e-7/127 is below f16's smallest subnormal: the stored scale is 0
    raw = quantize(x, "q8_0")
    assert _scales(raw, "q8_0")[0] == 0 and raw[2:].view(np.int8)[0] == 127
    assert not dequantize(raw, "q8_0", QK).any()


@given(float_blocks(), st.sampled_from(["reference", "x86"]))
def test_q8_0_error_is_half_a_step(x: np.ndarray, rounding: str) -> None:
    """|x - y| <= |d|/2 + 127·|d - f16(d)| + f32 slack, with d = amax/127 and y the dequantized value.

    The second term is the stored scale's rounding applied to |q| <= 127; the slack covers the f32
    roundings of 1/d (or 127/amax), of x·id and of the dequantizing product (a few ulp of 127).
    """
    raw = quantize(x, "q8_0", rounding)  # type: ignore[arg-type]
    y = dequantize(raw, "q8_0", x.size).reshape(x.shape).astype(np.float64)
    d = np.abs(x.astype(np.float64)).max(axis=1, keepdims=True) / 127
    d16 = _scales(raw, "q8_0")[:, None]
    bound = d / 2 + 127 * np.abs(d - d16) + 2e-5 * d + 1e-45
    assert np.all(np.abs(x - y) <= bound)


@given(float_blocks())
def test_q4_0_error_bound(x: np.ndarray) -> None:
    """Q4_0: s = x/d lies in [-8, 8] and q - 8 = round-half-up(s), except that q saturates at 15.

    * q < 15: |x - y| <= |d|/2 (plus the scale's f16 rounding times |q - 8| <= 8, plus f32 slack).
    * q = 15 (values of the opposite sign to ``max`` with s >= 7.5, i.e. |x| >= 15/16·|max|):
      y = 7d while s can reach 8, so the error is up to a full step |d| = |max|/8, attained at
      x = -max.
    """
    raw = quantize(x, "q4_0")
    y = dequantize(raw, "q4_0", x.size).reshape(x.shape).astype(np.float64)
    x64 = x.astype(np.float64)
    first_largest = np.argmax(np.abs(x64), axis=1)
    d = np.abs(x64[np.arange(x.shape[0]), first_largest] / 8)[:, None]
    d16 = np.abs(_scales(raw, "q4_0"))[:, None]
    packed = raw.reshape(x.shape[0], -1)[:, 2:]
    q = np.concatenate([packed & 0xF, packed >> 4], axis=1)
    step = np.where(q == 15, 1.0, 0.5)
    bound = step * d + 8 * np.abs(d - d16) + 2e-6 * d + 1e-45
    assert np.all(np.abs(x64 - y) <= bound)


def test_q4_0_saturation_costs_a_full_step() -> None:
    x = np.zeros(QK, np.float32)
    x[0], x[1] = 8.0, -8.0  # max = 8 (first wins), d = -1; -8 maps to s = 8, clamped to q = 15
    y = dequantize(quantize(x, "q4_0"), "q4_0", QK)
    assert y[0] == 8.0 and y[1] == -7.0  # error 1 = |d|


def test_q4_0_first_of_equal_magnitudes_sets_the_sign() -> None:
    x = np.zeros(QK, np.float32)
    x[:2] = [3.0, -3.0]
    assert _scales(quantize(x, "q4_0"), "q4_0")[0] == -0.375
    assert _scales(quantize(-x, "q4_0"), "q4_0")[0] == 0.375


def test_q8_0_ties_reference_vs_x86() -> None:
    x = np.zeros(QK, np.float32)
    x[:7] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5]
    x[-1] = 127.0  # amax = 127, so d = 1 and x·id is exactly x
    reference = quantize(x, "q8_0")[2:].view(np.int8)
    x86 = quantize(x, "q8_0", "x86")[2:].view(np.int8)
    assert reference[:7].tolist() == [1, 2, 3, -1, -2, -3, 4]  # roundf: half away from zero
    assert x86[:7].tolist() == [0, 2, 2, 0, -2, -2, 4]  # _mm256_round_ps: half to even


def test_all_zero_blocks() -> None:
    zeros = np.zeros((2, QK), np.float32)
    q4 = quantize(zeros, "q4_0").reshape(2, -1)
    assert q4[:, :2].tolist() == [[0x00, 0x80]] * 2  # d = 0/-8 = -0.0
    assert (q4[:, 2:] == 0x88).all()
    assert not quantize(zeros, "q8_0").any()


@pytest.mark.parametrize("qtype", QTYPES)
def test_quantize_accepts_any_leading_shape(qtype: str) -> None:
    x = np.random.default_rng(0).standard_normal((2, 3, 64)).astype(np.float32)
    flat = quantize(x.reshape(-1), qtype)
    assert flat.dtype == np.uint8 and flat.shape == (6 * row_size(qtype, 64),)
    np.testing.assert_array_equal(quantize(x, qtype), flat)


def test_quantize_and_dequantize_reject_bad_sizes() -> None:
    with pytest.raises(ValueError):
        quantize(np.zeros((2, 48), np.float32), "q8_0")
    with pytest.raises(ValueError):
        quantize(np.zeros(32, np.float32), "q8_0", "arm")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        dequantize(np.zeros(34, np.uint8), "q8_0", 64)
    with pytest.raises(ValueError):
        dequantize(np.zeros(34, np.uint8), "q8_0", 16)


def test_dequantize_reads_only_the_first_n_elements() -> None:
    raw = quantize(np.arange(64, dtype=np.float32), "q8_0")
    np.testing.assert_array_equal(dequantize(raw, "q8_0", 32), dequantize(raw[:34], "q8_0", 32))


# ---------------------------------------------------------------------------------------------
# the whole-chunk quantizer against the general one
#
# quantize() runs ordinary blocks through whole-chunk array arithmetic and hands the blocks it cannot
# vouch for (NaN, inf, a reciprocal scale that overflows, a Q4_0 block holding both +max and -max)
# to the general code, which test_quant_vs_ggml.py checks against ggml on such blocks. Here the two
# must agree on big arrays with such blocks mixed in, across the chunk and small-input edges.

_any_f32 = st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)
_nan_payload = st.integers(0x7F800001, 0x7FFFFFFF).map(
    lambda bits: np.array(bits, np.uint32).view(np.float32).item()
)


@st.composite
def _special_block(draw: st.DrawFn) -> np.ndarray:
    with np.errstate(over="ignore"):  # "huge" may overflow to inf, which is wanted too
        return _draw_special_block(draw)


def _draw_special_block(draw: st.DrawFn) -> np.ndarray:
    kind = draw(st.sampled_from(["any", "nan", "tie", "half_ties", "tiny", "huge", "zeros", "one_value"]))
    block: np.ndarray = np.array(draw(st.lists(st.floats(-4.0, 4.0, width=32), min_size=QK, max_size=QK)), np.float32)
    position = draw(st.integers(0, QK - 1))
    if kind == "any":
        block = np.array(draw(st.lists(_any_f32, min_size=QK, max_size=QK)), np.float32)
    elif kind == "nan":
        block[position] = draw(st.one_of(_nan_payload, st.just(float("nan")), st.just(float("-inf"))))
    elif kind == "tie":  # +m and -m: Q4_0's first-wins sign rule
        m = np.float32(draw(st.floats(4.0, 2.0**100, width=32)))
        other = draw(st.integers(0, QK - 1).filter(lambda p: p != position))
        block[position], block[other] = m, -m
    elif kind == "half_ties":  # x·id lands on k + 0.5 exactly, or an ulp beside it
        halves = np.array(draw(st.lists(st.integers(-254, 254), min_size=QK, max_size=QK)), np.float32) / 2
        halves[position] = 127.0
        nudge = draw(st.sampled_from([0, 1, -1]))
        block = np.nextafter(halves, np.float32(np.inf * nudge)) if nudge else halves
        block = (block * np.float32(draw(st.sampled_from([1.0, 2.0**-20, 2.0**30])))).astype(np.float32)
    elif kind == "tiny":  # amax near the point where 1/d or 127/amax overflows
        block = block * np.float32(draw(st.floats(2.0**-132, 2.0**-120, width=32, allow_subnormal=True)))
    elif kind == "huge":  # scales beyond f16, and x·id near its largest
        block = block * np.float32(draw(st.floats(2.0**13, 2.0**125, width=32)))
    elif kind == "zeros":
        block = np.where(block > 0, np.float32(0), np.float32(-0.0))
    else:
        block[:] = block[position]
    return block.astype(np.float32)


@st.composite
def _big_rows_with_special_blocks(draw: st.DrawFn) -> np.ndarray:
    small = quant._SMALL_FOLD_ELEMENTS // QK
    chunk = quant._QUANTIZE_CHUNK_BLOCKS
    nblocks = draw(st.sampled_from([1, small, small + 1, chunk - 1, chunk, chunk + small + 3]))
    seed = draw(st.integers(0, 2**32 - 1))
    blocks = np.random.default_rng(seed).standard_normal((nblocks, QK)).astype(np.float32)
    blocks *= np.float32(draw(st.sampled_from([1.0, 1e-30, 1e30])))
    for block in draw(st.lists(_special_block(), max_size=6)):
        blocks[draw(st.integers(0, nblocks - 1))] = block
    return blocks


@settings(max_examples=40, deadline=None)
@given(_big_rows_with_special_blocks(), st.sampled_from(["reference", "x86"]))
def test_whole_chunk_quantizer_matches_the_general_one(blocks: np.ndarray, rounding: str) -> None:
    np.testing.assert_array_equal(
        quantize(blocks, "q4_0", rounding).reshape(blocks.shape[0], -1),  # type: ignore[arg-type]
        quant._quantize_q4_0_general(blocks),
    )
    np.testing.assert_array_equal(
        quantize(blocks, "q8_0", rounding).reshape(blocks.shape[0], -1),  # type: ignore[arg-type]
        quant._quantize_q8_0_general(blocks, rounding),  # type: ignore[arg-type]
    )


def _edge_blocks() -> np.ndarray:
    """Blocks at each boundary the whole-chunk path must get right or hand over, in one array."""
    rng = np.random.default_rng(21)
    edges: list[np.ndarray] = []
    # amax = 127 makes d = 1 and x·id == x: every k/2 up to 127 and three ulps either side, where
    # roundf, rint and any shortcut for them part ways (0.49999997 among them).
    values = np.arange(-254, 255, dtype=np.float32) / 2
    for _ in range(3):
        up, down = np.nextafter(values, np.float32(np.inf)), np.nextafter(values, np.float32(-np.inf))
        values = np.unique(np.concatenate([values, up, down]))
    values = values[np.abs(values) <= 127]
    values = np.concatenate([values, np.zeros(-values.size % (QK - 1), np.float32)]).reshape(-1, QK - 1)
    edges.append(np.concatenate([values, np.full((values.shape[0], 1), 127, np.float32)], axis=1))
    normal = rng.standard_normal((8, QK)).astype(np.float32)
    # amax around where 1/d (or 127/amax) overflows f32: 127·2**-128 for Q8_0, 8·2**-128 for Q4_0
    for amax in (2.0**-121, 2.0**-122, 2.0**-124, 2.0**-125, 2.0**-126, 2.0**-140):
        edges.append(normal / np.abs(normal).max(axis=1, keepdims=True) * np.float32(amax))
    tie = normal.copy()
    tie[:, 3], tie[:, 9] = 5.0, -5.0  # +max and -max: the first one sets Q4_0's sign
    edges += [tie, -tie, np.zeros((2, QK), np.float32), np.full((2, QK), -0.0, np.float32)]
    nan = normal.copy()
    nan[np.arange(8), [0, 5, 30, 31, 1, 2, 3, 4]] = [np.nan, np.nan, np.nan, np.nan, np.inf, -np.inf, np.inf, np.nan]
    edges += [nan, normal * np.float32(1e6), normal * np.float32(1e36)]  # scales past f16, x·id near max
    background = rng.standard_normal((quant._SMALL_FOLD_ELEMENTS // QK + 5, QK)).astype(np.float32)
    return np.concatenate([background, *edges, background])


@pytest.mark.parametrize("rounding", ["reference", "x86"])
def test_whole_chunk_quantizer_on_its_edge_blocks(rounding: str) -> None:
    blocks = _edge_blocks()
    np.testing.assert_array_equal(
        quantize(blocks, "q4_0", rounding).reshape(blocks.shape[0], -1),  # type: ignore[arg-type]
        quant._quantize_q4_0_general(blocks),
    )
    np.testing.assert_array_equal(
        quantize(blocks, "q8_0", rounding).reshape(blocks.shape[0], -1),  # type: ignore[arg-type]
        quant._quantize_q8_0_general(blocks, rounding),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("qtype", QTYPES)
def test_dequantize_across_chunks_is_the_plain_formula(qtype: str) -> None:
    nblocks = quant._DEQUANTIZE_CHUNK_BLOCKS + 37
    block_bytes = BLOCK_BYTES[qtype]
    raw = np.random.default_rng(3).integers(0, 256, nblocks * block_bytes, dtype=np.uint8)
    blocks = raw.reshape(nblocks, block_bytes)
    scales = np.ascontiguousarray(blocks[:, :2]).view(np.float16).astype(np.float32)
    if qtype == "q8_0":
        quants = np.ascontiguousarray(blocks[:, 2:]).view(np.int8).astype(np.float32)
    else:
        qs = blocks[:, 2:]
        quants = np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.float32) - 8
    with np.errstate(invalid="ignore", over="ignore"):
        expected = (quants * scales).reshape(-1)
    got = dequantize(raw, qtype, nblocks * QK)
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))


def test_threads_keep_their_own_work_buffers() -> None:
    """Each thread has its own work buffers: concurrent big calls give the single-threaded results."""
    rng = np.random.default_rng(11)
    inputs = [rng.standard_normal((quant._QUANTIZE_CHUNK_BLOCKS + 9, QK)).astype(np.float32) for _ in range(4)]
    raws = [quantize(x, "q4_0") for x in inputs]
    devs = [to_cann(quantize(x, "q4_0"), "q4_0") for x in inputs]

    def work(index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raw = quantize(inputs[index], "q4_0")
        return raw, to_cann(raw, "q4_0"), from_cann(devs[index], "q4_0")

    for _ in range(3):
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(work, range(4)))
        for index, (raw, dev, back) in enumerate(results):
            np.testing.assert_array_equal(raw, raws[index])
            np.testing.assert_array_equal(dev, devs[index])
            np.testing.assert_array_equal(back, raws[index])


# ---------------------------------------------------------------------------------------------
# allocation size (seed get_alloc_size): ggml_nbytes + row_size(512 - ne0 % 512) once per tensor


@pytest.mark.parametrize(
    ("qtype", "ne", "expected"),
    [
        ("q4_0", (4096, 4096, 1, 1), 18 * 128 * 4096),  # ne0 % 512 == 0: no padding
        ("q8_0", (4608, 2, 1, 1), 34 * 144 * 2),  # 4608 = 9 * 512
        ("q8_0", (32, 1, 1, 1), 34 + 34 * 15),  # pad 480 elements = 15 blocks
        ("q4_0", (544, 3, 2, 1), 18 * 17 * 6 + 18 * 15),  # 544 % 512 = 32 -> pad 480
        ("q4_0", (32, 1000, 1, 1), 18 * 1000 + 18 * 15),  # once per tensor, not per row
        ("q8_0", (992, 2, 3, 4), 34 * 31 * 24 + 34 * 1),  # pad 32 elements = one block
        ("q8_0", (1024, 7), 34 * 32 * 7),  # fewer than 4 dims: the rest are 1
        ("f32", (100, 3, 1, 1), 1200),  # plain types: ggml_nbytes only
        ("f16", (33, 1, 1, 1), 66),
    ],
)
def test_cann_alloc_size_examples(qtype: str, ne: tuple[int, ...], expected: int) -> None:
    assert cann_alloc_size(qtype, ne) == expected


@given(
    qtypes,
    st.integers(1, 64).map(lambda blocks: blocks * QK),
    st.integers(1, 5),
    st.integers(1, 3),
    st.integers(1, 2),
)
def test_cann_alloc_size_pads_to_whole_512_rows_once(
    qtype: str, ne0: int, ne1: int, ne2: int, ne3: int
) -> None:
    size = cann_alloc_size(qtype, (ne0, ne1, ne2, ne3))
    nbytes = row_size(qtype, ne0) * ne1 * ne2 * ne3
    padded_ne0 = -(-ne0 // MATRIX_ROW_PADDING) * MATRIX_ROW_PADDING
    assert size - nbytes == row_size(qtype, padded_ne0) - row_size(qtype, ne0)

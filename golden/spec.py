"""What the catalogue knows about one op: :class:`OpSpec`, its dtype :class:`Signature` s and its
:class:`Param` s.

Each family module (``golden/unary.py``, ``golden/norm.py``...) defines an op's golden function and,
right beside it, its ``OpSpec``, added to the module's ``SPECS``; ``golden/catalogue.py`` is the
list of family modules. An ``OpSpec`` carries everything the other layers need to know about the
op and nothing about any one backend: accepted dtype signatures, parameters and their domains, the
tolerance rows (error models with their reasons), the validator that rejects cases ggml would abort
on, and the layouts ggml's graph constructor accepts.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from golden import dtypes
from golden.case import OpCase
from golden.tolerance import ROUNDED, Calibration, Tolerance, rounded_via_f32

Golden = Callable[[list[np.ndarray], OpCase], np.ndarray]
Validator = Callable[[OpCase, list[np.ndarray]], None]


@dataclass(frozen=True)
class Signature:
    """One accepted dtype combination: source dtypes in order, and the destination dtype."""

    srcs: tuple[str, ...]
    dst: str

    def label(self) -> str:
        if not self.srcs:
            return self.dst  # ops without inputs (ARANGE)
        return "_".join(self.srcs) + ("" if self.srcs[0] == self.dst else f"_to_{self.dst}")

    @property
    def quantized(self) -> bool:
        return any(dtypes.is_quantized(t) for t in (*self.srcs, self.dst))


def sig(*srcs: str, dst: str | None = None) -> Signature:
    """``sig("f16", "f32", dst="f32")``; the destination defaults to the first source's dtype."""
    return Signature(tuple(srcs), dst or srcs[0])


class InputLayouts(enum.Enum):
    """The layouts ggml's graph constructor accepts for the op's inputs (its API contract, the same
    for every backend; a backend kernel that mishandles an accepted layout is that backend's bug)."""

    ANY = "any"  # any permute, padded view or offset
    ROWS = "rows"  # dim 0 stays innermost with unit stride (ggml asserts rows contiguous)
    PADDED_ROWS = "padded_rows"  # rows at a uniform stride, planes packed, no permute (ggml_is_padded_1d)
    CONTIGUOUS = "contiguous"  # ggml asserts ggml_is_contiguous


class RegimeKind(enum.Enum):
    """What a regime stands for in a kernel: every op declares at least one GRID and one TILE regime,
    or says in one line why it has none (OpSpec.no_grid_regime, OpSpec.no_tile_regime)."""

    GRID = "grid"  # more blocks (workgroups) than one grid dimension holds: a second dimension or a stride loop
    TILE = "tile"  # a tiled dimension longer than one tile, or not a multiple of it: a carry or a partial tile
    OTHER = "other"  # value ranges, aliasing, layouts, parameter corners


@dataclass(frozen=True)
class Regime:
    """A part of an op's domain where implementations change path (a row spanning several tiles, a
    sequence longer than a chunk, integers beyond f32's 2^24): the suite's strategies must reach each
    declared regime in the ci profile (tests/test_regime_coverage.py), the suite draws each in every run
    (conformance/test_regimes.py), and the report shows which regimes a run's cases reached."""

    name: str
    holds: Callable[[OpCase], bool]
    why: str
    kind: RegimeKind = RegimeKind.OTHER

    def __call__(self, case: OpCase) -> bool:
        return bool(self.holds(case))


# common tile/block sizes of reduction kernels (CUDA's 256/512/1024-thread blocks, NPU vector tiles)
ROW_BLOCKS = (256, 512, 1024, 4096)


def row_regimes(src: int = 0, blocks: tuple[int, ...] = ROW_BLOCKS) -> tuple[Regime, ...]:
    """Rows (dim 0 of input ``src``) longer than each block size, so a tiled kernel needs a carry
    between tiles; the largest block is reached at exactly its size (``row>=4096``)."""
    def longer_than(n: int) -> Callable[[OpCase], bool]:
        return lambda c: c.inputs[src].ne[0] > n

    out = [Regime(f"row>{b}", longer_than(b), f"a row spans more than one {b}-element tile", RegimeKind.TILE)
           for b in blocks[:-1]]
    top = blocks[-1]
    out.append(Regime(f"row>={top}", longer_than(top - 1), f"a row fills a {top}-element block", RegimeKind.TILE))
    return tuple(out)


# row kernels launch one block per row, rows over the grid's dimensions (CUDA: x, then y and z of at most
# 65,535; Vulkan: at most 65,535 workgroups per dimension), so past that the rows wrap into another dimension
GRID_ROWS = 65535


def many_rows(src: int = 0, limit: int = GRID_ROWS) -> Regime:
    """More rows (dims 1-3 of input ``src``) than one grid dimension has blocks."""
    return Regime(f"rows>{limit}", lambda c: math.prod(c.inputs[src].ne[1:]) > limit,
                  f"more than {limit:,} rows: one block per row is past one grid dimension's limit", RegimeKind.GRID)


SPECIAL_VALUES = Regime("special", lambda c: c.distribution == "special",
                        "±0, ±inf, NaN and subnormals in the inputs (the op's specials)")
# the data makers draw integer tensors over their whole range under these distributions
FULL_INTEGERS = Regime("int>2^24", lambda c: c.distribution in ("wide", "special")
                       and any(t.dtype in ("i32", "i64") for t in c.inputs),
                       "integers beyond 2^24, where a compare or copy through f32 loses bits")
OVERLAPPING_SOURCES = Regime("aliased", lambda c: any(t.layout.alias is not None for t in c.inputs),
                             "one input a view into another's allocation (Layout.alias): overlapping sources")
# ggml-cuda/ggml-vulkan launch elementwise kernels one block (workgroup) per group of elements; a grid
# dimension holds at most 65,535 (CUDA y/z) or 65,536 blocks, so past that a kernel needs a grid-stride
# loop or a second grid dimension
GRID_BLOCKS = 65536


def grid_regime(src: int = 0, limit: int = GRID_BLOCKS, elements: Callable[[OpCase], int] | None = None) -> Regime:
    """More elements in input ``src`` (or ``elements(case)``: those the kernel writes) than a
    one-dimensional grid has blocks."""
    count = elements or (lambda c: math.prod(c.inputs[src].ne))
    return Regime(f"elements>{limit}", lambda c: count(c) > limit,
                  f"more than {limit:,} elements: past one grid dimension's block limit", RegimeKind.GRID)


def partial_tile(name: str, size: Callable[[OpCase], int], tile: int) -> Regime:
    """A tiled dimension longer than one tile and not a multiple of it: the last tile is partial."""
    return Regime(f"{name}>{tile},partial", lambda c: size(c) > tile and size(c) % tile != 0,
                  f"{name} over one {tile}-wide tile and not a multiple of it (a partial last tile)", RegimeKind.TILE)


# elementwise kernels give each block (workgroup) a run of elements: ggml-cuda's 256 threads, ggml-vulkan's
# 512-invocation dispatches, NPU vector tiles of 256 bytes; a count past one block and not a multiple of it
# leaves the last block partly out of range, where a kernel without a bounds check reads or writes past the end
ELEMENT_BLOCK = 256


def element_regimes(src: int = 0, elements: Callable[[OpCase], int] | None = None) -> tuple[Regime, Regime]:
    """The grid-limit and partial-block regimes of a kernel over the elements of input ``src`` (or the
    ``elements(case)`` it writes)."""
    count = elements or (lambda c: math.prod(c.inputs[src].ne))
    return grid_regime(src, elements=count), partial_tile("elements", count, ELEMENT_BLOCK)


CHUNK_TOKENS = 64  # chunk length of chunked scan/recurrence kernels (state carried between chunks)


def long_sequences(tokens: Callable[[OpCase], int], seqs: Callable[[OpCase], int],
                   chunk: int = CHUNK_TOKENS) -> Regime:
    """Several sequences, each longer than one chunk: the state must carry from chunk to chunk and
    must not leak from one sequence to the next."""
    return Regime(f"seq>{chunk}x2", lambda c: tokens(c) > chunk and seqs(c) >= 2,
                  f"two or more sequences of more than {chunk} tokens (state carried between chunks)",
                  RegimeKind.TILE)  # the chunk is the kernel's tile along the tokens


@dataclass(frozen=True)
class Param:
    """One op parameter: what it means and the Python type its value has in a case id."""

    meaning: str
    kind: type = float
    optional: bool = False  # may be left out of a case (the golden and builder use a default)

    def check(self, op: str, name: str, value: Any) -> None:
        ok = isinstance(value, self.kind) and not (self.kind in (int, float) and isinstance(value, bool))
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            ok = True  # 1 and 1.0 are the same f32 parameter
        if not ok:
            raise ValueError(f"{op}: parameter {name}={value!r} should be {self.kind.__name__} ({self.meaning})")


def P(meaning: str, kind: type = float, optional: bool = False) -> Param:  # noqa: N802 (reads as a table)
    return Param(meaning, kind, optional)


@dataclass(frozen=True)
class OpSpec:
    """One op of the catalogue. Construct with keywords; see the module docstring."""

    name: str
    family: str  # the golden module (and the default case strategy for the family's shape of op)
    golden: Golden
    signatures: tuple[Signature, ...]
    tolerance: dict[str, Tolerance]  # by signature label, else destination dtype, else "*"
    quantized_signatures: tuple[Signature, ...] = ()  # Q4_0/Q8_0 sources or destinations
    params: dict[str, Param] = field(default_factory=dict)
    validate: Validator | None = None  # rejects cases ggml would abort on (ValueError, before any device)
    input_layouts: InputLayouts = InputLayouts.ANY  # for src0; see InputLayouts
    inplace_inputs: tuple[int, ...] = ()  # inputs the op writes by definition (CLAMP returns a view of a)
    # ggml has an in-place constructor for the op (ggml_<op>_inplace, ggml_unary_inplace): its
    # form=inplace is drawn too, and a device builds it with that constructor
    inplace_form: bool = False
    specials: tuple[float, ...] = (np.nan, np.inf, -np.inf, 0.0, -0.0)
    max_abs_input: float | None = None  # inputs beyond this are outside the op's defined domain
    structured_inputs: bool = False  # inputs need a maker (indices, positions, masks): conformance registers it
    own_verdict: bool = False  # judged by an op-specific comparator (ARGSORT's permutation check)
    regimes: tuple[Regime, ...] = ()  # where implementations change path: the ci profile must reach each
    # why an implemented op declares no regime (one line: a view computes nothing); empty where it has regimes
    no_regimes: str = ""
    # why an op with regimes has none of the kind (one line each; RegimeKind): empty where it has one
    no_grid_regime: str = ""
    no_tile_regime: str = ""
    notes: str = ""

    @property
    def implemented(self) -> bool:
        return self.golden is not None

    @property
    def all_signatures(self) -> tuple[Signature, ...]:
        return self.signatures + self.quantized_signatures

    def tolerance_key(self, dst: str, signature: str = "") -> str:
        """The key of the row for a signature label (``q4_0_f32_to_f32``) if there is one, else for the
        dst dtype, else ``*``; ``OP[key]`` names the row in records."""
        for key in (signature, dst, "*"):
            if key and key in self.tolerance:
                return key
        raise KeyError(f"{self.name}: no tolerance row for destination dtype {dst}")

    def tolerance_for(self, dst: str, signature: str = "") -> Tolerance:
        """The row for a signature label if there is one, else for the dst dtype (see tolerance_key)."""
        return self.tolerance[self.tolerance_key(dst, signature)]

    def check_params(self, case: OpCase) -> None:
        """Unknown, missing or mistyped parameters are a ValueError naming them."""
        given = dict(case.params)
        unknown = sorted(set(given) - set(self.params))
        if unknown:
            known = ", ".join(self.params) or "none"
            raise ValueError(f"{self.name}: unknown parameter(s) {', '.join(unknown)} (known: {known})")
        missing = [n for n, p in self.params.items() if n not in given and not p.optional]
        if missing:
            raise ValueError(f"{self.name}: missing parameter(s) {', '.join(missing)}")
        for name, value in given.items():
            self.params[name].check(self.name, name, value)


class OpList:
    """A family module's ops in definition order (``SPECS.add(OpSpec(...))`` beside each golden)."""

    def __init__(self) -> None:
        self._specs: list[OpSpec] = []

    @classmethod
    def of(cls, specs: Iterable[OpSpec]) -> OpList:
        out = cls()
        for spec in specs:
            out.add(spec)
        return out

    def add(self, spec: OpSpec) -> OpSpec:
        self._specs.append(spec)
        return spec

    def __iter__(self) -> Iterator[OpSpec]:
        return iter(self._specs)


# ---- shared building blocks for family modules ---------------------------------------------------
SAME_FLOAT = (sig("f32"), sig("f16"))
SAME_FLOAT_BF16 = (sig("f32"), sig("f16"), sig("bf16"))

ELEMENTWISE_TOL = {
    "f32": ROUNDED,
    "f16": rounded_via_f32(),
    "bf16": rounded_via_f32(),
}


def one(fn: Callable[[np.ndarray], np.ndarray]) -> Golden:
    """A golden adapter for a function of the first input alone."""
    return lambda xs, case: fn(xs[0])


def two(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Golden:
    """A golden adapter for a function of the first two inputs."""
    return lambda xs, case: fn(xs[0], xs[1])


def libm(ulps: float, what: str, *, calibration: Calibration = Calibration.DEFINITION) -> dict[str, Tolerance]:
    """Rows for a transcendental evaluated in f32 within ``ulps`` ulp, then the destination rounding."""
    reason = f"{what}; then the destination rounding"
    return {
        "f32": Tolerance(reason, ulp=ulps, calibration=calibration),
        "f16": Tolerance(reason + " (f32 inside, F16 out)", ulp=0.5, rtol=ulps * 2 * 2.0**-24, calibration=calibration),
        "bf16": Tolerance(reason + " (f32 inside, BF16 out)", ulp=0.5, rtol=ulps * 2 * 2.0**-24,
                          calibration=calibration),
    }

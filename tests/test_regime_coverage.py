"""Every regime an op declares (``OpSpec.regimes``: grid limits, partial tiles, sequences longer than a
chunk, integers beyond 2^24, special values) is drawn by the suite in the ci profile.

Each op's strategies run under the ci profile's settings (30 derandomized examples per signature, as
the group tests draw them), then conformance/test_regimes.py's draw of each regime (the op's strategies
kept inside it, a tenth of the examples), and the regimes the drawn cases hit are collected; a declared
regime that neither reaches fails, naming it (the regime test's draw finds no case inside a regime that
no strategy branch reaches). The same holds at the ci profile's size on two fresh seeds. The group tests'
own share of each regime (a strategy branch in about one case of 3) varies with the seed: Hypothesis'
examples cluster, so a regime a branch reaches in 5 of one seed's 30 cases may get none on another;
the regime test is what makes every run reach every regime.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis.errors import Unsatisfiable

from conformance import cases, test_regimes
from golden import catalogue
from golden.case import OpCase
from golden.spec import OpSpec, Regime, RegimeKind, long_sequences, partial_tile, row_regimes

CI = settings(max_examples=30, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
WITH_REGIMES = [s for s in catalogue.implemented() if s.regimes]


SEEDS = (None, 1, 2)  # None: the ci profile's derandomized draw


def regimes_drawn(spec: OpSpec, draw_seed: int | None = None, with_regime_tests: bool = True) -> set[str]:
    """The names of ``spec``'s regimes that its ci-profile draws reach, over all its signatures (and, with
    ``with_regime_tests``, conformance/test_regimes.py's draws inside each regime)."""
    reached: set[str] = set()
    profile = CI if draw_seed is None else settings(CI, derandomize=False)
    for signature in spec.all_signatures:
        strategy = cases.strategy_for(spec.name, signature)

        @seed(draw_seed)
        @profile
        @given(strategy)
        def draw(case: OpCase) -> None:
            reached.update(r.name for r in spec.regimes if r(case))

        # a stream of its own per signature, as the suite's parametrized tests get (Hypothesis adds
        # each test's node id to its derandomized digest)
        draw.hypothesis.inner_test._hypothesis_internal_add_digest = (  # type: ignore[attr-defined]
            f"{spec.name}-{signature.label()}".encode())
        draw()
    if not with_regime_tests:
        return reached
    for regime in spec.regimes:
        @seed(draw_seed)
        @settings(profile, max_examples=max(1, CI.max_examples // test_regimes.SHARE_OF_PROFILE))
        @given(test_regimes.inside(spec, regime))
        def draw_inside(case: OpCase) -> None:
            reached.update(r.name for r in spec.regimes if r(case))

        draw_inside.hypothesis.inner_test._hypothesis_internal_add_digest = (  # type: ignore[attr-defined]
            f"{spec.name}-{regime.name}".encode())
        try:
            draw_inside()
        except Unsatisfiable:  # no case inside it: the regime stays missing
            pass
    return reached


@pytest.mark.parametrize("draw_seed", SEEDS, ids=["ci", "seed1", "seed2"])
@pytest.mark.parametrize("spec", WITH_REGIMES, ids=[s.name for s in WITH_REGIMES])
def test_every_declared_regime_is_drawn_in_the_ci_profile(spec: OpSpec, draw_seed: int | None) -> None:
    missing = [r.name for r in spec.regimes if r.name not in regimes_drawn(spec, draw_seed)]
    assert not missing, f"{spec.name}: the ci profile (seed {draw_seed}) never draws regime(s) {', '.join(missing)}"


def test_the_regime_classes_are_declared() -> None:
    names = {spec.name: {r.name for r in spec.regimes} for spec in WITH_REGIMES}
    for op in ("SUM", "SUM_ROWS", "MEAN", "CUMSUM", "ARGSORT", "ARGMAX", "NORM", "RMS_NORM", "L2_NORM", "SOFT_MAX"):
        assert {r.name for r in row_regimes()} <= names[op], op
    for op in ("SSM_CONV", "GATED_LINEAR_ATTN"):
        assert any(n.startswith("seq>") for n in names[op]), op
    for op in ("COUNT_EQUAL", "CONCAT", "CPY"):
        assert "int>2^24" in names[op], op
    for op in ("ADD", "SUB", "MUL", "DIV"):
        assert "aliased" in names[op], op
    assert "mla_v_in_k" in names["FLASH_ATTN_EXT"]
    # elementwise kernels past one grid dimension's blocks; SOLVE_TRI's partial 32-wide tiles
    for spec in catalogue.implemented():
        if spec.family in ("unary", "binary"):
            assert "elements>65536" in names.get(spec.name, set()), spec.name
    assert {"rhs>32,partial", "n>32,partial"} <= names["SOLVE_TRI"]
    # copies, constructions and resizes past the grid limit; matrix products' partial K, row and column tiles;
    # gathers and scatters of more rows than a grid dimension has blocks
    for op in ("FILL", "TRI", "DIAG", "SET", "PAD_REFLECT_1D", "DUP", "CONT", "REPEAT", "ACC", "PAD", "UPSCALE",
               "ARANGE", "DIAG_MASK_INF", "TIMESTEP_EMBEDDING", "POOL_2D", "CONV_TRANSPOSE_1D", "IM2COL", "ROPE",
               "GET_ROWS", "SET_ROWS"):
        assert "elements>65536" in names[op], op
    for op in ("MUL_MAT", "OUT_PROD"):
        assert {"k>32,partial", "k>256,partial", "rows>64,partial", "cols>32,partial"} <= names[op], op
    assert {"k>32,partial", "k>256,partial", "rows>64,partial", "tokens>32,partial"} <= names["MUL_MAT_ID"]
    assert "rows>65535" in names["GET_ROWS"] and "rows>65535" in names["SET_ROWS"]
    assert {r.name for r in row_regimes()} <= names["CROSS_ENTROPY_LOSS"]
    assert "head>512,partial" in names["ROPE"] and "group>1024,partial" in names["GROUP_NORM"]
    assert "columns>256,partial" in names["IM2COL"]
    # row kernels past one grid dimension's rows; products past it in weight rows (a vocabulary projection)
    for op in ("NORM", "RMS_NORM", "L2_NORM", "SUM_ROWS", "MEAN", "ARGMAX", "CUMSUM", "ARGSORT", "SOFT_MAX",
               "CROSS_ENTROPY_LOSS"):
        assert "rows>65535" in names[op], op
    assert "rows>65535" in names["MUL_MAT"] and "rows>65535" in names["MUL_MAT_ID"]
    for op in ("SUM", "COUNT_EQUAL", "CPY", "CONCAT", "OUT_PROD"):
        assert "elements>65536" in names[op], op
    assert "groups>65535" in names["GROUP_NORM"] and "systems>65535" in names["SOLVE_TRI"]
    assert "kv>64,partial" in names["FLASH_ATTN_EXT"]
    for spec in catalogue.implemented():  # every elementwise kernel: a partly filled last block
        if spec.family in ("unary", "binary", "glu"):
            assert "elements>256,partial" in names[spec.name], spec.name


def test_partial_tile_needs_more_than_one_tile_and_a_remainder() -> None:
    regime = partial_tile("k", lambda c: c.param("k"), 32)
    case = lambda k: OpCase("X", (), params=(("k", k),))  # noqa: E731
    assert regime(case(33)) and regime(case(95)) and not regime(case(32)) and not regime(case(64))
    assert not regime(case(31))


def test_a_regime_that_is_not_drawn_is_reported() -> None:
    never = Regime("never", lambda c: False, "no case is in it")
    spec = catalogue.get("SUM")
    from dataclasses import replace

    assert "never" not in regimes_drawn(replace(spec, regimes=(*spec.regimes, never)))


def test_draws_do_not_depend_on_what_else_was_imported(tmp_path, monkeypatch) -> None:
    """Hypothesis draws constants from the source of loaded local modules; a module imported between
    two derandomized draws of the same strategy must not change the second."""
    import importlib

    def drawn() -> list[str]:
        out: list[str] = []
        for op in ("ADD", "ABS", "SOFT_MAX", "SOLVE_TRI"):
            spec = catalogue.get(op)

            @CI
            @given(cases.strategy_for(spec.name, spec.signatures[0]))
            def draw(case: OpCase) -> None:
                out.append(case.case_id)

            draw()
        return out

    before = drawn()
    # a local module full of sizes a strategy could draw (not named like a test: Hypothesis reads it)
    (tmp_path / "sizes_elsewhere.py").write_text(
        "SIZES = (" + ", ".join(str(n) for n in range(2, 4000, 5)) + ")\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("sizes_elsewhere")
    assert drawn() == before


def test_long_sequences_needs_two_sequences_past_the_chunk() -> None:
    regime = long_sequences(lambda c: c.param("t"), lambda c: c.param("s"), chunk=64)
    case = lambda t, s: OpCase("X", (), params=(("t", t), ("s", s)))  # noqa: E731
    assert regime(case(65, 2)) and not regime(case(64, 2)) and not regime(case(200, 1))


def test_every_implemented_op_declares_regimes_or_says_why_not() -> None:
    """Each op names where kernels change path (OpSpec.regimes), or gives in one line why it has none
    (OpSpec.no_regimes): never both, never neither."""
    neither = [s.name for s in catalogue.implemented() if not s.regimes and not s.no_regimes.strip()]
    both = [s.name for s in catalogue.implemented() if s.regimes and s.no_regimes]
    multiline = [s.name for s in catalogue.implemented() if "\n" in s.no_regimes]
    assert not neither, f"ops with no regimes and no reason: {', '.join(neither)}"
    assert not both, f"ops with regimes and a reason for having none: {', '.join(both)}"
    assert not multiline, f"reasons longer than one line: {', '.join(multiline)}"


@pytest.mark.parametrize("kind", [RegimeKind.GRID, RegimeKind.TILE], ids=lambda k: k.value)
def test_every_op_declares_its_grid_and_tile_regimes_or_says_why_not(kind: RegimeKind) -> None:
    """Each op with regimes has one of each required kind (a grid limit, a partial tile), or one line
    saying why it has none of that kind (OpSpec.no_grid_regime, no_tile_regime); never both."""
    def reason(s: OpSpec) -> str:
        return s.no_grid_regime if kind is RegimeKind.GRID else s.no_tile_regime

    with_regimes = [s for s in catalogue.implemented() if not s.no_regimes]
    has = {s.name for s in with_regimes if any(r.kind is kind for r in s.regimes)}
    neither = [s.name for s in with_regimes if s.name not in has and not reason(s).strip()]
    both = [s.name for s in with_regimes if s.name in has and reason(s)]
    multiline = [s.name for s in with_regimes if "\n" in reason(s)]
    assert not neither, f"ops with no {kind.value} regime and no reason: {', '.join(neither)}"
    assert not both, f"ops with a {kind.value} regime and a reason for having none: {', '.join(both)}"
    assert not multiline, f"reasons longer than one line: {', '.join(multiline)}"
    assert len(has) >= 70  # the catalogue's ops that compute declare them (views say why they have none)

"""The catalogue drives the suite: every op has each piece it needs in every layer, and a missing
piece is an error that names it (never a silent "backend declines")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance import cases, suite
from device.ggml.graph import builders
from golden import catalogue
from golden.case import OpCase, TensorSpec
from golden.spec import OpSpec, sig
from golden.tolerance import Calibration

DATA = Path(__file__).parent / "data"

ALL_SIGNATURES = [pytest.param(spec.name, s, id=f"{spec.name.lower()}-{s.label()}")
                  for spec in catalogue.OPS.values() for s in spec.all_signatures]


@pytest.mark.parametrize("op", sorted(catalogue.OPS))
def test_every_op_has_its_pieces(op: str) -> None:
    spec = catalogue.get(op)
    assert callable(spec.golden), f"{op}: no golden function (README \"Adding an op\", step 1)"
    assert op in builders(), (f"{op}: no ggml constructor: add one to BUILDERS in the family's device/ggml/ops_*.py, "
                              f"or for a plain unary op one line of UNARY_OPS in device/ggml/ops_elementwise.py "
                              f"(README \"Adding an op\", step 2)")
    found = cases.entry(op)  # raises MissingPiece naming what is absent
    assert found.group, op
    for s in spec.all_signatures:
        tol = spec.tolerance_for(s.dst, s.label())
        assert len(tol.reason) > 15, f"{op}/{s.label()}: tolerance without an error-model reason"


@pytest.mark.parametrize(("op", "signature"), ALL_SIGNATURES)
@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data())
def test_drawn_cases_match_their_catalogue_entry(op: str, signature, data: st.DataObject) -> None:
    """What the strategy draws is what the catalogue describes: the op, the signature's dtypes, and
    exactly the parameters the OpSpec names (with the declared types)."""
    case = data.draw(cases.strategy_for(op, signature))
    assert case.op == op
    assert tuple(t.dtype for t in case.inputs[: len(signature.srcs)]) == signature.srcs
    assert case.dst == signature.dst
    catalogue.get(op).check_params(case)


def test_every_signature_is_a_test_parameter() -> None:
    listed = {(p.values[0], p.values[1]) for g in suite.groups() for p in suite.parameters(g)}
    wanted = {(spec.name, s) for spec in catalogue.OPS.values() for s in spec.all_signatures}
    assert listed == wanted


def test_a_missing_strategy_is_named() -> None:
    lonely = OpSpec(name="LONELY", family="no_such_family", golden=lambda xs, c: xs[0],
                    signatures=(sig("f32"),), tolerance={"*": catalogue.get("RELU").tolerance["*"]},
                    structured_inputs=True)
    catalogue.OPS["LONELY"] = lonely
    try:
        with pytest.raises(cases.MissingPiece, match="LONELY: the suite lacks a case strategy.*an input maker"):
            cases.entry("LONELY")
    finally:
        del catalogue.OPS["LONELY"]


def test_a_missing_ggml_constructor_is_a_harness_error_not_a_decline() -> None:
    from device.ggml.device import GgmlDevice
    from device.ggml.graph import GraphBuildError

    dev = GgmlDevice("CPU")
    dev._builders = {k: v for k, v in dev._builders.items() if k != "ABS"}
    case = OpCase("ABS", (TensorSpec("f32", (4, 1, 1, 1)),))
    try:
        with pytest.raises(GraphBuildError, match="no constructor for ABS"):
            dev.supports(case)
        with pytest.raises(GraphBuildError, match="no constructor for ABS"):
            dev.run(case, [np.zeros((1, 1, 1, 4), np.float32)])
    finally:
        dev.close()


def test_a_misspelt_parameter_is_an_error() -> None:
    case = OpCase("SCALE", (TensorSpec("f32", (4, 1, 1, 1)),), params=(("s", 2.0), ("bias", 0.0)))
    with pytest.raises(KeyError, match="no parameter 'scale'"):
        case.param("scale")
    assert case.param("scale", 1.0) == 1.0
    bad = OpCase("SCALE", (TensorSpec("f32", (4, 1, 1, 1)),), params=(("s", 2.0), ("bias", 0.0), ("sclae", 1.0)))
    with pytest.raises(ValueError, match="unknown parameter.*sclae"):
        catalogue.evaluate(bad, [np.zeros((1, 1, 1, 4))])
    typed = OpCase("SCALE", (TensorSpec("f32", (4, 1, 1, 1)),), params=(("s", "abc"), ("bias", 0.0)))
    with pytest.raises(ValueError, match="s='abc' should be float"):
        catalogue.evaluate(typed, [np.zeros((1, 1, 1, 4))])


def test_cpu_calibrated_rows_are_the_recorded_set() -> None:
    """The rows carrying calibration=GGML_CPU where they are declared are exactly those listed in
    tests/data/cpu_calibrated_rows.txt (the set the catalogue marked when the list lived beside it)."""
    listed = {line.strip() for line in (DATA / "cpu_calibrated_rows.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    rows = {f"{spec.name}[{key}]": tol for spec in catalogue.OPS.values() for key, tol in spec.tolerance.items()}
    marked = {row_id for row_id, tol in rows.items() if tol.calibration == Calibration.GGML_CPU}
    unknown = sorted(listed - set(rows))
    assert not unknown, f"tests/data/cpu_calibrated_rows.txt names rows the catalogue lacks: {unknown}"
    assert marked == listed, (f"marked but not listed: {sorted(marked - listed)}; listed but not marked: "
                              f"{sorted(listed - marked)} (set calibration=Calibration.GGML_CPU on the row in "
                              "golden/<family>.py, and list it in tests/data/cpu_calibrated_rows.txt)")
    for row_id, tol in rows.items():
        assert catalogue.row(row_id) is tol


@pytest.mark.parametrize(("op", "signature"), ALL_SIGNATURES)
def test_a_records_dtypes_give_back_its_tolerance_row(op: str, signature) -> None:
    """Old results files carry no row id: the report rebuilds it from the op and dtypes as the harness keys it."""
    spec = catalogue.get(op)
    dtypes = {f"src{i}": t for i, t in enumerate(signature.srcs)} | {"dst": signature.dst}
    assert catalogue.row_id(op, dtypes) == f"{op}[{spec.tolerance_key(signature.dst, signature.label())}]"

"""``conform ops`` reads as a table with its tolerance rows; ``--help`` explains every option and its default."""

from __future__ import annotations

import argparse

import pytest

from conformance.cli import build_parser, main
from golden import catalogue


def test_ops_has_a_header_and_each_tolerance_row_with_its_reason(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ops"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("OP "))
    assert header.split()[:3] == ["OP", "FAMILY", "GOLDEN"]
    gelu_quick = lines.index(next(line for line in lines if line.startswith("GELU_QUICK ")))
    rows = {row.split()[0]: row for row in lines[gelu_quick + 1:gelu_quick + 3]}
    spec = catalogue.get("GELU_QUICK")
    for dst, tolerance in spec.tolerance.items():
        assert tolerance.describe()["reason"] in rows[dst]


def test_ops_columns_hold_their_longest_value_and_bounds_read_as_the_reasons_do(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Every op row's GOLDEN column starts where the header's does (a family as long as ``construction``
    pushed it right); a bound of exactly 2^-150 prints as the reasons write it, not as 7.006e-46."""
    assert main(["ops"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("OP "))
    golden_at = header.index("GOLDEN")
    op_rows = [line for line in lines if line.split(" ", 1)[0] in catalogue.OPS]
    assert len(op_rows) == len(catalogue.OPS)
    for row in op_rows:
        name, family = row.split()[:2]
        assert row[golden_at:].split(" ", 1)[0] in ("yes", "NOT"), row
        assert row[golden_at - 1] == " " and family == catalogue.get(name).family, row
    add = lines.index(next(line for line in lines if line.startswith("ADD ")))
    f16 = next(line for line in lines[add + 1:add + 4] if line.split()[0] == "f16")
    assert "atol=2^-150 rtol=2^-24 " in f16 and "e-46" not in f16, f16
    assert not any("e-46" in line or "e-08" in line for line in lines)


def test_ops_json_keeps_the_raw_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["ops", "--json"]) == 0
    add = next(r for r in json.loads(capsys.readouterr().out) if r["op"] == "ADD")
    assert add["tolerance"]["f16"]["atol"] == 2.0**-150 and add["tolerance"]["f16"]["rtol"] == 2.0**-24


@pytest.mark.parametrize(("value", "text"), [
    (2.0**-150, "2^-150"), (3 * 2.0**-24, "3·2^-24"), (-(2.0**-30), "-2^-30"), (2.0**30, "2^30"),
    (0.5, "0.5"), (4.0, "4"), (4e-37, "4e-37"), (5.87747245476067e-39, "5.877e-39"), (0.0, "0"), ("model", "model"),
])
def test_a_bound_reads_as_a_power_of_two_where_it_is_one(value: object, text: str) -> None:
    from conformance.cli.listing import readable_bound

    assert readable_bound(value) == text


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


@pytest.mark.parametrize("command", ["run", "repro", "ops", "devices"])
def test_every_option_has_help(command: str) -> None:
    sub = _subparser(command)
    assert sub.description
    for action in sub._actions:
        assert action.help, f"conform {command}: {action.option_strings or action.dest} has no help text"


@pytest.mark.parametrize(("command", "shown"), [
    ("run", ["(default: ci)", "(default: 120.0)", "(default: 1)", "default: ggml:CPU", "default: conform-out/<time>"]),
    ("repro", ["(default: 120.0)", "(default: 1)", "(default: nothing is written)", "else ggml:CPU"]),
])
def test_help_shows_the_defaults(command: str, shown: list[str]) -> None:
    text = " ".join(_subparser(command).format_help().split())
    for default in shown:
        assert default in text, default

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

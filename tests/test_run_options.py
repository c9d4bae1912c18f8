"""``conform run`` and the pytest plug-in read one option table (conformance/options.py): the same
names, defaults, help and checks, and conform hands each option on to the pytest it starts."""

from __future__ import annotations

from typing import Any

import pytest

from conformance import plugin
from conformance.cli import build_parser
from conformance.options import RUN_OPTIONS, check_run_options


def _plugin_declarations() -> dict[str, dict[str, Any]]:
    declared: dict[str, dict[str, Any]] = {}

    class Group:
        def addoption(self, flag: str, **kwargs: Any) -> None:
            declared[flag] = kwargs

    class Parser:
        def getgroup(self, *args: Any) -> Group:
            return Group()

    plugin.pytest_addoption(Parser())  # type: ignore[arg-type]
    return declared


def test_the_plugin_declares_every_run_option_from_the_table() -> None:
    declared = _plugin_declarations()
    for option in RUN_OPTIONS:
        assert declared[option.pytest_flag]["help"] == option.help
        assert declared[option.pytest_flag].get("type") == option.type


def test_conform_run_declares_every_option_with_the_tables_default() -> None:
    args = build_parser().parse_args(["run"])
    for option in RUN_OPTIONS:
        assert getattr(args, option.dest) == option.declaration()["default"], option.flag


def test_conform_hands_each_given_option_on_under_the_plugins_name() -> None:
    args = build_parser().parse_args(["run", "--op", "MUL", "--op", "ADD", "--profile", "dev", "--threads", "2",
                                      "--case-timeout", "5", "--hypothesis-db", "db"])
    handed = [part for option in RUN_OPTIONS for part in option.pytest_args(getattr(args, option.dest))]
    assert handed == ["--conform-profile", "dev", "--op", "MUL", "--op", "ADD", "--case-timeout", "5.0",
                      "--stage-memory", "2.0", "--threads", "2", "--hypothesis-db", "db"]


@pytest.mark.parametrize("flag, value, words", [("--threads", 0, "--threads"), ("--case-timeout", float("inf"),
                                                "--case-timeout"), ("--op", ["NOT_AN_OP"], "unknown op"),
                                               ("--stage-memory", 0.0, "--stage-memory")])
def test_one_check_for_both(flag: str, value: Any, words: str) -> None:
    defaults = {option.flag: option.declaration()["default"] for option in RUN_OPTIONS} | {flag: value}
    with pytest.raises(ValueError, match=words):
        check_run_options(lambda option: defaults[option.flag])

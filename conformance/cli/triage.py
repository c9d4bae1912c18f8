"""``conform triage``: the subcommand's parser and entry; the work is in :mod:`conformance.triage`."""

from __future__ import annotations

import argparse
from typing import Any

from conformance.cli.common import DefaultsFormatter, Output, UsageError, check_outputs, is_toml


def declare_parser(sub: Any) -> None:
    from conformance.triage import add_parser

    add_parser(sub, DefaultsFormatter)


def cmd_triage(args: argparse.Namespace) -> int:
    from conformance.triage import cmd_triage as run_triage

    # appending TOML to a results file would leave it unreadable; to any other file, it would corrupt it
    check_outputs([Output("--write", args.write, "a TOML file of known-bug entries", is_toml),
                   Output("--out", args.out, folder=True, contents=("triage.md", "triage.json"))], args.results)
    return run_triage(args, UsageError)

"""``conform triage``: the subcommand's parser and entry; the work is in :mod:`conformance.triage`."""

from __future__ import annotations

import argparse
from typing import Any

from conformance.cli.common import DefaultsFormatter, UsageError


def declare_parser(sub: Any) -> None:
    from conformance.triage import add_parser

    add_parser(sub, DefaultsFormatter)


def cmd_triage(args: argparse.Namespace) -> int:
    from conformance.triage import cmd_triage as run_triage

    return run_triage(args, UsageError)

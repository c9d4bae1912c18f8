"""What every subcommand of ``conform`` shares: the one-line usage error, the parser's form, the
options of the one table (``conformance/options.py``) and their checks."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

from conformance.options import OPTIONS_BY_FLAG


class UsageError(Exception):
    """A user mistake: printed as one line, exit code 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line on stderr (not the usage block), exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def device_options(args: argparse.Namespace) -> dict[str, Any]:
    return {"ggml_lib": args.ggml_lib, "threads": getattr(args, "threads", 1)}


def check_numbers(args: argparse.Namespace) -> None:
    from conformance.options import check_case_timeout, check_stage_memory, check_threads

    try:
        check_case_timeout(args.case_timeout)
        check_threads(args.threads)
        if getattr(args, "stage_memory", None) is not None:
            check_stage_memory(args.stage_memory)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if getattr(args, "workers", None) is not None and args.workers < 0:
        raise UsageError(f"--workers must be 0 or more (got {args.workers})")


class DefaultsFormatter(argparse.HelpFormatter):
    """Help that shows each option's default where it has a meaningful one and does not say it already."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (default in (None, False, [], argparse.SUPPRESS) or "default" in text
                or action.option_strings == [] and action.nargs in ("?", "*")):
            return text
        return f"{text} (default: %(default)s)"




def add_parser(sub: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(name, formatter_class=DefaultsFormatter, **kwargs)
    return parser


def declare(parser: argparse.ArgumentParser, flag: str) -> None:
    """An option of the one table (conformance/options.py) on a subcommand."""
    parser.add_argument(flag, **OPTIONS_BY_FLAG[flag].declaration())


def common(parser: argparse.ArgumentParser) -> None:
    declare(parser, "--ggml-lib")


def limits(parser: argparse.ArgumentParser) -> None:
    declare(parser, "--case-timeout")
    declare(parser, "--stage-memory")
    declare(parser, "--threads")

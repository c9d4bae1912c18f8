"""What every subcommand of ``conform`` shares: the one-line usage error, the parser's form, the
options of the one table (``conformance/options.py``) and their checks."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
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


def expectation_paths(values: Sequence[str] | None) -> tuple[str, ...]:
    """--expectations files and $CONFORM_EXPECTATIONS, as the suite reads them (checked: UsageError if bad)."""
    from device.expectation_file import paths_from_env

    check = OPTIONS_BY_FLAG["--expectations"].check
    try:
        if check is not None:
            check(list(values or []))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return (*(values or ()), *paths_from_env())


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




# ---- outputs: the one rule every subcommand's outputs follow --------------------------------------
OUTPUT_RULE = ("no output is ever one of the inputs, and an existing output is replaced only where it is what "
               "that option writes (refused otherwise: one line, exit status 2)")

Path_ = str | os.PathLike[str]


@dataclass(frozen=True)
class Output:
    """One path a subcommand writes: a file, or a folder it writes ``contents`` into.

    ``replaces`` says whether an existing file is this option's own kind (a conform report, a support CSV,
    a TOML file of entries) and may be replaced (or appended to); without it an existing file is refused.
    """

    flag: str
    path: Path_ | None
    # what the option writes, for the message ("a conform HTML report"); without ``replaces``: why it is refused
    kind: str = ""
    replaces: Callable[[Path], bool] | None = None
    folder: bool = False
    contents: Sequence[str] = ()  # a folder's files that the command writes (checked against the inputs)


def check_outputs(outputs: Iterable[Output], inputs: Iterable[Path_ | None]) -> None:
    """Refuse, before any work, an output that would destroy data the user did not ask to replace:
    one of the inputs (however spelt: links, ``..``), another output, a file where a folder goes, or an
    existing file that is not the option's own kind. Raises :class:`UsageError` (one line)."""
    from results.load import ReportInputError, check_outputs_are_not_inputs

    inputs = [path for path in inputs if path is not None]
    given = [o for o in outputs if o.path is not None]
    for output in given:
        path = Path(output.path or "")
        written = [path, *(path / name for name in output.contents)] if output.folder else [path]
        try:
            check_outputs_are_not_inputs(written, inputs)
        except ReportInputError as exc:
            raise UsageError(f"{output.flag} {exc}") from None
        if output.folder:
            if path.exists() and not path.is_dir():
                raise UsageError(f"{output.flag} {output.path}: exists and is not a folder; refusing to write "
                                 "into it (give a new or existing folder)")
            continue
        if path.is_dir() or str(output.path).endswith(os.sep):
            raise UsageError(f"{output.flag} {output.path}: is a directory; give the file's name "
                             f"(e.g. {path / ('report.html' if output.replaces is is_conform_html else 'out')})")
        if path.exists() and output.replaces is None:
            raise UsageError(f"{output.flag} {output.path}: exists; refusing to write to it "
                             f"({output.kind or 'give a new path, or remove it first'})")
        if path.exists() and output.replaces is not None and not _is_kind(path, output.replaces):
            raise UsageError(f"{output.flag} {output.path}: exists and is not {output.kind or 'what it writes'}; "
                             "refusing to write to it (give a new path, or remove it first)")
    try:
        check_outputs_are_not_inputs([o.path for o in given if not o.folder], [])
    except ReportInputError as exc:
        raise UsageError(str(exc)) from None


def _is_kind(path: Path, replaces: Callable[[Path], bool]) -> bool:
    try:
        return replaces(path)
    except (OSError, UnicodeDecodeError, ValueError):
        return False


def _head(path: Path, size: int = 4096) -> str:
    with path.open("rb") as stream:
        return stream.read(size).decode("utf-8", errors="replace")


def is_conform_html(path: Path) -> bool:
    """A report ``conform report`` or ``conform model`` wrote (its title says so)."""
    head = _head(path)
    return head.lstrip().startswith("<!DOCTYPE html>") and (
        "<title>ggml conformance report" in head or "<title>Model tier: node-by-node verdicts" in head)


def is_support_csv(path: Path) -> bool:
    """A support CSV ``conform report --csv`` wrote (its header row)."""
    from reports.csv_export import format_support_csv

    return _head(path).splitlines()[:1] == format_support_csv([]).splitlines() or path.stat().st_size == 0


def is_toml(path: Path) -> bool:
    """A TOML file (known-bug entries are appended to it), or an empty one."""
    import tomllib

    tomllib.loads(path.read_text(encoding="utf-8"))
    return True


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

"""Checks of the run options that ``conform`` and the pytest plug-in share, so both refuse the same
input with the same one-line reason (a :class:`ValueError` whose text is that line).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# A case that has not answered in a day is hung; a bigger number is a typo (and inf overflows the
# worker's poll()).
MAX_CASE_TIMEOUT_S = 86_400.0
# The memory a large case's golden or verdict may allocate (conformance/limits.py); below a tenth of a
# GiB hardly any large case fits, above 1 TiB is a typo.
MIN_STAGE_MEMORY_GIB = 0.1
MAX_STAGE_MEMORY_GIB = 1024.0
# More CPU threads than this only oversubscribes the host (one worker reached 1,088 threads on
# --threads 100000 and no case finished).
THREADS_PER_CORE = 4
# conform run hands pytest the command line the user typed in this variable (the results header's `command`)
COMMAND_ENV = "CONFORM_COMMAND"


def max_threads() -> int:
    return THREADS_PER_CORE * (os.cpu_count() or 1)


def check_case_timeout(seconds: float) -> float:
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_CASE_TIMEOUT_S):
        raise ValueError(f"--case-timeout must be a number of seconds above 0 and at most {MAX_CASE_TIMEOUT_S:g} "
                         f"(got {seconds:g})")
    return seconds


def check_stage_memory(gib: float) -> float:
    if not (math.isfinite(gib) and MIN_STAGE_MEMORY_GIB <= gib <= MAX_STAGE_MEMORY_GIB):
        raise ValueError(f"--stage-memory must be a number of GiB from {MIN_STAGE_MEMORY_GIB:g} to "
                         f"{MAX_STAGE_MEMORY_GIB:g} (got {gib:g})")
    return gib


def check_known_bug_timeout(seconds: float | None) -> float | None:
    """``--known-bug-timeout``: none (follow --case-timeout), or a limit like --case-timeout's."""
    if seconds is None:
        return None
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_CASE_TIMEOUT_S):
        raise ValueError(f"--known-bug-timeout must be a number of seconds above 0 and at most "
                         f"{MAX_CASE_TIMEOUT_S:g} (got {seconds:g})")
    return seconds


def check_threads(threads: int) -> int:
    limit = max_threads()
    if not 1 <= threads <= limit:
        raise ValueError(f"--threads must be between 1 and {limit} ({THREADS_PER_CORE} per CPU core here; "
                         f"got {threads})")
    return threads


def parse_ops(values: list[str] | None) -> frozenset[str]:
    """``--op`` values (repeatable, comma-separated, any case) as catalogue op names or graph pattern
    names (upper case); ValueError for a name that is neither. Empty: no selection by op."""
    from golden import catalogue
    from golden.graphs.registry import patterns

    names = [part.strip().upper() for value in values or [] for part in value.split(",") if part.strip()]
    known_patterns = {name.upper() for name in patterns()}
    unknown = [name for name in names if name not in catalogue.OPS and name not in known_patterns]
    if unknown:
        raise ValueError(f"--op: unknown op(s) {', '.join(unknown)} "
                         "(conform ops lists the ops, golden/graphs/patterns/ the graph patterns)")
    return frozenset(names)


# ---- the option table ----------------------------------------------------------------------------

PROFILES = ("dev", "ci", "nightly")
# ci-seeded: the ci profile with randomness left on (the seed-stability checks); ci-detect and dev-detect:
# those profiles' draws without shrinking a failure found (the planted-fault checks ask only whether a
# fault is caught)
INTERNAL_PROFILES = ("ci-seeded", "ci-detect", "dev-detect")


@dataclass(frozen=True)
class RunOption:
    """One option of a conformance run, as both ``conform run`` and the pytest plug-in declare it.

    ``conform run`` passes each on to the pytest it starts as :meth:`pytest_args`; the plug-in checks
    the same values with the same :attr:`check` (a ``ValueError`` whose text is the one-line reason).
    """

    flag: str  # conform's spelling
    help: str
    default: Any = None
    type: Callable[[str], Any] | None = None
    metavar: str | None = None
    repeatable: bool = False
    choices: tuple[str, ...] | None = None
    check: Callable[[Any], object] | None = None
    plugin_flag: str = ""  # the plug-in's spelling where it differs (pytest has its own --profile meaning)
    plugin_default: Any = "same"  # plain pytest's default where conform's differs
    plugin_choices: tuple[str, ...] = ()  # choices only the plug-in takes

    @property
    def pytest_flag(self) -> str:
        return self.plugin_flag or self.flag

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def pytest_dest(self) -> str:
        return self.pytest_flag.lstrip("-").replace("-", "_")

    def declaration(self, *, plugin: bool = False) -> dict[str, Any]:
        """Keyword arguments for ``argparse``'s ``add_argument`` and pytest's ``addoption`` alike."""
        default = self.plugin_default if plugin and self.plugin_default != "same" else self.default
        kwargs: dict[str, Any] = {"help": self.help, "default": [] if self.repeatable else default}
        if self.repeatable:
            kwargs["action"] = "append"
        if self.type is not None:
            kwargs["type"] = self.type
        if self.metavar is not None:
            kwargs["metavar"] = self.metavar
        if self.choices is not None:
            kwargs["choices"] = list(self.choices) + (list(self.plugin_choices) if plugin else [])
        return kwargs

    def pytest_args(self, value: Any) -> list[str]:
        """The plug-in's arguments that hand ``value`` on (nothing for an unset option)."""
        if value is None or value == []:
            return []
        values = value if self.repeatable else [value]
        return [part for v in values for part in (self.pytest_flag, str(v))]


def _check_expectations(values: list[str] | None) -> object:
    from device.expectation_file import load, paths_from_env

    return load([*(values or []), *paths_from_env()])


def _check_op_values(values: list[str] | None) -> object:
    return parse_ops(values)


def _check_shard(text: str | None) -> object:
    from conformance.shard import parse_shard

    return parse_shard(text)


def _check_from_model(run: str | None) -> object:
    from conformance.model_cases import check_from_model

    return check_from_model(run)


RUN_OPTIONS: tuple[RunOption, ...] = (
    RunOption("--device", "golden, ggml:NAME, ggml:PATTERN*, acl:N or module:factory (repeatable; default: "
              "ggml:CPU)", repeatable=True, metavar="SPEC"),
    RunOption("--ggml-lib", "ggml build directory (default: $GGML_LIB_DIR, else the libggml-python wheel)",
              metavar="DIR"),
    RunOption("--profile", "hypothesis profile: dev 12 examples per test, ci 30 (derandomized), nightly 400",
              default="ci", choices=PROFILES, plugin_flag="--conform-profile", plugin_choices=INTERNAL_PROFILES,
              plugin_default=None),  # plain pytest: $HYPOTHESIS_PROFILE, else dev
    RunOption("--op", "only the tests of these ops, exactly (MUL, not MUL_MAT; repeatable or comma-separated)",
              repeatable=True, metavar="OP", check=_check_op_values),
    RunOption("--case-timeout", f"seconds a device call may take before the case is a TIMEOUT and its worker is "
              f"replaced (above 0, at most {MAX_CASE_TIMEOUT_S:g})", default=120.0, type=float, metavar="S",
              check=check_case_timeout),
    RunOption("--stage-memory", "GiB that the golden, and then the verdict, of a large case (2^20+ input elements, "
              "run in a child process) may allocate; past it the case is an ERROR record whose extra.ran_out names "
              f"the stage ({MIN_STAGE_MEMORY_GIB:g} to {MAX_STAGE_MEMORY_GIB:g})", default=2.0, type=float,
              metavar="GIB", check=check_stage_memory),
    RunOption("--known-bug-timeout", "a shorter limit for cases a known bug says may corrupt the process and hang "
              "(default: --case-timeout; each record's time_limit says which applied)", type=float, metavar="S",
              check=check_known_bug_timeout),
    RunOption("--expectations", "known-bug entries in TOML (a file, or a folder of *.toml) to load besides the "
              "in-repo lists, e.g. a vendor's list kept in its own repository; repeatable; also "
              "$CONFORM_EXPECTATIONS", repeatable=True, metavar="FILE_OR_DIR", check=_check_expectations),
    RunOption("--threads", f"CPU backend threads per worker (1 to {THREADS_PER_CORE} per CPU core; results do "
              "not depend on it)", default=1, type=int, metavar="N", check=check_threads),
    RunOption("--hypothesis-db", "keep hypothesis' example database here (failures replay first next time)",
              metavar="DIR"),
    RunOption("--shard", "run only shard K of N of the selection (K from 1 to N): each test belongs to one shard by a "
              "hash of its id without the device, the same every night; the results header records the shard",
              metavar="K/N", check=_check_shard),
    RunOption("--from-model", "also draw op cases around each distinct node signature of a conform model run "
              "(its output folder, model.json or node-cases.txt): the signature first, then other data and "
              "neighbouring sizes (tests test_from_model[...])", metavar="RUN", type=os.path.abspath,
              check=_check_from_model),
)
OPTIONS_BY_FLAG = {option.flag: option for option in RUN_OPTIONS}


def check_run_options(value_of: Callable[[RunOption], Any]) -> None:
    """Check every option that has a check (ValueError with the one-line reason)."""
    for option in RUN_OPTIONS:
        if option.check is not None:
            option.check(value_of(option))

"""Known failures: a TOML file of patterns that mark failing cases as expected.

An expected failure is shown apart from new failures and is never counted as a pass. Each entry::

    [[expectation]]
    pattern = "MUL_MAT(type0=q4_0,*"   # fnmatch on test_id or case_id (or the exact id)
    reason = "CANN Q4_0 matmul loses precision for ne0 > 4096"
    issue = "https://github.com/ggml-org/llama.cpp/issues/00000"   # optional
    category = "backend-bug"            # backend-bug | unsupported | harness
    device = "ggml:CANN*"              # optional fnmatch on the device spec

An entry that matches no failing (or unsupported) case is *stale*: the failure is gone, or the
pattern is wrong. Both are worth a look, so stale entries are listed in the report.
"""

from __future__ import annotations

import fnmatch
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from results.load import ReportInputError

CATEGORIES = ("backend-bug", "unsupported", "harness")
ENTRY_KEYS = {"pattern", "reason", "issue", "category", "device"}
TABLE_NAME = "expectation"


class ExpectationsError(ReportInputError):
    """The expectations file is missing, unreadable or malformed; the message says where."""


@dataclass
class Expectation:
    pattern: str
    reason: str
    category: str
    issue: str | None = None
    device: str | None = None
    index: int = 0  # position in the file, for messages
    matched_failures: int = 0  # fail/crash/timeout/error records it explained
    matched_unsupported: int = 0  # declined records it matched (documents why, e.g. category "unsupported")
    matched_passing: int = 0  # passing records it matches (the failure may be fixed)
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)
    _device_regex: re.Pattern[str] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Compile once: fnmatch per call re-checks its cache, which shows up on 100k records.
        self._regex = re.compile(fnmatch.translate(self.pattern))
        self._device_regex = re.compile(fnmatch.translate(self.device)) if self.device else None

    def matches(self, case: dict[str, Any]) -> bool:
        if self._device_regex is not None and not self._device_regex.match(str(case.get("device", ""))):
            return False
        # Ids contain "[...]", which fnmatch reads as a character class: accept the exact id too.
        for identity in (case.get("case_id"), case.get("test_id")):
            if isinstance(identity, str) and (identity == self.pattern or self._matches_pattern(identity)):
                return True
        return False

    def _matches_pattern(self, identity: str) -> bool:
        return self._regex is not None and self._regex.match(identity) is not None

    @property
    def is_stale(self) -> bool:
        return self.matched_failures == 0 and self.matched_unsupported == 0

    @property
    def issue_is_link(self) -> bool:
        return self.issue is not None and self.issue.startswith(("https://", "http://"))


def load_expectations(path: str | os.PathLike[str]) -> list[Expectation]:
    """Parse an expectations file; raises :class:`ExpectationsError` with a one-line reason."""
    path = Path(path)
    try:
        with path.open("rb") as stream:
            document = tomllib.load(stream)
    except FileNotFoundError:
        raise ExpectationsError(f"{path}: expectations file not found") from None
    except OSError as exc:
        raise ExpectationsError(f"{path}: cannot read expectations file ({exc.strerror})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ExpectationsError(f"{path}: not valid TOML ({exc})") from None

    unknown_tables = set(document) - {TABLE_NAME}
    if unknown_tables:
        raise ExpectationsError(
            f"{path}: unknown top-level key(s) {', '.join(sorted(unknown_tables))}; "
            f"entries go in [[{TABLE_NAME}]] tables"
        )
    entries = document.get(TABLE_NAME, [])
    if not isinstance(entries, list):
        raise ExpectationsError(f"{path}: '{TABLE_NAME}' must be an array of tables ([[{TABLE_NAME}]])")
    return [_parse_entry(path, number, entry) for number, entry in enumerate(entries, start=1)]


def _parse_entry(path: Path, number: int, entry: Any) -> Expectation:
    where = f"{path}: [[{TABLE_NAME}]] #{number}"
    if not isinstance(entry, dict):
        raise ExpectationsError(f"{where}: must be a table")
    unknown = set(entry) - ENTRY_KEYS
    if unknown:
        raise ExpectationsError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    for key in ("pattern", "reason", "category"):
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise ExpectationsError(f"{where}: '{key}' is required and must be a non-empty string")
    for key in ("issue", "device"):
        if key in entry and not isinstance(entry[key], str):
            raise ExpectationsError(f"{where}: '{key}' must be a string")
    if entry["category"] not in CATEGORIES:
        raise ExpectationsError(
            f"{where}: category {entry['category']!r} is not one of {', '.join(CATEGORIES)}"
        )
    return Expectation(
        pattern=entry["pattern"],
        reason=entry["reason"],
        category=entry["category"],
        issue=entry.get("issue"),
        device=entry.get("device"),
        index=number,
    )

"""How pytest ended each writing process, from the footers: no report is green on a failed run.

A case record is written for every case the harness judged. A test can fail without one: a
plug-in whose ``run()`` returns something the harness cannot store, a device that fails to open,
an error in a fixture or teardown. pytest counts those, so the footer carries pytest's exit status
and, from the plug-in, its failure counts:

* ``exitstatus``: 0 all passed, 1 some failed, 5 nothing collected (2–4 write no footer);
* ``pytest_failed``, ``pytest_errors``: failed tests, and errors in setup or teardown;
* ``pytest_failed_tests``: optional, ``[{"test_id", "when", "message"}]``, which ones.

The footer's ``devices_end`` says how much each device process grew during the run
(``worker_rss_growth_max``) and how much device memory was not given back (``memory_used_growth``);
growth beyond :data:`MEMORY_GROWTH_FLAG` is flagged (``memory_warnings``): a leak passes every case
until the device runs out.

A failing test with no failing record of its own is an *unrecorded failure*: the report counts it
and lists it. Failures of a known bug the harness matched (``expected`` on the record) do not fail
their test, so they do not account for one either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from results.load import ResultsFile

EXIT_OK = 0
EXIT_TESTS_FAILED = 1
EXIT_NO_TESTS = 5
# Growth of a device process' RSS, or of device memory in use, over a run that is worth a look: far
# above allocator pools and caches warming up, far below a leak of one buffer per case.
MEMORY_GROWTH_FLAG = 256 * 2**20
EXIT_MEANINGS = {0: "all tests passed", 1: "some tests failed", 2: "interrupted", 3: "internal error",
                 4: "usage error", 5: "no tests collected"}


@dataclass
class RunStatus:
    exitstatuses: list[int | None] = field(default_factory=list)  # one per footer, None where missing
    pytest_failed: int | None = None  # summed over the footers that carry it
    pytest_errors: int | None = None
    unrecorded: int = 0  # pytest failures that no failing case record accounts for (at least)
    unrecorded_tests: list[dict[str, str]] = field(default_factory=list)  # the ones the footer names
    memory_warnings: list[str] = field(default_factory=list)  # devices whose memory grew past the flag

    @property
    def exit_known(self) -> bool:
        return bool(self.exitstatuses) and all(code is not None for code in self.exitstatuses)

    @property
    def worst_exit(self) -> int | None:
        codes = [code for code in self.exitstatuses if code is not None]
        if not codes:
            return None
        # anything but 0/1/5 is worst, then "nothing collected", then "some failed"
        return max(codes, key=lambda code: (code not in (0, 1, 5), code == 5, code == 1))

    @property
    def clean(self) -> bool:
        """pytest's own verdict agrees with the records: no failure beyond what the records show."""
        return self.exit_known and all(code in (EXIT_OK, EXIT_TESTS_FAILED) for code in self.exitstatuses) \
            and self.unrecorded == 0

    @property
    def alarming(self) -> bool:
        """The run failed in a way the case records do not show."""
        odd_exit = any(code not in (None, EXIT_OK, EXIT_TESTS_FAILED, EXIT_NO_TESTS) for code in self.exitstatuses)
        return odd_exit or self.unrecorded > 0

    def problems(self) -> list[str]:
        """One sentence per thing the reader must know about how the run ended (empty when clean)."""
        out: list[str] = []
        worst = self.worst_exit
        if self.exitstatuses and not self.exit_known:
            out.append("the footer does not record pytest's exit status, so the run cannot be confirmed clean")
        if worst is not None and worst not in (EXIT_OK, EXIT_TESTS_FAILED):
            meaning = EXIT_MEANINGS.get(worst, "unknown")
            out.append(f"pytest ended with exit status {worst} ({meaning})")
        if self.unrecorded:
            counted = ""
            if self.pytest_failed is not None or self.pytest_errors is not None:
                counted = (f" (pytest counted {self.pytest_failed or 0} failed and {self.pytest_errors or 0} "
                           "errored tests)")
            out.append(f"at least {self.unrecorded} failing test(s) left no failing case record{counted}; "
                       "their results are missing from the counts below")
        return out


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _mib(value: int) -> str:
    return f"{value / 2**20:,.0f} MiB"


def memory_warnings(footer: dict[str, Any]) -> list[str]:
    """One sentence per device of a footer whose process or device memory grew past the flag."""
    out: list[str] = []
    for entry in footer.get("devices_end") or []:
        if not isinstance(entry, dict):
            continue
        spec, worker = entry.get("spec", "?"), footer.get("worker", "?")
        rss = _int(entry.get("worker_rss_growth_max"))
        if rss is not None and rss > MEMORY_GROWTH_FLAG:
            start = _int(entry.get("worker_rss_start"))
            since = f" from {_mib(start)} once the device opened" if start is not None else ""
            out.append(f"{spec} (worker {worker}): the device process grew by {_mib(rss)}{since}; "
                       "a leak in the device or its plug-in?")
        used = _int(entry.get("memory_used_growth"))
        if used is not None and used > MEMORY_GROWTH_FLAG:
            out.append(f"{spec} (worker {worker}): {_mib(used)} of device memory in use at the end that was "
                       "free at the start; a leak?")
    return out


def run_status(results: ResultsFile, failing_tests: set[str]) -> RunStatus:
    """Read the footers of one results file; ``failing_tests`` are the test ids with a failing case
    record that should have failed their test (not a harness-matched known bug)."""
    status = RunStatus()
    listed: list[dict[str, str]] = []
    for footer in results.footers:
        status.exitstatuses.append(_int(footer.get("exitstatus")))
        status.memory_warnings += memory_warnings(footer)
        for name in ("pytest_failed", "pytest_errors"):
            count = _int(footer.get(name))
            if count is not None:
                setattr(status, name, (getattr(status, name) or 0) + count)
        tests = footer.get("pytest_failed_tests")
        if isinstance(tests, list):
            for entry in tests:
                if isinstance(entry, dict) and isinstance(entry.get("test_id"), str):
                    listed.append({"test_id": entry["test_id"], "when": str(entry.get("when") or ""),
                                   "message": str(entry.get("message") or "")})
    status.unrecorded_tests = [entry for entry in listed if entry["test_id"] not in failing_tests]
    if status.pytest_failed is not None or status.pytest_errors is not None:
        counted = (status.pytest_failed or 0) + (status.pytest_errors or 0)
        status.unrecorded = max(len(status.unrecorded_tests), counted - len(failing_tests))
    elif listed:
        status.unrecorded = len(status.unrecorded_tests)
    elif EXIT_TESTS_FAILED in status.exitstatuses and not failing_tests:
        status.unrecorded = 1  # pytest failed, yet no record did: at least one failure is missing
    return status

"""JUnit XML that CI dashboards read right: an interrupted run counts as an error, and no file is half written.

pytest's junitxml counts only the tests that ended; a run stopped half way would read as green
(``failures="0" errors="0"``). Each interrupted file gets one more test case, ``conform.interrupted``,
with an ``<error>`` that says so, counted in its suite's ``errors`` and ``tests``. Files are written
whole (to a temporary name, then renamed), so a reader finds the complete file or none.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

INTERRUPTED_CLASS = "conform"
INTERRUPTED_NAME = "interrupted"


def is_complete(path: str | os.PathLike[str]) -> bool:
    """The file is there and parses as JUnit XML (a ``testsuites`` or ``testsuite`` root)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return False
    return root.tag in ("testsuites", "testsuite")


def _interruption_case(reason: str) -> ET.Element:
    case = ET.Element("testcase", classname=INTERRUPTED_CLASS, name=INTERRUPTED_NAME, time="0.000")
    error = ET.SubElement(case, "error", message=reason)
    error.text = f"{reason}\nThe tests that did not end are not in this file: the results are partial."
    return case


def _count_up(suite: ET.Element, attribute: str) -> None:
    try:
        suite.set(attribute, str(int(suite.get(attribute, "0")) + 1))
    except ValueError:  # not a number: leave the attribute, the test case still counts for readers that count
        pass


def _write_whole(root: ET.Element, path: Path) -> None:
    """``path`` holds the whole document, or what it held before (a temporary name, then a rename)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as out:
            out.write('<?xml version="1.0" encoding="utf-8"?>')
            out.write(ET.tostring(root, encoding="unicode"))
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def mark_interrupted(path: str | os.PathLike[str], reason: str) -> None:
    """Add the ``conform.interrupted`` error case to the first test suite of ``path``, counted in its
    ``errors`` and ``tests``, in place of any nameless test case; the file is rewritten whole.
    ``path`` must be complete (see is_complete)."""
    path = Path(path)
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:  # an empty <testsuites>: give it a suite to hold the case
        suite = ET.SubElement(root, "testsuite", name="pytest", errors="0", failures="0", skipped="0", tests="0")
    for stub in [c for c in suite.findall("testcase") if c.get("name") is None]:
        suite.remove(stub)  # pytest's nameless element for the test the interruption cut short (counted nowhere)
    suite.append(_interruption_case(reason))
    _count_up(suite, "errors")
    _count_up(suite, "tests")
    _write_whole(root, path)


def write_interrupted_only(path: str | os.PathLike[str], reason: str) -> None:
    """A JUnit file of one error case: for a run whose test process ended before it wrote its own."""
    root = ET.Element("testsuites", name="pytest tests")
    suite = ET.SubElement(root, "testsuite", name="pytest", errors="1", failures="0", skipped="0", tests="1")
    suite.append(_interruption_case(reason))
    _write_whole(root, Path(path))


def errors_and_failures(path: str | os.PathLike[str]) -> tuple[int, int]:
    """The ``errors`` and ``failures`` counts summed over the file's test suites."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    return (sum(int(s.get("errors", "0")) for s in suites), sum(int(s.get("failures", "0")) for s in suites))

"""Run order of the harness's own tests: the longest first, so that under pytest-xdist the short ones
fill in around them instead of one long test running alone at the end of the run."""

from __future__ import annotations

import pytest

# whole ci-size suite runs in one process each (about 90 s of one core apiece on 2026-12-04)
LONGEST = ("tests/test_seed_stability.py",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest modules, then the modules with tests marked slow, then the rest; a module's tests
    stay together and in their order (its module-scoped fixtures are set up once)."""
    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    with_slow = {module(item) for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: (module(item) not in LONGEST, module(item) not in with_slow))

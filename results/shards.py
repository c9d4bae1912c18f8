"""Which shards of a sharded selection a set of results files holds (``--shard K/N``).

Each writing process of a sharded run puts ``shard {index, count, tests, selected, selection}`` in its
header (``selection`` fingerprints the whole selection's test keys, so the shards of one night's
selection are told apart from another's). Merging the files of N hosts is complete only when every
shard 1..N of each selection is there; a missing one is a host that did not report, and its tests
are neither passed nor failed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from results.load import ResultsFile


@dataclass(frozen=True)
class ShardSet:
    """The shards of one selection found in the inputs."""

    selection: str  # the selection's fingerprint
    count: int  # N of K/N
    selected: int  # tests in the whole selection
    tests_by_shard: dict[int, int]  # shard K present -> the tests it holds

    @property
    def missing(self) -> tuple[int, ...]:
        return tuple(index for index in range(1, self.count + 1) if index not in self.tests_by_shard)

    @property
    def tests_present(self) -> int:
        return sum(self.tests_by_shard.values())

    def describe_gap(self) -> str | None:
        """One line naming the missing shards, or None when all are there."""
        if not self.missing:
            return None
        names = ", ".join(f"{index}/{self.count}" for index in self.missing)
        absent = self.selected - self.tests_present
        return (f"shard{'s' if len(self.missing) > 1 else ''} {names} of selection {self.selection} "
                f"{'are' if len(self.missing) > 1 else 'is'} missing: {absent} of its {self.selected} tests "
                "have no results")


def shard_sets(files: Iterable[ResultsFile]) -> list[ShardSet]:
    """The sharded selections in ``files`` (headers without a shard are unsharded runs: not listed)."""
    found: dict[tuple[str, int], tuple[int, dict[int, int]]] = {}
    for results in files:
        for header in results.headers:
            shard = header.get("shard")
            if not isinstance(shard, dict):
                continue
            try:
                key = (str(shard["selection"]), int(shard["count"]))
                index, tests, selected = int(shard["index"]), int(shard["tests"]), int(shard["selected"])
            except (KeyError, TypeError, ValueError):
                continue  # a header from a writer that recorded less: nothing to check it against
            _, by_index = found.setdefault(key, (selected, {}))
            # every worker process of one shard writes the same shard entry; count it once
            by_index[index] = tests
    return [ShardSet(selection=selection, count=count, selected=selected, tests_by_shard=dict(sorted(by_index.items())))
            for (selection, count), (selected, by_index) in sorted(found.items())]


def missing_shard_reasons(files: Iterable[ResultsFile]) -> list[str]:
    """One line per sharded selection that lacks a shard (empty when every shard is present)."""
    return [gap for gap in (shard_set.describe_gap() for shard_set in shard_sets(files)) if gap]

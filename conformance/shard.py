"""``--shard K/N``: one suite spread over N hosts, each running a fixed part of it.

A test belongs to shard ``hash(key) mod N`` (plus one), where the key is its pytest node id with the
path taken from the ``conformance`` package (the same wherever the package is installed) and without
the device parameter the plug-in adds: the same test lands in the same shard every night, whichever
devices a host runs it on and whatever else the selection holds. The hash is SHA-256, not Python's
``hash()``, which changes with every process.

Each shard's results header records which shard it is, how many tests of the selection it holds, and
a fingerprint of the whole selection, so that shards of one selection can be told apart from another's
(``conform report`` names the shards missing from a merge: ``results/shards.py``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

# More shards than this is a typo (thousands of hosts for one suite of a few thousand tests).
MAX_SHARDS = 10_000
_SHARD_TEXT = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")
_SUITE_ROOT = Path(__file__).resolve().parent  # the conformance package


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (1-based, as typed) of ``count``."""

    index: int
    count: int

    @property
    def text(self) -> str:
        return f"{self.index}/{self.count}"

    def holds(self, key: str) -> bool:
        return shard_of(key, self.count) == self.index


def parse_shard(text: str | None) -> Shard | None:
    """``K/N`` with 1 <= K <= N (None: no sharding); ValueError with the one-line reason otherwise."""
    if text is None:
        return None
    match = _SHARD_TEXT.fullmatch(str(text))
    if not match:
        raise ValueError(f"--shard takes K/N, shard K of N counted from 1, e.g. --shard 2/4 (got {text!r})")
    index, count = int(match.group(1)), int(match.group(2))
    if not 1 <= count <= MAX_SHARDS:
        raise ValueError(f"--shard {text}: the number of shards must be from 1 to {MAX_SHARDS}")
    if not 1 <= index <= count:
        raise ValueError(f"--shard {text}: the shard must be from 1 to {count} (shards count from 1)")
    return Shard(index, count)


def shard_of(key: str, count: int) -> int:
    """The shard (1-based) that holds the test with this key, of ``count``."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count + 1


def shard_key(nodeid: str, path: Path | None, device_ids: Sequence[str]) -> str:
    """The node id a test is sharded by: its path from the conformance package (where it is inside it)
    and no trailing device parameter (one of ``device_ids``)."""
    name = nodeid.split("::", 1)[1] if "::" in nodeid else ""
    file_part = nodeid.split("::", 1)[0]
    if path is not None:
        try:
            file_part = "conformance/" + Path(path).resolve().relative_to(_SUITE_ROOT).as_posix()
        except ValueError:  # a test outside the suite (the harness's own tests): its node id as pytest has it
            pass
    for device in device_ids:
        if name.endswith(f"-{device}]"):
            name = name[: -len(device) - 2] + "]"
            break
        if name.endswith(f"[{device}]"):
            name = name[: -len(device) - 2]
            break
    return f"{file_part}::{name}" if name else file_part


def selection_fingerprint(keys: Iterable[str]) -> str:
    """A short digest of the whole selection's test keys: shards of one selection share it."""
    text = "\n".join(sorted(set(keys)))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]

"""Known kernel bugs of ggml's CPU backend (``ggml:CPU``), per release; see :mod:`device.known_bugs`."""

from __future__ import annotations

from device.known_bugs import KnownBug

BUGS: list[KnownBug] = []

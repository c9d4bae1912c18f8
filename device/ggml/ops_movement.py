"""ggml constructors for the movement ops (see golden/catalogue.py for the list)."""

from __future__ import annotations

from device.ggml.graph import Builder

BUILDERS: dict[str, Builder] = {}

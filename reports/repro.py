"""Repro lines that work when pasted into a shell anywhere.

The harness writes ``conform repro '<case id>' --device SPEC [--ggml-lib DIR]``. Two things make
such a line fail outside the directory the run started in: a plug-in device
(``package.module:factory``) is importable there only because pytest put that directory on
``sys.path``, and a relative ``--ggml-lib`` names a folder relative to it. Where the results say
where those live (the header's ``cwd``; a device inventory's ``import_root``), the report prefixes
the line with ``cd`` and ``PYTHONPATH`` so it runs from anywhere.
"""

from __future__ import annotations

import os
import shlex
from typing import Any

BUILTIN_KINDS = ("ggml", "acl")


def is_plugin_spec(spec: str) -> bool:
    """``mypkg.mydevice:factory`` is a plug-in; ``ggml:CPU``, ``acl:0`` and ``golden`` are built in."""
    if ":" not in spec:
        return False
    return spec.split(":", 1)[0] not in BUILTIN_KINDS


def header_inventory(header: dict[str, Any] | None, spec: str) -> dict[str, Any]:
    """The header's device entry for ``spec`` (the record's own device), or {}."""
    for inventory in (header or {}).get("devices") or []:
        if isinstance(inventory, dict) and inventory.get("spec") == spec:
            return inventory
    return {}


def _relative_ggml_lib(words: list[str]) -> bool:
    for index, word in enumerate(words):
        if word == "--ggml-lib" and index + 1 < len(words):
            return not os.path.isabs(words[index + 1])
        if word.startswith("--ggml-lib="):
            return not os.path.isabs(word.split("=", 1)[1])
    return False


def pasteable_repro(repro: str, device: str, header: dict[str, Any] | None,
                    inventory: dict[str, Any] | None) -> tuple[str, str]:
    """The repro line to show, and a note when it may still depend on where it is run from.

    ``inventory`` is the header's entry for this record's device (matched by the record's own
    ``device``), ``header`` the header of the process that wrote the record.
    """
    if not repro or not repro.startswith(("conform ", "pytest ")):
        return repro, ""
    try:
        words = shlex.split(repro, comments=True)
    except ValueError:
        return repro, ""
    plugin = is_plugin_spec(device)
    # a relative --ggml-lib, or pytest given a test file relative to the checkout (set/get round trips)
    relative_lib = _relative_ggml_lib(words) or (
        words[0] == "pytest" and len(words) > 1 and words[1].endswith(".py") and not os.path.isabs(words[1]))
    if not plugin and not relative_lib:
        return repro, ""
    header = header or {}
    cwd = header.get("cwd") if isinstance(header.get("cwd"), str) and os.path.isabs(header["cwd"]) else None
    root = (inventory or {}).get("import_root")
    root = root if isinstance(root, str) and os.path.isabs(root) else None
    prefix: list[str] = []
    if cwd and (relative_lib or (plugin and not root)):
        prefix.append(f"cd {shlex.quote(cwd)} &&")
    if plugin:
        where = root or cwd
        if where is None:
            module = device.split(":", 1)[0]
            return repro, (f"{module} must be importable: run this from the directory the run started in, "
                           "or put that directory on PYTHONPATH")
        prefix.append(f"PYTHONPATH={shlex.quote(where)}")
    if relative_lib and not cwd:
        return " ".join([*prefix, repro]), "paths in this line are relative to the directory the run started in"
    return " ".join([*prefix, repro]), ""

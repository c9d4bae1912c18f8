"""Which llama.cpp build a ggml library folder comes from, where it can be known.

Several releases report one ``ggml_version()``: node-llama-cpp 3.16.0, 3.16.2, 3.17.1 and 3.18.1 all say 0.9.7
and are llama.cpp b8095, b8121, b8179 and b8390. What tells them apart is the build tag, and a folder says it in
one of two ways:

* the libraries' file names: node-llama-cpp ships ``libggml.vulkan.b8121.so`` and ``libllama.vulkan.b8121.so``
  (``v0.5.0`` in place of ``b8121`` for its own later tags);
* ``_nlcBuildMetadata.json``, which node-llama-cpp's platform packages ship beside the binaries
  (``{"buildOptions": {"llamaCpp": {"repo": "ggml-org/llama.cpp", "release": "b8121"}}}``).

A user may also declare it (``CONFORM_LLAMA_BUILD=b8179``, for a library built from a llama.cpp tree). When
the sources that speak disagree the build is unknown (None), never a guess: an entry keyed on a build range
must not match a build it was not shown for.

Order: llama.cpp's ``bNNNN`` numbers in order, then node-llama-cpp's ``vX.Y.Z`` tags (which came after them:
3.20.0 is b10361, 3.21.1 v0.4.0, 3.22.1 v0.5.0).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

BUILD_TAG = re.compile(r"^(b\d+|v\d+(?:\.\d+)*)$")
# a build tag in a library's file name: libggml.vulkan.b7836.so, libllama.vulkan.v0.5.0.so
BUILD_IN_NAME = re.compile(r"^lib(?:ggml|llama)\.(?:[A-Za-z0-9_-]+\.)?(b\d+|v\d+(?:\.\d+)*)\.so$")
METADATA_FILE = "_nlcBuildMetadata.json"  # node-llama-cpp's build options, beside the binaries
ENV_VAR = "CONFORM_LLAMA_BUILD"  # the user's word for a folder that does not say it


def is_build_tag(text: str) -> bool:
    return bool(BUILD_TAG.match(text))


def build_key(tag: str) -> tuple[int, tuple[int, ...]]:
    """llama.cpp's bNNNN numbers in order; node-llama-cpp's own vX.Y.Z tags (which came after them) next;
    anything else first."""
    if not is_build_tag(tag):
        return -1, ()
    if tag.startswith("b"):
        return 0, (int(tag[1:]),)
    return 1, tuple(int(p) for p in tag[1:].split("."))


def tags_in_names(folder: Path) -> set[str]:
    """The build tags the libraries' file names carry (libggml.vulkan.b7836.so)."""
    return {m.group(1) for p in folder.glob("lib*.so") if (m := BUILD_IN_NAME.match(p.name))}


def metadata_tag(folder: Path) -> str:
    """The llama.cpp release node-llama-cpp's ``_nlcBuildMetadata.json`` names, or "" (no file, unreadable, or
    not a build tag)."""
    try:
        data = json.loads((folder / METADATA_FILE).read_text(encoding="utf-8"))
        release = data["buildOptions"]["llamaCpp"]["release"]
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    return release if isinstance(release, str) and is_build_tag(release) else ""


@dataclass(frozen=True)
class FolderBuild:
    """The build a folder comes from (None: unknown) and what said so, or why it is unknown."""

    tag: str | None
    source: str  # "file names", METADATA_FILE, ENV_VAR; "" when unknown
    conflict: str = ""  # the sources disagreed: what each said

    def record(self) -> dict[str, str | None]:
        """What the results header records (the device inventory's ``llama_build`` fields)."""
        out: dict[str, str | None] = {"llama_build": self.tag, "llama_build_source": self.source or None}
        if self.conflict:
            out["llama_build_conflict"] = self.conflict
        return out


def read_build(folder: str | os.PathLike[str], declared: str | None = None) -> FolderBuild:
    """The build of ``folder``: what its file names, its build metadata and ``declared`` (else the
    ``CONFORM_LLAMA_BUILD`` environment variable) say, when all that speak agree."""
    path = Path(folder)
    said: dict[str, set[str]] = {}
    names = tags_in_names(path)
    if names:
        said["file names"] = names
    meta = metadata_tag(path)
    if meta:
        said[METADATA_FILE] = {meta}
    user = declared if declared is not None else os.environ.get(ENV_VAR, "")
    if user:
        if not is_build_tag(user):
            return FolderBuild(None, "", f"{ENV_VAR}={user!r} is not a build tag (b8179, v0.5.0)")
        said[ENV_VAR] = {user}
    tags = set().union(*said.values()) if said else set()
    if len(tags) == 1:
        return FolderBuild(tags.pop(), ", ".join(said))
    if not tags:
        return FolderBuild(None, "")
    return FolderBuild(None, "", "; ".join(f"{where}: {', '.join(sorted(t))}" for where, t in said.items()))


def in_range(build: str | None, low: str, high: str) -> bool:
    """Whether ``build`` lies in the inclusive range [``low``, ``high``] ("" for an open end). An unknown build
    (None or not a tag) lies in no range."""
    if build is None or not is_build_tag(build):
        return False
    key = build_key(build)
    return not ((low and key < build_key(low)) or (high and key > build_key(high)))


# the builds measured for each ggml version (node-llama-cpp's Vulkan packages; docs/findings-vulkan.md's
# bisect tables, docs/model-tier.md): what the known-bug snapshot evaluates build-keyed entries on
KNOWN_BUILDS: dict[str, tuple[str, ...]] = {
    "0.0.1": ("b6431",),
    "0.9.4": ("b6673", "b6845", "b7347"),
    "0.9.5": ("b7836",),
    "0.9.7": ("b8095", "b8121", "b8179", "b8390"),
    "0.19.0": ("b10361",),
    "0.23.0": ("v0.4.0",),
    "0.25.1": ("v0.5.0",),
}


def release_of(build: str) -> str | None:
    """The ggml version :data:`KNOWN_BUILDS` gives ``build``, or None."""
    return next((release for release, builds in KNOWN_BUILDS.items() if build in builds), None)


def known_neighbours(build: str) -> list[str]:
    """``build`` and the known builds just before and after it (in build order), those :data:`KNOWN_BUILDS`
    lists: where an entry's build boundary is checked from both sides."""
    ordered = sorted({b for builds in KNOWN_BUILDS.values() for b in builds} | {build}, key=build_key)
    at = ordered.index(build)
    return ordered[max(at - 1, 0):at + 2]

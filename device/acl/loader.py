"""Finding and loading the CANN shared libraries.

Search order (first directory holding the library wins):

1. ``$ASCEND_TOOLKIT_HOME`` (set by CANN's ``set_env.sh``): ``lib64`` and ``<arch>-linux/lib64``;
2. each ``$LD_LIBRARY_PATH`` entry, in order;
3. the standard install roots (:data:`STANDARD_INSTALL_ROOTS`), same sub-directories as 1.

An explicit environment beats a guess: a host with an old toolkit under ``/usr/local/Ascend`` and a
newer one sourced from elsewhere must load the sourced one. Directories named ``stub`` are skipped:
CANN ships link-only stubs there whose every call returns ACL_ERROR_COMPILING_STUB_MODE.

Discovery takes the environment and the roots as arguments so tests can drive it without a toolkit.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from device.acl.errors import AclLibraryNotFound

RUNTIME_LIBRARY = "libascendcl.so"
NNOPBASE_LIBRARY = "libnnopbase.so"
# libopapi.so is being split; newest CANN keeps the ops in these (acl-facts section 5).
OPAPI_LIBRARIES = ("libopapi.so", "libopapi_math.so", "libopapi_nn.so")

STANDARD_INSTALL_ROOTS: tuple[Path, ...] = (
    Path("/usr/local/Ascend/cann"),  # CANN 9.x default
    Path("/usr/local/Ascend/ascend-toolkit/latest"),  # CANN 7/8 default
    # non-root install; expanduser leaves "~" as is where no home is known (Path.home() would raise)
    Path(os.path.expanduser("~/Ascend/ascend-toolkit/latest")),
)


def _toolkit_lib_dirs(root: Path) -> list[Path]:
    arch = platform.machine() or "x86_64"
    return [root / "lib64", root / f"{arch}-linux" / "lib64"]


def library_search_dirs(
    environ: Mapping[str, str] | None = None,
    install_roots: Sequence[Path] = STANDARD_INSTALL_ROOTS,
) -> list[Path]:
    """The directories searched, in order, without duplicates or ``stub`` directories."""
    env = os.environ if environ is None else environ
    dirs: list[Path] = []
    toolkit = env.get("ASCEND_TOOLKIT_HOME", "").strip()
    if toolkit:
        dirs += _toolkit_lib_dirs(Path(toolkit))
    dirs += [Path(p) for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p.strip()]
    for root in install_roots:
        dirs += _toolkit_lib_dirs(Path(root))
    unique: list[Path] = []
    for d in dirs:
        if "stub" in d.parts or d in unique:
            continue
        unique.append(d)
    return unique


def find_library(name: str, search_dirs: Iterable[Path]) -> Path | None:
    for d in search_dirs:
        candidate = d / name
        if candidate.is_file():
            return candidate
    return None


@dataclass
class AclLibraries:
    """The loaded CDLL handles: runtime, nnopbase and every op library found."""

    runtime: ctypes.CDLL
    nnopbase: ctypes.CDLL | None
    opapi: list[ctypes.CDLL] = field(default_factory=list)
    paths: dict[str, str] = field(default_factory=dict)


# RTLD_GLOBAL: libopapi resolves nnopbase/ascendcl symbols from libraries already loaded (as
# CANN's own Python loaders do). The tests load their C double RTLD_LOCAL instead, so that on an
# Ascend host the double can never capture the real libraries' symbol lookups.
LOAD_MODE = ctypes.RTLD_GLOBAL


def _load(path: Path) -> ctypes.CDLL:
    try:
        return ctypes.CDLL(str(path), mode=LOAD_MODE)
    except OSError as exc:
        raise AclLibraryNotFound(
            f"found {path} but could not load it ({exc}); source the toolkit's set_env.sh first"
        ) from None


def load_libraries(
    environ: Mapping[str, str] | None = None,
    install_roots: Sequence[Path] = STANDARD_INSTALL_ROOTS,
    need_ops: bool = True,
) -> AclLibraries:
    """Load libascendcl, then (when ``need_ops``) libnnopbase and the op libraries.

    Raises :class:`AclLibraryNotFound` with a one-line message naming what is missing and where
    it looked.
    """
    dirs = library_search_dirs(environ, install_roots)
    where = ", ".join(str(d) for d in dirs) or "(no directories)"
    runtime_path = find_library(RUNTIME_LIBRARY, dirs)
    if runtime_path is None:
        raise AclLibraryNotFound(
            f"CANN runtime {RUNTIME_LIBRARY} not found (looked in: {where}); "
            "install the CANN toolkit and source its set_env.sh, or set ASCEND_TOOLKIT_HOME"
        )
    libs = AclLibraries(runtime=_load(runtime_path), nnopbase=None, paths={"runtime": str(runtime_path)})
    if not need_ops:
        return libs
    nnopbase_path = find_library(NNOPBASE_LIBRARY, dirs)
    if nnopbase_path is None:
        raise AclLibraryNotFound(f"aclnn meta library {NNOPBASE_LIBRARY} not found (looked in: {where})")
    libs.nnopbase = _load(nnopbase_path)
    libs.paths["nnopbase"] = str(nnopbase_path)
    for name in OPAPI_LIBRARIES:
        path = find_library(name, dirs)
        if path is not None:
            libs.opapi.append(_load(path))
            libs.paths[name] = str(path)
    if not libs.opapi:
        raise AclLibraryNotFound(
            f"aclnn op library ({' or '.join(OPAPI_LIBRARIES)}) not found (looked in: {where})"
        )
    return libs

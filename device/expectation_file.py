"""Known bugs as data: TOML entries in a small vocabulary, owned by whoever runs the backend.

A file holds ``[[bug]]`` tables; each becomes a :class:`~device.known_bugs.KnownBug`::

    [[bug]]
    id = "vulkan-ssm-conv-row-stride"
    devices = "Vulkan*"                 # fnmatch over the ggml device name
    releases = ["0.25.1"]               # exact releases, or release_min / release_max (inclusive)
    build_min = "b8179"                 # llama.cpp builds: builds = [...] exact, build_min / build_max (inclusive)
    op = "SSM_CONV"                     # or ops = ["DUP", "CONT"] with repro a list: one case id per op
                                        # (each op's cases match as the entry's id; the record names the op)
    outcomes = ["fail"]                 # fail, crash, timeout, error (default fail)
    corrupts_process = false            # the worker is restarted after such a case
    after_history = false               # true: a crash left by earlier cases of the process, covered only
                                        # where the case alone in a fresh worker does not crash (op may be "*")
    reason = "what the kernel does wrong, with the evidence"
                                        # or same_reason_as = "an earlier entry's id in this file" where
                                        # the predicates differ (ops = [...] shares one entry's)
    repro = "SSM_CONV(type0=f32,...)"
    match = "any"                       # the when-predicates: all must hold (default) or any
    deviation = "vulkan_softplus"       # a documented deviation: judged against this named bound instead
    [[bug.when]]
    input = 0                           # an input index, or "any"
    layout = "rows_strided"             # see LAYOUT_KINDS

``releases``, ``release_min`` and ``release_max`` are ggml versions (``ggml_version()``). ``builds``, ``build_min``
and ``build_max`` are llama.cpp build tags, for what one ggml version cannot say (node-llama-cpp's b8095, b8121,
b8179 and b8390 all report ggml 0.9.7): ``bNNNN`` in number order, then node-llama-cpp's own ``vX.Y.Z`` tags,
which came after every ``bNNNN`` it shipped. The device reads its build from the library folder
(device/build_tag.py: the file names, ``_nlcBuildMetadata.json``, or ``CONFORM_LLAMA_BUILD``); **an entry that
names builds does not match where the build is unknown** (a library with neither, or sources that disagree):
its failure is then reported as unexpected rather than called known on a build nobody tried. Release and build
conditions must all hold. ``[[graph_bug]]`` entries take the same keys.

Predicates (one per ``[[bug.when]]`` table; ``not = true`` negates it):

* ``input`` with ``layout`` (a kind or a list: any of them), ``offset_misaligned = N`` (the view's byte
  offset is not a multiple of N), ``offset_mod = N`` with ``remainder = R``, ``dtype`` (a name or a
  list), or ``dim = D`` with ``min``/``max`` (that input's ne[D] in the range);
* ``param = NAME`` with ``equals``, ``in`` (a list) or ``min``/``max``;
* ``dst`` (the destination dtype, a name or a list), ``form`` (the constructor form), ``distribution``;
* ``python = "module:function"``: a predicate over the case for what the vocabulary cannot say.

Graph-level entries (``[[graph_bug]]``, each a :class:`~device.known_bug.GraphKnownBug`) take ``id``,
``devices``, ``releases``, ``outcomes``, ``corrupts_process``, ``isolated`` (each such case runs in a fresh
worker), ``reason``, ``repro`` (free text: a graph case id or a standalone program) and ``match``, with
``[[graph_bug.when]]`` predicates (``not = true`` negates one):

* ``pattern`` (a pattern name or a list), ``node_op`` (some node has this op, or one of a list),
  ``feeds = [PRODUCER, CONSUMER]`` (a CONSUMER node takes a PRODUCER node's result), or ``python``.

A file that belongs to a backend declares it in a ``[backend]`` table::

    [backend]
    name = "vulkan"                     # the prefix of its named bounds (vulkan_silu)
    devices = ["Vulkan*"]               # fnmatch over the ggml device names it covers
    module = "device.ggml.known_bugs_vulkan"  # optional: its Python entries (BUGS) and NAMED_BOUNDS

In a backend's file an entry may leave ``devices`` out: it takes the ``[backend]`` table's pattern (where that
names one); an entry's own ``devices`` must name a device of the backend.

Backends are found by :func:`backends`: the ``known_bugs_*.toml`` files of ``device/ggml/``, then those of
the installed distributions' ``conform.known_bugs`` entry points (each names a module; its file is the
module's ``EXPECTATIONS`` path, or else the ``.toml`` of the same name beside it).

A bound named by ``deviation`` is looked up in the backends' ``NAMED_BOUNDS``, or imported when it reads
``module:attribute``.
"""

from __future__ import annotations

import fnmatch
import functools
import importlib
import importlib.metadata
import os
import sys
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from device.build_tag import build_key, is_build_tag
from device.known_bug import GraphKnownBug, KnownBug
from golden import dtypes
from golden.case import OpCase, TensorSpec, parse_case_id
from golden.geometry import ggml_contiguous, logical_nb, rows_unit_stride, storage_of
from golden.graphs.case import GraphCase
from golden.tolerance import Tolerance

ENV_VAR = "CONFORM_EXPECTATIONS"  # files or folders (os.pathsep-separated) the pytest plug-in loads


class ExpectationFileError(ValueError):
    """A file that cannot be read or an entry outside the vocabulary; the text says where."""


def _permuted(spec: TensorSpec) -> bool:
    nb = logical_nb(spec)
    return nb[0] > nb[1] or nb[1] > nb[2] or nb[2] > nb[3]


def _rows_gapped(spec: TensorSpec) -> bool:
    return spec.ne[1] > 1 and logical_nb(spec)[1] != spec.ne[0] * dtypes.type_size(spec.dtype)


LAYOUT_KINDS: dict[str, Callable[[TensorSpec], bool]] = {
    "contiguous": ggml_contiguous,  # ggml_is_contiguous
    "not_contiguous": lambda t: not ggml_contiguous(t),
    "permuted": _permuted,  # ggml_is_permuted: some stride out of ggml's order
    "rows_strided": lambda t: not rows_unit_stride(t),  # dim 0 permuted away: nb0 is not the element size
    "rows_gapped": _rows_gapped,  # rows of dim 0 not adjacent (padded rows)
    "padded": lambda t: t.layout.pad != (0, 0, 0, 0),
    "offset": lambda t: t.layout.offset != 0,
    "view": lambda t: not t.layout.is_contiguous,  # any of perm, pad, offset
}
BUILD_KEYS = {"builds", "build_min", "build_max"}
ENTRY_KEYS = {"id", "devices", "op", "ops", "releases", "release_min", "release_max", "outcomes", "corrupts_process",
              "may_hang", "reason", "repro", "match", "when", "deviation", "tags", "after_history"} | BUILD_KEYS
PREDICATE_KEYS = {"input", "layout", "offset_misaligned", "offset_mod", "remainder", "dtype", "dim", "min", "max",
                  "param", "equals", "in", "dst", "form", "distribution", "python", "not"}
OUTCOMES = ("fail", "crash", "timeout", "error")


def _names(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ExpectationFileError(f"{where}: expected a name or a list of names, got {value!r}")


def _builds(table: dict[str, Any], where: str) -> tuple[tuple[str, ...], tuple[str, str] | None]:
    """``builds`` (exact llama.cpp build tags) and ``build_min`` / ``build_max`` (an inclusive range), checked:
    each a tag as device/build_tag.py reads it (b8179, v0.5.0), the range's ends in order."""
    builds = _names(table["builds"], where) if "builds" in table else ()
    ends = [table.get(k, "") for k in ("build_min", "build_max")]
    for tag in (*builds, *ends):
        if not isinstance(tag, str) or (tag and not is_build_tag(tag)):
            raise ExpectationFileError(f"{where}: {tag!r} is not a llama.cpp build tag (b8179, or v0.5.0 for "
                                       "node-llama-cpp's own tags)")
    if "build_min" in table or "build_max" in table:
        low, high = str(ends[0]), str(ends[1])
        if not (low or high):
            raise ExpectationFileError(f"{where}: build_min and build_max are both empty (omit them: every build)")
        if low and high and build_key(low) > build_key(high):
            raise ExpectationFileError(f"{where}: build_min {low} comes after build_max {high}")
        return builds, (low, high)
    return builds, None


def _number(table: dict[str, Any], key: str, where: str) -> float | None:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ExpectationFileError(f"{where}: {key} must be a number, got {value!r}")
    return float(value)


def _in_range(value: float, low: float | None, high: float | None) -> bool:
    return (low is None or value >= low) and (high is None or value <= high)


def _import(ref: str, where: str) -> Any:
    module, _, attr = ref.partition(":")
    if not module or not attr:
        raise ExpectationFileError(f"{where}: {ref!r} is not module:attribute")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ExpectationFileError(f"{where}: cannot import {ref!r}: {exc}") from None


def _tensor_test(table: dict[str, Any], where: str) -> Callable[[TensorSpec], bool]:
    """The part of an ``input`` predicate that looks at one tensor."""
    if "layout" in table:
        kinds = _names(table["layout"], where)
        unknown = [k for k in kinds if k not in LAYOUT_KINDS]
        if unknown:
            raise ExpectationFileError(f"{where}: unknown layout kind(s) {unknown} (known: {', '.join(LAYOUT_KINDS)})")
        tests = [LAYOUT_KINDS[k] for k in kinds]
        return lambda t: any(test(t) for test in tests)
    if "offset_misaligned" in table:
        n = int(_number(table, "offset_misaligned", where) or 0)
        if n <= 0:
            raise ExpectationFileError(f"{where}: offset_misaligned must be a positive number of bytes")
        return lambda t: storage_of(t).offset_bytes % n != 0
    if "offset_mod" in table:
        n = int(_number(table, "offset_mod", where) or 0)
        remainder = int(_number(table, "remainder", where) or 0)
        if n <= 0:
            raise ExpectationFileError(f"{where}: offset_mod must be a positive number of bytes")
        return lambda t: storage_of(t).offset_bytes % n == remainder
    if "dtype" in table:
        names = _names(table["dtype"], where)
        return lambda t: t.dtype in names
    if "dim" in table:
        dim = int(_number(table, "dim", where) or 0)
        if not 0 <= dim <= 3:
            raise ExpectationFileError(f"{where}: dim must be 0..3")
        low, high = _number(table, "min", where), _number(table, "max", where)
        return lambda t: _in_range(t.ne[dim], low, high)
    raise ExpectationFileError(f"{where}: an input predicate needs layout, offset_misaligned, offset_mod, dtype or dim")


def compile_predicate(table: dict[str, Any], where: str) -> Callable[[OpCase], bool]:
    """One ``[[bug.when]]`` table as a predicate over the case."""
    unknown = set(table) - PREDICATE_KEYS
    if unknown:
        known = ", ".join(sorted(PREDICATE_KEYS))
        raise ExpectationFileError(f"{where}: unknown key(s) {sorted(unknown)} (known: {known})")
    test: Callable[[OpCase], bool]
    if "python" in table:
        function = _import(str(table["python"]), where)
        if not callable(function):
            raise ExpectationFileError(f"{where}: {table['python']!r} is not callable")
        test = lambda case: bool(function(case))  # noqa: E731
    elif "input" in table:
        tensor_test = _tensor_test(table, where)
        which = table["input"]
        if which == "any":
            test = lambda case: any(tensor_test(t) for t in case.inputs)  # noqa: E731
        elif isinstance(which, int) and not isinstance(which, bool) and which >= 0:
            test = lambda case: len(case.inputs) > which and tensor_test(case.inputs[which])  # noqa: E731
        else:
            raise ExpectationFileError(f"{where}: input must be an index (0, 1, ...) or \"any\", got {which!r}")
    elif "param" in table:
        test = _param_test(table, where)
    elif "dst" in table:
        names = _names(table["dst"], where)
        test = lambda case: case.dst in names  # noqa: E731
    elif "form" in table:
        names = _names(table["form"], where)
        test = lambda case: case.form in names  # noqa: E731
    elif "distribution" in table:
        names = _names(table["distribution"], where)
        test = lambda case: case.distribution in names  # noqa: E731
    else:
        raise ExpectationFileError(f"{where}: a predicate needs input, param, dst, form, distribution or python")
    if table.get("not", False) is True:
        positive = test
        return lambda case: not positive(case)
    return test


def _param_test(table: dict[str, Any], where: str) -> Callable[[OpCase], bool]:
    name = str(table["param"])
    low, high = _number(table, "min", where), _number(table, "max", where)
    if "equals" in table:
        wanted = table["equals"]
        return lambda case: case.params_dict.get(name) == wanted
    if "in" in table:
        if not isinstance(table["in"], list):
            raise ExpectationFileError(f"{where}: in must be a list")
        choices = list(table["in"])
        return lambda case: case.params_dict.get(name) in choices
    if low is not None or high is not None:
        def test(case: OpCase) -> bool:
            value = case.params_dict.get(name)
            return isinstance(value, (int, float)) and _in_range(float(value), low, high)
        return test
    raise ExpectationFileError(f"{where}: a param predicate needs equals, in, or min/max")


def named_bound(name: str, where: str) -> Tolerance:
    """A documented deviation's bound by name: a backend's ``NAMED_BOUNDS`` entry, or ``module:attr``."""
    if ":" in name:
        bound = _import(name, where)
    else:
        bound = None
        for backend in backends():
            bounds = backend.named_bounds()
            if name in bounds:
                bound = bounds[name]
                break
    if not isinstance(bound, Tolerance):
        raise ExpectationFileError(f"{where}: no documented bound named {name!r}")
    return bound


@dataclass(frozen=True)
class _Applies:
    """The when-predicates of one entry, combined (a named callable, so a KnownBug stays comparable)."""

    tests: tuple[Callable[[Any], bool], ...]  # over an OpCase, or a GraphCase for graph entries
    any_of: bool

    def __call__(self, case: Any) -> bool:
        if self.any_of:
            return any(test(case) for test in self.tests)
        return all(test(case) for test in self.tests)


def entry_to_bug(table: dict[str, Any], source: str) -> KnownBug:
    """One ``[[bug]]`` table as a KnownBug whose ``source`` names the file (and entry)."""
    where = f"{source}: entry {table.get('id', '?')!r}"
    unknown = set(table) - ENTRY_KEYS
    if unknown:
        known = ", ".join(sorted(ENTRY_KEYS))
        raise ExpectationFileError(f"{where}: unknown key(s) {sorted(unknown)} (known: {known})")
    for key in ("id", "devices", "op", "reason", "repro"):
        if not isinstance(table.get(key), str) or not table[key]:
            raise ExpectationFileError(f"{where}: {key} (a non-empty string) is required")
    outcomes = _names(table.get("outcomes", ["fail"]), where)
    if set(outcomes) - set(OUTCOMES):
        raise ExpectationFileError(f"{where}: outcomes must be among {', '.join(OUTCOMES)}")
    after_history = table.get("after_history", False)
    if not isinstance(after_history, bool):
        raise ExpectationFileError(f"{where}: after_history must be true or false")
    if after_history and "crash" not in outcomes:
        raise ExpectationFileError(f"{where}: an after_history entry explains crashes: its outcomes must name crash")
    if table["op"] == "*" and not after_history:
        raise ExpectationFileError(f"{where}: op \"*\" (every op) is for after_history entries only")
    match = table.get("match", "all")
    if match not in ("all", "any"):
        raise ExpectationFileError(f"{where}: match must be \"all\" or \"any\"")
    when = table.get("when", [])
    if not isinstance(when, list) or not all(isinstance(w, dict) for w in when):
        raise ExpectationFileError(f"{where}: when must be [[bug.when]] tables")
    tests = tuple(compile_predicate(w, f"{where}, when #{i + 1}") for i, w in enumerate(when))
    releases = _names(table["releases"], where) if "releases" in table else ()
    release_range = None
    if "release_min" in table or "release_max" in table:
        release_range = (str(table.get("release_min", "")), str(table.get("release_max", "")))
    builds, build_range = _builds(table, where)
    try:
        parse_case_id(table["repro"])
    except Exception as exc:
        raise ExpectationFileError(f"{where}: repro is not a case id: {exc}") from None
    return KnownBug(
        id=table["id"], devices=table["devices"], op=table["op"], applies=_Applies(tests, match == "any"),
        reason=table["reason"], repro=table["repro"], releases=releases, outcomes=outcomes,
        corrupts_process=bool(table.get("corrupts_process", False)), may_hang=bool(table.get("may_hang", True)),
        tags=tuple(table.get("tags", ())), after_history=after_history,
        tolerance=named_bound(str(table["deviation"]), where) if "deviation" in table else None,
        release_range=release_range, builds=builds, build_range=build_range, source=source)


TOP_LEVEL_KEYS = {"bug", "graph_bug", "backend"}
IN_REPO = Path(__file__).parent / "ggml"  # the in-repo backends' files: known_bugs_<backend>.toml
ENTRY_POINT_GROUP = "conform.known_bugs"
BACKEND_KEYS = {"name", "devices", "module"}


@dataclass(frozen=True)
class Backend:
    """A backend's expectations file and what its ``[backend]`` table says."""

    name: str
    devices: tuple[str, ...]
    path: Path
    module: str = ""
    source: str = ""  # how entries name the file: relative to the repository for in-repo ones

    def covers(self, device_name: str) -> bool:
        return any(fnmatch.fnmatchcase(device_name, pattern) for pattern in self.devices)

    def python_module(self) -> Any:
        return importlib.import_module(self.module) if self.module else None

    def named_bounds(self) -> dict[str, Any]:
        module = self.python_module()
        return dict(getattr(module, "NAMED_BOUNDS", {})) if module is not None else {}


@functools.lru_cache(maxsize=64)
def _backend_table(path: str, mtime_ns: int) -> Any:
    # every deviation entry looks its bound up through the backends: their files are parsed once per version
    return _read(Path(path)).get("backend")


def backend_of_file(path: Path, source: str = "", module: str = "") -> Backend:
    """The ``[backend]`` table of ``path`` (``module`` is the default for its module key)."""
    table = _backend_table(str(path), path.stat().st_mtime_ns if path.exists() else 0)
    if not isinstance(table, dict):
        raise ExpectationFileError(f"{path}: a backend's file needs a [backend] table (name, devices, module)")
    unknown = set(table) - BACKEND_KEYS
    if unknown:
        raise ExpectationFileError(f"{path}: [backend]: unknown key(s) {sorted(unknown)} "
                                   f"(known: {', '.join(sorted(BACKEND_KEYS))})")
    if not isinstance(table.get("name"), str) or not table["name"]:
        raise ExpectationFileError(f"{path}: [backend]: name must be a non-empty string")
    devices = _names(table.get("devices"), f"{path}: [backend] devices")
    return Backend(name=table["name"], devices=devices, path=path, module=str(table.get("module", module)),
                   source=source or str(path))


@functools.lru_cache(maxsize=8)
def _entry_points(path: tuple[str, ...]) -> tuple[importlib.metadata.EntryPoint, ...]:
    # scanning every distribution costs milliseconds and each deviation entry asks: once per sys.path
    return tuple(sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name))


def backends() -> list[Backend]:
    """Every backend with an expectations file: the in-repo ones (by name), then the entry points'."""
    in_repo = sorted(IN_REPO.glob("known_bugs_*.toml"))
    found = [backend_of_file(path, source=f"device/ggml/{path.name}") for path in in_repo]
    for entry in _entry_points(tuple(sys.path)):
        where = f"entry point {entry.name} = {entry.value} ({ENTRY_POINT_GROUP})"
        try:
            module = entry.load()
        except Exception as exc:
            raise ExpectationFileError(f"{where}: cannot load: {exc}") from None
        path = getattr(module, "EXPECTATIONS", None)
        if path is None and getattr(module, "__file__", None):
            path = Path(module.__file__).with_suffix(".toml")
        if path is None or not Path(path).exists():
            raise ExpectationFileError(f"{where}: no expectations file (EXPECTATIONS, or a .toml beside the module)")
        found.append(backend_of_file(Path(path), module=getattr(module, "__name__", "")))
    return found


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise ExpectationFileError(f"cannot read expectations file {str(path)!r}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ExpectationFileError(f"{path}: not valid TOML: {exc}") from None
    unknown = set(data) - TOP_LEVEL_KEYS
    if unknown:
        raise ExpectationFileError(f"{path}: unknown top-level key(s) {sorted(unknown)} "
                                   "(entries are [[bug]] and [[graph_bug]] tables)")
    return data


def load_file(path: str | os.PathLike[str]) -> list[KnownBug]:
    path = Path(path)
    data = _read(path)
    entries = data.get("bug", [])
    if not isinstance(entries, list):
        raise ExpectationFileError(f"{path}: bug must be an array of tables ([[bug]])")
    entries = _backend_devices(data, path, entries)
    return [bug for entry in _shared_reasons(entries, str(path)) for bug in entries_to_bugs(entry, str(path))]


def _backend_devices(data: dict[str, Any], path: Path, entries: list[Any]) -> list[Any]:
    """In a backend's file the ``[backend]`` table says the devices once: an entry without ``devices`` takes
    its pattern (where it names one), and an entry's own pattern must name a device the backend covers."""
    if not isinstance(data.get("backend"), dict):
        return entries
    backend = backend_of_file(path)
    out: list[Any] = []
    for entry in entries:
        if not isinstance(entry, dict):
            out.append(entry)
            continue
        where = f"{path}: entry {entry.get('id', '?')!r}"
        if "devices" not in entry:
            if len(backend.devices) != 1:
                raise ExpectationFileError(f"{where}: devices is required where [backend] names several patterns "
                                           f"({', '.join(backend.devices)})")
            entry = {**entry, "devices": backend.devices[0]}
        elif isinstance(entry["devices"], str) and not backend.covers(example_device(entry["devices"])):
            raise ExpectationFileError(f"{where}: devices {entry['devices']!r} is not a device of backend "
                                       f"{backend.name!r} ({', '.join(backend.devices)})")
        out.append(entry)
    return out


def example_device(devices: str) -> str:
    """A device name that a ``devices`` pattern matches (``Vulkan*`` -> ``Vulkan0``)."""
    return devices.replace("*", "0").replace("?", "0")


def _shared_reasons(entries: list[Any], source: str) -> list[Any]:
    """The entries with each ``same_reason_as = ID`` replaced by that earlier entry's ``reason``: one text for
    one defect whose entries need different predicates."""
    reasons: dict[str, str] = {}
    out: list[Any] = []
    for entry in entries:
        if isinstance(entry, dict) and "same_reason_as" in entry:
            where = f"{source}: entry {entry.get('id', '?')!r}"
            other = entry["same_reason_as"]
            if "reason" in entry:
                raise ExpectationFileError(f"{where}: give reason or same_reason_as, not both")
            if other not in reasons:
                raise ExpectationFileError(f"{where}: same_reason_as {other!r} names no earlier entry of the file")
            entry = {**{k: v for k, v in entry.items() if k != "same_reason_as"}, "reason": reasons[other]}
        if isinstance(entry, dict) and isinstance(entry.get("id"), str) and isinstance(entry.get("reason"), str):
            reasons.setdefault(entry["id"], entry["reason"])
        out.append(entry)
    return out


def entries_to_bugs(table: dict[str, Any], source: str) -> list[KnownBug]:
    """One ``[[bug]]`` table as KnownBugs: one per op it names. ``ops = [...]`` (instead of ``op``) names
    several ops that share the defect and its reason; ``repro`` is then a list of case ids, each op's
    KnownBug taking the one of its own op."""
    if "ops" not in table:
        return [entry_to_bug(table, source)]
    where = f"{source}: entry {table.get('id', '?')!r}"
    if "op" in table:
        raise ExpectationFileError(f"{where}: give op or ops, not both")
    ops = _names(table["ops"], where)
    repros = _names(table.get("repro", []), where)
    by_op: dict[str, str] = {}
    for repro in repros:
        try:
            by_op.setdefault(parse_case_id(repro).op, repro)
        except Exception as exc:
            raise ExpectationFileError(f"{where}: repro {repro!r} is not a case id: {exc}") from None
    missing = [op for op in ops if op not in by_op]
    if missing:
        raise ExpectationFileError(f"{where}: no repro of {', '.join(missing)} (ops needs one repro per op)")
    rest = {k: v for k, v in table.items() if k not in ("ops", "repro")}
    return [entry_to_bug({**rest, "op": op, "repro": by_op[op]}, source) for op in ops]


GRAPH_ENTRY_KEYS = {"id", "devices", "releases", "outcomes", "corrupts_process", "isolated", "reason", "repro",
                    "match", "when"} | BUILD_KEYS
GRAPH_PREDICATE_KEYS = {"pattern", "node_op", "feeds", "python", "not"}


def compile_graph_predicate(table: dict[str, Any], where: str) -> Callable[[GraphCase], bool]:
    """One ``[[graph_bug.when]]`` table as a predicate over the graph case."""
    unknown = set(table) - GRAPH_PREDICATE_KEYS
    if unknown:
        known = ", ".join(sorted(GRAPH_PREDICATE_KEYS))
        raise ExpectationFileError(f"{where}: unknown key(s) {sorted(unknown)} (known: {known})")
    test: Callable[[GraphCase], bool]
    if "python" in table:
        function = _import(str(table["python"]), where)
        if not callable(function):
            raise ExpectationFileError(f"{where}: {table['python']!r} is not callable")
        test = lambda case: bool(function(case))  # noqa: E731
    elif "pattern" in table:
        patterns = _names(table["pattern"], where)
        test = lambda case: case.pattern in patterns  # noqa: E731
    elif "node_op" in table:
        ops = _names(table["node_op"], where)
        test = lambda case: any(n.op in ops for n in case.graph.nodes)  # noqa: E731
    elif "feeds" in table:
        pair = _names(table["feeds"], where)
        if len(pair) != 2:
            raise ExpectationFileError(f"{where}: feeds must be [producer op, consumer op]")
        test = _feeds(*pair)
    else:
        raise ExpectationFileError(f"{where}: a graph predicate needs pattern, node_op, feeds or python")
    if table.get("not", False) is True:
        positive = test
        return lambda case: not positive(case)
    return test


def _feeds(producer: str, consumer: str) -> Callable[[GraphCase], bool]:
    def test(case: GraphCase) -> bool:
        graph = case.graph  # expanded once: the property builds the graph on each read
        made = {n.name for n in graph.nodes if n.op == producer}
        return any(n.op == consumer and made.intersection(n.srcs) for n in graph.nodes)

    return test


def graph_entry_to_bug(table: dict[str, Any], source: str) -> GraphKnownBug:
    where = f"{source}: graph entry {table.get('id', '?')!r}"
    unknown = set(table) - GRAPH_ENTRY_KEYS
    if unknown:
        known = ", ".join(sorted(GRAPH_ENTRY_KEYS))
        raise ExpectationFileError(f"{where}: unknown key(s) {sorted(unknown)} (known: {known})")
    missing = [k for k in ("id", "devices", "reason", "repro") if k not in table]
    if missing:
        raise ExpectationFileError(f"{where}: missing {', '.join(missing)}")
    outcomes = tuple(table.get("outcomes", ["fail"]))
    if any(o not in OUTCOMES for o in outcomes):
        raise ExpectationFileError(f"{where}: outcomes must be among {', '.join(OUTCOMES)}")
    match = table.get("match", "all")
    if match not in ("all", "any"):
        raise ExpectationFileError(f"{where}: match must be \"all\" or \"any\"")
    when = table.get("when", [])
    if not isinstance(when, list) or not all(isinstance(w, dict) for w in when):
        raise ExpectationFileError(f"{where}: when must be [[graph_bug.when]] tables")
    tests = tuple(compile_graph_predicate(w, f"{where}, when #{i + 1}") for i, w in enumerate(when))
    flags = {k: table.get(k, False) for k in ("corrupts_process", "isolated")}
    if not all(isinstance(v, bool) for v in flags.values()):
        raise ExpectationFileError(f"{where}: corrupts_process and isolated must be true or false")
    builds, build_range = _builds(table, where)
    return GraphKnownBug(
        id=str(table["id"]), devices=str(table["devices"]), applies=_Applies(tests, match == "any"),
        reason=str(table["reason"]), repro=str(table["repro"]),
        releases=_names(table["releases"], where) if "releases" in table else (), outcomes=outcomes,
        corrupts_process=flags["corrupts_process"], isolated=flags["isolated"], builds=builds,
        build_range=build_range, source=source)


def load_graph_file(path: str | os.PathLike[str]) -> list[GraphKnownBug]:
    path = Path(path)
    data = _read(path)
    entries = data.get("graph_bug", [])
    if not isinstance(entries, list):
        raise ExpectationFileError(f"{path}: graph_bug must be an array of tables ([[graph_bug]])")
    return [graph_entry_to_bug(entry, str(path)) for entry in _backend_devices(data, path, entries)]


def load(paths: Iterable[str | os.PathLike[str]]) -> list[KnownBug]:
    """Every entry of these files, and of the ``*.toml`` files in these folders (sorted by name)."""
    bugs: list[KnownBug] = []
    for item in paths:
        path = Path(item)
        if path.is_dir():
            for file in sorted(path.glob("*.toml")):
                bugs += load_file(file)
        elif path.exists():
            bugs += load_file(path)
        else:
            raise ExpectationFileError(f"expectations {str(path)!r}: no such file or folder")
    return bugs


def load_graph(paths: Iterable[str | os.PathLike[str]]) -> list[GraphKnownBug]:
    """Every ``[[graph_bug]]`` entry of these files and folders, as :func:`load` reads them."""
    bugs: list[GraphKnownBug] = []
    for item in paths:
        path = Path(item)
        if path.is_dir():
            for file in sorted(path.glob("*.toml")):
                bugs += load_graph_file(file)
        elif path.exists():
            bugs += load_graph_file(path)
        else:
            raise ExpectationFileError(f"expectations {str(path)!r}: no such file or folder")
    return bugs


def paths_from_env(environ: dict[str, str] | None = None) -> list[str]:
    value = (os.environ if environ is None else environ).get(ENV_VAR, "")
    return [p for p in value.split(os.pathsep) if p]


def to_toml(bug_fields: dict[str, Any], when: list[dict[str, Any]]) -> str:
    """One ``[[bug]]`` entry as TOML text (what ``conform triage --write`` appends)."""
    lines = ["[[bug]]"]
    for key, value in bug_fields.items():
        lines.append(f"{key} = {_toml_value(value)}")
    for table in when:
        lines.append("[[bug.when]]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in table.items()]
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")

"""Record every ggml call a device worker makes, as C, so a finding travels upstream as a standalone program.

Off unless :data:`TRACE_ENV` names a directory (``conform repro --emit-c DIR`` sets it for its worker).
When on, :func:`traced` wraps each bound ggml function (``device/ggml/lib.py`` binds ``GgmlApi``'s,
``device/ggml/graph.py`` the op constructors); off, the bound ctypes function is used as it is.

Each call becomes one C statement, appended to ``DIR/calls.c.part`` and flushed at once: a crash kills
the worker, and the calls up to it are what the C program must replay. Pointers ggml returned become C
variables (``ctx3``, ``t17``, ``buf2``...) mapped by address; floats are C99 hex literals of their float32
value; int64/int/float arrays and ``struct ggml_init_params`` are C literals; the bytes given to
``ggml_backend_tensor_set`` go to ``DIR/blobs/N.bin``; ``ggml_backend_tensor_get`` reads into a scratch
buffer. :func:`write_program` wraps the recorded statements into ``DIR/repro.c`` and ``DIR/build.sh``.
"""

from __future__ import annotations

import ctypes as C
import json
import math
import os
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

TRACE_ENV = "CONFORM_EMIT_C"
CALLS_GLOB = "calls.*.c.part"  # one per process that loaded ggml (the harness may too, to list devices)
META_FILE = "trace.json"
BLOB_DIR = "blobs"

# variable-name stems for the pointers these functions return (anything else: p)
_STEMS = {
    "ggml_init": "ctx", "ggml_new_graph_custom": "graph", "ggml_backend_alloc_ctx_tensors": "buf",
    "ggml_backend_dev_by_name": "dev", "ggml_backend_dev_get": "dev", "ggml_backend_dev_init": "backend",
    "ggml_backend_get_default_buffer_type": "buft", "ggml_gallocr_new": "galloc",
    "ggml_backend_dev_backend_reg": "reg", "ggml_backend_reg_get_proc_address": "proc",
}


def _address(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, int):
        return value or None
    return C.cast(value, C.c_void_p).value


def _float_literal(value: float) -> str:
    """The float32 ``value`` as the C expression that gives exactly it."""
    x = float(np.float32(value))
    if math.isnan(x):
        return "NAN"
    if math.isinf(x):
        return "INFINITY" if x > 0 else "-INFINITY"
    return f"{x.hex()}f"


def _double_literal(value: float) -> str:
    x = float(value)
    if math.isnan(x):
        return "NAN"
    if math.isinf(x):
        return "INFINITY" if x > 0 else "-INFINITY"
    return x.hex()


def _string_literal(raw: bytes) -> str:
    return json.dumps(raw.decode("latin-1")).replace("\\u00", "\\x") if raw is not None else "NULL"


_ARRAY_C_TYPE = {C.c_int64: "int64_t", C.c_int: "int", C.c_int32: "int32_t", C.c_float: "float"}


class Tracer:
    """The open trace of one worker process: the statement file, the blob counter, the handle names."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.pid = os.getpid()
        (folder / BLOB_DIR).mkdir(parents=True, exist_ok=True)
        self._out = open(folder / f"calls.{os.getpid()}.c.part", "a", buffering=1)  # noqa: SIM115 (process' life)
        self._names: dict[int, str] = {}
        self._freed: dict[int, str] = {}  # handles passed to a free, until ggml returns the address again
        self._counts: dict[str, int] = {}
        self._blobs = 0
        self._cases = 0

    # -- naming --------------------------------------------------------------------------------
    def _new_name(self, stem: str) -> str:
        self._counts[stem] = self._counts.get(stem, 0) + 1
        return f"{stem}{self._counts[stem]}"

    def _pointer(self, value: Any) -> str:
        addr = _address(value)
        if addr is None:
            return "NULL"
        name = self._names.get(addr)
        if name is None and addr in self._freed:  # worth seeing in the program: a use after free
            name = self._freed[addr]
            self.emit(f"    /* NOTE: {name} was freed above and is used again here */")
        if name is None:  # not a pointer ggml gave us: the C program cannot know it
            raise TraceError(f"pointer {addr:#x} that no traced ggml call returned")
        return name

    # -- statements ----------------------------------------------------------------------------
    def emit(self, line: str) -> None:
        self._out.write(line + "\n")
        self._out.flush()

    def case_begins(self, label: str) -> None:
        self._cases += 1
        self.emit(f"    /* case {self._cases}: {label.replace('*/', '* /')} */")
        self.emit(f"    case_begins({self._cases}, {_string_literal(label.encode())});")

    def case_ends(self) -> None:
        self.emit(f"    case_ends({self._cases});")

    def call(self, name: str, restype: Any, argtypes: tuple[Any, ...], args: tuple[Any, ...], result: Any) -> None:
        pre: list[str] = []
        c_args = [self._argument(name, i, t, a, args, pre)
                  for i, (t, a) in enumerate(zip(argtypes, args, strict=False))]
        expr = f"{name}({', '.join(c_args)})"
        lines = list(pre)
        if restype is None:
            lines.append(f"{expr};")
        elif name == "ggml_backend_graph_compute":
            lines.append(f"check_status({expr}, {_string_literal(name.encode())});")
        elif restype is C.c_void_p or _is_tensor_pointer(restype):
            addr = _address(result)
            if addr is None:
                lines.append(f"(void){expr};  /* returned NULL */")
            else:
                tensor = _is_tensor_pointer(restype)
                var = self._new_name("t" if tensor else _STEMS.get(name, "p"))
                lines.append(f"{'struct ggml_tensor *' if tensor else 'void *'}{var} = {expr};")
                self._names[addr] = var
                self._freed.pop(addr, None)
        else:
            lines.append(f"(void){expr};")
        for line in lines:
            self.emit("    " + line)

    def forget(self, value: Any) -> None:
        """A freed handle: its address may come back from a later call as a new one."""
        addr = _address(value)
        if addr is not None and addr in self._names:
            self._freed[addr] = self._names.pop(addr)

    def _argument(self, name: str, index: int, ctype: Any, value: Any, args: tuple[Any, ...], pre: list[str]) -> str:
        if ctype is C.c_float:
            return _float_literal(value)
        if ctype is C.c_double:
            return _double_literal(value)
        if ctype is C.c_bool:
            return "true" if value else "false"
        if ctype in (C.c_int, C.c_int32, C.c_int64, C.c_uint32, C.c_size_t):
            return str(int(value))
        if ctype is C.c_char_p:
            if name == "ggml_backend_dev_by_name":  # REPRO_DEVICE=CPU runs the same calls on another device
                return f"device_name({_string_literal(value)})"
            if name == "ggml_backend_load_all_from_path" and value:  # the program runs from its own folder
                return _string_literal(os.path.abspath(value))
            return _string_literal(value)
        if _is_tensor_pointer(ctype):
            return self._pointer(value)
        if ctype is C.c_void_p:
            return self._void_pointer(name, index, value, args, pre)
        if isinstance(ctype, type) and issubclass(ctype, C.Structure):  # struct ggml_init_params by value
            fields = ", ".join(f".{f} = {self._field(getattr(value, f))}" for f, *_ in ctype._fields_)
            return f"(struct ggml_init_params){{{fields}}}"
        target = getattr(ctype, "_type_", None)
        if target is C.c_size_t:  # an out-parameter (ggml_backend_dev_memory)
            var = self._new_name("size_out")
            pre.append(f"size_t {var} = 0;")
            return f"&{var}"
        if target in _ARRAY_C_TYPE:
            if value is None:
                return "NULL"
            items = list(value)
            fmt = _float_literal if target is C.c_float else (lambda v: str(int(v)))
            return f"({_ARRAY_C_TYPE[target]}[]){{{', '.join(fmt(v) for v in items)}}}"
        raise TraceError(f"{name}: no C form for an argument of type {ctype!r}")

    def _void_pointer(self, name: str, index: int, value: Any, args: tuple[Any, ...], pre: list[str]) -> str:
        """A handle, or the host buffer of a tensor_set (its bytes: a blob) or tensor_get (scratch)."""
        if name == "ggml_backend_tensor_set" and index == 1:
            size = int(args[3])
            blob = self._save_blob(C.string_at(int(value), size))
            var = self._new_name("bytes")
            pre.append(f"void *{var} = read_blob({_string_literal(blob.encode())}, {size});")
            return var
        if name == "ggml_backend_tensor_get" and index == 1:
            var = self._new_name("scratch")
            pre.append(f"void *{var} = scratch({int(args[3])});")
            return var
        return self._pointer(value)

    def _field(self, value: Any) -> str:
        if value is None:
            return "NULL"
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    def _save_blob(self, data: bytes) -> str:
        self._blobs += 1
        rel = f"{BLOB_DIR}/{self.pid}-{self._blobs:06d}.bin"
        (self.folder / rel).write_bytes(data)
        return rel


class TraceError(Exception):
    """A call the C program cannot replay (an argument the tracer has no C form for)."""


def _is_tensor_pointer(ctype: Any) -> bool:
    return getattr(ctype, "_type_", None) is not None and getattr(ctype._type_, "__name__", "") == "GgmlTensor"


_TRACER: list[Tracer] = []  # the process' tracer, once opened
_FREES = {"ggml_free", "ggml_backend_buffer_free", "ggml_gallocr_free", "ggml_backend_free"}


def active() -> Tracer | None:
    """The process' tracer when :data:`TRACE_ENV` is set, else None (tracing off)."""
    if _TRACER and _TRACER[0].pid == os.getpid():
        return _TRACER[0]
    _TRACER.clear()  # a forked child starts its own trace
    folder = os.environ.get(TRACE_ENV)
    if not folder:
        return None
    _TRACER.append(Tracer(Path(folder)))
    return _TRACER[0]


def traced(name: str, fn: Callable[..., Any], restype: Any, argtypes: tuple[Any, ...]) -> Callable[..., Any]:
    """``fn`` itself when tracing is off; else a function that calls it and records the call."""
    tracer = active()
    if tracer is None:
        return fn

    returns_handle = restype is C.c_void_p or _is_tensor_pointer(restype)

    def call(*args: Any) -> Any:
        if returns_handle:  # its variable needs the address it returns
            result = fn(*args)
            tracer.call(name, restype, argtypes, args, result)
        else:  # written first: a call that kills the worker is the program's last statement
            tracer.call(name, restype, argtypes, args, None)
            result = fn(*args)
        if name in _FREES and args:
            tracer.forget(args[0])
        return result

    call.__name__ = name
    return call


def record_library(files: Any, version: str) -> None:
    """The libraries the traced worker loaded, for the build line (``DIR/trace.json``)."""
    tracer = active()
    if tracer is None:
        return
    meta = {"folder": os.path.abspath(files.folder), "base": files.base.name, "registry": files.registry.name,
            "version": version, "env": {k: v for k, v in os.environ.items() if k == "GGML_VK_VISIBLE_DEVICES"}}
    (tracer.folder / META_FILE).write_text(json.dumps(meta, indent=1))


def note_function_pointer_call(pointer: Any, c_type: str, args: tuple[Any, ...]) -> None:
    """A call through a pointer a traced ``ggml_backend_reg_get_proc_address`` returned (the CPU
    backend's ``ggml_backend_set_n_threads``); ``args``: handles or ints."""
    tracer = active()
    if tracer is None:
        return
    c_args = [str(a) if isinstance(a, int) and _address(a) not in tracer._names else tracer._pointer(a) for a in args]
    tracer.emit(f"    (({c_type}){tracer._pointer(pointer)})({', '.join(c_args)});")


def note_case(label: str | None) -> None:
    """A worker request begins (label) or ends (None): the C program prints a line per case."""
    tracer = active()
    if tracer is None:
        return
    if label is None:
        tracer.case_ends()
    else:
        tracer.case_begins(label)


# ---- the C program -------------------------------------------------------------------------------

_PROLOGUE = r"""/* Replays, call for call, the ggml API calls a conformance-harness worker made
 * (conform repro --emit-c).
 * Written by the harness; build with build.sh, run from this folder: ./repro [BLOB_DIR]
 * (REPRO_DEVICE=NAME replays the calls on another device of the same library, e.g. CPU)
 * %(what)s
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"

static const char *blob_dir = "blobs";

static void *read_blob(const char *name, size_t size) {
    char path[4096];
    const char *base = name;
    for (const char *c = name; *c; c++) if (*c == '/') base = c + 1;  /* blobs/N.bin -> N.bin */
    snprintf(path, sizeof path, "%%s/%%s", blob_dir, base);
    FILE *f = fopen(path, "rb");
    void *data = malloc(size ? size : 1);
    if (!f || !data || fread(data, 1, size, f) != size) { fprintf(stderr, "cannot read %%s\n", path); exit(2); }
    fclose(f);
    return data;  /* freed at exit: the harness's buffers lived as long */
}

static const char *device_name(const char *recorded) {
    const char *chosen = getenv("REPRO_DEVICE");
    return chosen && *chosen ? chosen : recorded;
}

static void *scratch(size_t size) {
    void *data = malloc(size ? size : 1);
    if (!data) { fprintf(stderr, "out of memory\n"); exit(2); }
    return data;
}

static void check_status(int status, const char *what) {
    if (status != 0) printf("  %%s returned status %%d\n", what, status);
}

static void case_begins(int n, const char *id) { fprintf(stderr, "case %%d begins: %%s\n", n, id); }
static void case_ends(int n) { printf("case %%d done\n", n); fflush(stdout); }

int main(int argc, char **argv) {
    if (argc > 1) blob_dir = argv[1];
%(env)s"""

_EPILOGUE = """    printf("end of the recorded calls%s\\n");
    return 0;
}
"""


def worker_calls(folder: Path) -> str:
    """The statements of the process that ran the cases (the one whose trace marks the most; the
    harness's own process loads ggml only to list and check devices)."""
    traces = [p.read_text() for p in sorted(folder.glob(CALLS_GLOB), key=lambda p: p.stat().st_mtime)]
    return max(traces, key=lambda t: t.count("    case_begins("), default="")


def write_program(folder: Path, what: str, include_dir: Path | None) -> tuple[Path, Path]:
    """``DIR/repro.c`` from the recorded calls (complete, or cut short where the worker died: a case
    that began and never ended) and ``DIR/build.sh``."""
    meta = json.loads((folder / META_FILE).read_text())
    body = worker_calls(folder)
    died = body.count("    case_begins(") > body.count("    case_ends(")
    cut = " (the harness's worker died here)" if died else ""
    env = "".join(f"    setenv({_string_literal(k.encode())}, {_string_literal(v.encode())}, 0);\n"
                  for k, v in meta.get("env", {}).items())
    source = _PROLOGUE % {"what": what.replace("*/", "* /"), "env": env}
    program = folder / "repro.c"
    program.write_text(source + body + _EPILOGUE % cut)
    lib = meta["folder"]
    inc = str(include_dir) if include_dir else "INCLUDE_DIR_WITH_ggml.h"
    build = folder / "build.sh"
    build.write_text(
        "#!/bin/sh\n# ggml " + meta.get("version", "?") + " in " + lib + "\nset -e\ncd \"$(dirname \"$0\")\"\n"
        f"L={shlex.quote(lib)}\n"
        f"gcc -std=gnu11 -O1 -g -o repro repro.c -I{shlex.quote(inc)} -L\"$L\" -l:{meta['registry']} "
        f"-l:{meta['base']} -lm -Wl,-rpath,\"$L\"\n"
        "echo \"built $(pwd)/repro; run: cd $(pwd) && ./repro\"\n")
    build.chmod(0o755)
    return program, build

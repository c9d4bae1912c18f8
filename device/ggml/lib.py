"""ctypes bindings to ggml's core and backend API (libggml-base, libggml), bound by what the loaded
library is.

Each bound function is a typed attribute of :class:`GgmlApi`; its ctypes prototype is derived from
that annotation (``Annotated[python type, ctypes type]``), so mypy checks the callers and ctypes
checks the calls against one declaration.

Releases. The prototypes and ``struct ggml_tensor`` were read from the headers of ggml 0.0.1
(libggml-python 0.3.5), 0.9.4, 0.9.11, 0.13.1, 0.15.3, 0.16.0, 0.17.0, 0.20.2 and 0.25.1
(:data:`HEADER_CHECKED_RELEASES`): the struct and every bound prototype are the same in all of them;
what differs is which symbols exist (``ggml_pad_ext`` is newer than 0.0.1) and enum values
(``enum ggml_backend_dev_type`` gained IGPU at 0.9.1). Loading a library therefore

1. reads ``ggml_version()``;
2. verifies ``struct ggml_tensor`` against the library itself (:func:`probe_tensor_layout`: builds
   tensors and views through ggml and reads every field back) -- a mismatch is refused in one line;
3. binds each symbol; a missing core symbol is refused in one line, a missing op constructor makes
   only the ops that call it unsupported (:class:`MissingSymbol` raises ``Unsupported``).

Library location: ``GGML_LIB_DIR`` or an explicit directory (a llama.cpp build puts ``libggml*.so``
in ``build/bin``), else the ``libggml-python`` wheel's ``lib64``. libggml may carry a suffix
(``libggml.vulkan.v0.5.0.so`` in node-llama-cpp's packages); it is chosen when the choice is
unambiguous.
"""

from __future__ import annotations

import ctypes as C
import os
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeAlias

from device import build_tag
from device.base import DeviceError, Unsupported
from device.ggml import startup_log, trace

DEFAULT_GGML_VERSION = "0.20.2"  # the libggml-python wheel's, the harness's calibration release
# releases whose ggml.h / ggml-backend.h / ggml-alloc.h were read for the prototypes below
HEADER_CHECKED_RELEASES = ("0.0.1", "0.9.4", "0.9.11", "0.13.1", "0.15.3", "0.16.0", "0.17.0", "0.20.2", "0.25.1")

GGML_MAX_DIMS = 4
GGML_MAX_OP_PARAMS = 64
GGML_MAX_SRC = 10
GGML_MAX_NAME = 64
GGML_OBJECT_SIZE = 32  # sizeof(struct ggml_object): offs, size, next, type, padding[4]


class GgmlLibraryError(DeviceError):
    """The ggml library cannot be found, loaded, or does not match what we bind."""


class GgmlTensor(C.Structure):
    """``struct ggml_tensor`` (the same in every release of :data:`HEADER_CHECKED_RELEASES`);
    read-only use: ne/nb/type/view info/name."""


GgmlTensor._fields_ = [
    ("type", C.c_int),
    ("buffer", C.c_void_p),
    ("ne", C.c_int64 * GGML_MAX_DIMS),
    ("nb", C.c_size_t * GGML_MAX_DIMS),
    ("op", C.c_int),
    ("op_params", C.c_int32 * (GGML_MAX_OP_PARAMS // 4)),
    ("flags", C.c_int32),
    ("src", C.POINTER(GgmlTensor) * GGML_MAX_SRC),
    ("view_src", C.POINTER(GgmlTensor)),
    ("view_offs", C.c_size_t),
    ("data", C.c_void_p),
    ("name", C.c_char * GGML_MAX_NAME),
    ("extra", C.c_void_p),
    ("padding", C.c_char * 8),
]

TENSOR_POINTER = C.POINTER(GgmlTensor)
if TYPE_CHECKING:
    TensorP: TypeAlias = C._Pointer[GgmlTensor]
else:
    TensorP = TENSOR_POINTER


class GgmlInitParams(C.Structure):
    _fields_ = [("mem_size", C.c_size_t), ("mem_buffer", C.c_void_p), ("no_alloc", C.c_bool)]


# Argument and result types: the Python type callers see, annotated with the ctypes type bound.
# Opaque pointers (contexts, graphs, backends, buffers) come back from ctypes as int, or None for NULL.
Ptr: TypeAlias = Annotated[int | None, C.c_void_p]
Tensor: TypeAlias = Annotated[TensorP, TENSOR_POINTER]
OptTensor: TypeAlias = Annotated[TensorP | None, TENSOR_POINTER]
Int: TypeAlias = Annotated[int, C.c_int]
I64: TypeAlias = Annotated[int, C.c_int64]
U32: TypeAlias = Annotated[int, C.c_uint32]
Size: TypeAlias = Annotated[int, C.c_size_t]
Float: TypeAlias = Annotated[float, C.c_float]
Bool: TypeAlias = Annotated[bool, C.c_bool]
Str: TypeAlias = Annotated[bytes, C.c_char_p]
OptStr: TypeAlias = Annotated[bytes | None, C.c_char_p]
InitParams: TypeAlias = Annotated[GgmlInitParams, GgmlInitParams]
SizeOut: TypeAlias = Annotated[Any, C.POINTER(C.c_size_t)]  # C.byref(c_size_t)
FloatArray: TypeAlias = Annotated[Any, C.POINTER(C.c_float)]
I64Array: TypeAlias = Annotated[Any, C.POINTER(C.c_int64)]


class GgmlApi:
    """Every bound ggml function, with its prototype (ggml.h / ggml-backend.h / ggml-alloc.h)."""

    # -- core: every release must have these, or the library is refused ------------------------
    ggml_version: Callable[[], OptStr]
    ggml_commit: Callable[[], OptStr]
    ggml_init: Callable[[InitParams], Ptr]
    ggml_free: Callable[[Ptr], None]
    ggml_tensor_overhead: Callable[[], Size]
    ggml_graph_overhead_custom: Callable[[Size, Bool], Size]
    ggml_new_tensor: Callable[[Ptr, Int, Int, I64Array], Tensor]
    ggml_set_name: Callable[[Tensor, Str], Tensor]
    ggml_nbytes: Callable[[Tensor], Size]
    ggml_op_desc: Callable[[Tensor], OptStr]
    ggml_type_name: Callable[[Int], OptStr]
    ggml_new_graph_custom: Callable[[Ptr, Size, Bool], Ptr]
    ggml_build_forward_expand: Callable[[Ptr, Tensor], None]
    ggml_backend_alloc_ctx_tensors: Callable[[Ptr, Ptr], Ptr]
    ggml_backend_buffer_free: Callable[[Ptr], None]
    ggml_backend_buffer_get_base: Callable[[Ptr], Ptr]
    ggml_backend_buffer_get_size: Callable[[Ptr], Size]
    ggml_backend_buft_get_alloc_size: Callable[[Ptr, Tensor], Size]
    ggml_backend_get_default_buffer_type: Callable[[Ptr], Ptr]
    ggml_backend_tensor_set: Callable[[Tensor, Ptr, Size, Size], None]
    ggml_backend_tensor_get: Callable[[Tensor, Ptr, Size, Size], None]
    ggml_backend_graph_compute: Callable[[Ptr, Ptr], Int]
    ggml_backend_supports_op: Callable[[Ptr, Tensor], Bool]
    ggml_backend_synchronize: Callable[[Ptr], None]
    ggml_backend_free: Callable[[Ptr], None]
    ggml_backend_dev_name: Callable[[Ptr], Str]
    ggml_backend_dev_description: Callable[[Ptr], OptStr]
    ggml_backend_dev_memory: Callable[[Ptr, SizeOut, SizeOut], None]
    ggml_backend_dev_type: Callable[[Ptr], Int]
    ggml_backend_dev_backend_reg: Callable[[Ptr], Ptr]
    ggml_backend_dev_init: Callable[[Ptr, OptStr], Ptr]
    ggml_backend_reg_name: Callable[[Ptr], Str]
    ggml_backend_reg_get_proc_address: Callable[[Ptr, Str], Ptr]
    # graph construction used for every case: views and layouts of the inputs
    ggml_view_4d: Callable[[Ptr, Tensor, I64, I64, I64, I64, Size, Size, Size, Size], Tensor]
    ggml_permute: Callable[[Ptr, Tensor, Int, Int, Int, Int], Tensor]
    ggml_add: Callable[[Ptr, Tensor, Tensor], Tensor]
    ggml_scale: Callable[[Ptr, Tensor, Float], Tensor]
    # libggml (the backend registry)
    ggml_backend_load_all_from_path: Callable[[OptStr], None]
    ggml_backend_dev_count: Callable[[], Size]
    ggml_backend_dev_get: Callable[[Size], Ptr]
    ggml_backend_dev_by_name: Callable[[Str], Ptr]

    # -- op constructors: a release without one cannot run the ops that call it ------------------
    ggml_quantize_chunk: Callable[[Int, FloatArray, Ptr, I64, I64, I64, FloatArray], Size]
    ggml_transpose: Callable[[Ptr, Tensor], Tensor]
    ggml_reshape_4d: Callable[[Ptr, Tensor, I64, I64, I64, I64], Tensor]
    ggml_cont_4d: Callable[[Ptr, Tensor, I64, I64, I64, I64], Tensor]
    ggml_mul: Callable[[Ptr, Tensor, Tensor], Tensor]
    ggml_div: Callable[[Ptr, Tensor, Tensor], Tensor]
    ggml_scale_bias: Callable[[Ptr, Tensor, Float, Float], Tensor]
    ggml_sqr: Callable[[Ptr, Tensor], Tensor]
    ggml_clamp: Callable[[Ptr, Tensor, Float, Float], Tensor]
    ggml_leaky_relu: Callable[[Ptr, Tensor, Float, Bool], Tensor]
    ggml_unary: Callable[[Ptr, Tensor, Int], Tensor]
    ggml_norm: Callable[[Ptr, Tensor, Float], Tensor]
    ggml_rms_norm: Callable[[Ptr, Tensor, Float], Tensor]
    ggml_group_norm: Callable[[Ptr, Tensor, Int, Float], Tensor]
    ggml_soft_max_ext: Callable[[Ptr, Tensor, OptTensor, Float, Float], Tensor]
    ggml_soft_max_add_sinks: Callable[[Tensor, Tensor], None]
    ggml_diag_mask_inf: Callable[[Ptr, Tensor, Int], Tensor]
    ggml_rope_ext: Callable[
        [Ptr, Tensor, Tensor, OptTensor, Int, Int, Int, Float, Float, Float, Float, Float, Float], Tensor
    ]
    ggml_mul_mat: Callable[[Ptr, Tensor, Tensor], Tensor]
    ggml_im2col: Callable[[Ptr, Tensor, Tensor, Int, Int, Int, Int, Int, Int, Bool, Int], Tensor]
    ggml_pool_2d: Callable[[Ptr, Tensor, Int, Int, Int, Int, Int, Float, Float], Tensor]
    ggml_timestep_embedding: Callable[[Ptr, Tensor, Int, Int], Tensor]
    ggml_dup: Callable[[Ptr, Tensor], Tensor]
    ggml_cont: Callable[[Ptr, Tensor], Tensor]
    ggml_cpy: Callable[[Ptr, Tensor, Tensor], Tensor]
    ggml_repeat: Callable[[Ptr, Tensor, Tensor], Tensor]
    ggml_concat: Callable[[Ptr, Tensor, Tensor, Int], Tensor]
    ggml_get_rows: Callable[[Ptr, Tensor, Tensor], Tensor]
    ggml_acc: Callable[[Ptr, Tensor, Tensor, Size, Size, Size, Size], Tensor]
    ggml_acc_inplace: Callable[[Ptr, Tensor, Tensor, Size, Size, Size, Size], Tensor]
    ggml_pad: Callable[[Ptr, Tensor, Int, Int, Int, Int], Tensor]
    ggml_pad_ext: Callable[[Ptr, Tensor, Int, Int, Int, Int, Int, Int, Int, Int], Tensor]
    ggml_upscale: Callable[[Ptr, Tensor, Int, Int], Tensor]
    ggml_interpolate: Callable[[Ptr, Tensor, I64, I64, I64, I64, U32], Tensor]
    ggml_arange: Callable[[Ptr, Float, Float, Float], Tensor]
    ggml_argsort: Callable[[Ptr, Tensor, Int], Tensor]
    ggml_sum_rows: Callable[[Ptr, Tensor], Tensor]


# the symbols libggml (not libggml-base) exports
REGISTRY_SYMBOL_NAMES = frozenset(
    {"ggml_backend_load_all_from_path", "ggml_backend_dev_count", "ggml_backend_dev_get", "ggml_backend_dev_by_name"}
)
FIRST_OPTIONAL_SYMBOL = "ggml_quantize_chunk"  # GgmlApi declares core symbols first, then op constructors
# core symbols a release may predate: llama.cpp b5640's ggml (node-llama-cpp 3.10.0) has neither; where
# ggml_version is missing its version is unknown ("") and older than ggml 0.9.1 (dev_type_names)
PREDATED_CORE = frozenset({"ggml_version", "ggml_commit"})


@dataclass(frozen=True)
class Prototype:
    name: str
    restype: Any
    argtypes: tuple[Any, ...]
    core: bool
    in_registry: bool


def _ctype_of(hint: Any) -> Any:
    if hint is None or hint is type(None):
        return None
    args = typing.get_args(hint)
    if typing.get_origin(hint) is not Annotated or len(args) < 2:
        raise TypeError(f"GgmlApi prototypes need Annotated[type, ctype] arguments, got {hint!r}")
    return args[1]


def prototypes() -> dict[str, Prototype]:
    """The ctypes prototypes, read from :class:`GgmlApi`'s annotations (in declaration order)."""
    hints = typing.get_type_hints(GgmlApi, include_extras=True)
    out: dict[str, Prototype] = {}
    core = True
    for name, hint in hints.items():
        if name == FIRST_OPTIONAL_SYMBOL:
            core = False
        arg_hints, result = typing.get_args(hint)
        out[name] = Prototype(name, _ctype_of(result), tuple(_ctype_of(a) for a in arg_hints), core,
                              name in REGISTRY_SYMBOL_NAMES)
    return out


class MissingSymbol:
    """Stands in for an op constructor the loaded release does not export: calling it declines
    the case (``Unsupported``, an 'unsupported' record that names the symbol and the release)."""

    def __init__(self, name: str, version: str) -> None:
        self.name = name
        self.version = version

    def __call__(self, *args: object) -> Any:
        raise Unsupported(f"ggml {self.version} has no {self.name}()")


def parse_version(text: str) -> tuple[int, ...]:
    """'0.25.1' -> (0, 25, 1); trailing non-numeric parts ('0.25.1-dirty') are ignored."""
    match = re.match(r"\s*(\d+(?:\.\d+)*)", text or "")
    return tuple(int(p) for p in match.group(1).split(".")) if match else ()


def dev_type_names(version: str) -> dict[int, str]:
    """``enum ggml_backend_dev_type`` of a release: IGPU was inserted before ACCEL at ggml 0.9.1."""
    parsed = parse_version(version)
    if parsed and parsed < (0, 9, 1):
        return {0: "cpu", 1: "gpu", 2: "accel"}
    return {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}


# ---- finding the libraries in a folder --------------------------------------------------------

def wheel_lib_dir() -> Path | None:
    try:
        import libggml  # the libggml-python wheel
    except ImportError:
        return None
    return Path(libggml.__file__).parent / "lib64"


def _pick_library(folder: Path, stem: str) -> Path | None:
    """``stem.so`` if present; else the one ``stem.<suffix>.so`` / ``stem.so.<n>`` library here.

    Several names of one library (``libggml.so.0`` and ``libggml.so.0.17.0``, or links to one file)
    count once; distinct libraries are ambiguous and named in the error."""
    exact = folder / f"{stem}.so"
    if exact.exists():
        return exact
    found = sorted({*folder.glob(f"{stem}.*.so"), *folder.glob(f"{stem}.so.*")})
    if not found:
        return None
    distinct: dict[Path, Path] = {}
    for path in found:
        distinct.setdefault(path.resolve(), path)
    names = sorted(distinct.values(), key=lambda p: (len(p.name), p.name))
    if all(re.fullmatch(re.escape(stem) + r"\.so(\.\d+)+", p.name) for p in names):
        return names[0]  # one soname chain (copies in a wheel): the shortest, as the loader would pick
    if len(names) > 1:
        raise GgmlLibraryError(
            f"{folder}: more than one {stem} library here ({', '.join(p.name for p in names)}); "
            "point --ggml-lib at a folder with one, or add a link named " + f"{stem}.so"
        )
    return names[0]


@dataclass(frozen=True)
class LibraryFiles:
    folder: Path
    base: Path  # libggml-base
    registry: Path  # libggml (the backend registry)


def find_libraries(lib_dir: str | os.PathLike[str] | None = None) -> LibraryFiles:
    chosen = lib_dir or os.environ.get("GGML_LIB_DIR") or wheel_lib_dir()
    if chosen is None:
        raise GgmlLibraryError(
            "no ggml library: install libggml-python==0.20.2.post1 or pass --ggml-lib DIR / set GGML_LIB_DIR"
        )
    path = Path(chosen).expanduser()
    base = _pick_library(path, "libggml-base")
    registry = _pick_library(path, "libggml")
    if base is None or registry is None:
        raise GgmlLibraryError(
            f"{path}: no libggml-base.so and libggml.so (or libggml.*.so) here (not a ggml build directory)"
        )
    return LibraryFiles(path, base, registry)


def resolve_lib_dir(lib_dir: str | os.PathLike[str] | None = None) -> Path:
    return find_libraries(lib_dir).folder


# ---- the struct layout, checked against the library itself -------------------------------------

def _address(p: Any) -> int | None:
    return C.cast(p, C.c_void_p).value


def probe_tensor_layout(api: GgmlApi) -> str | None:
    """Build tensors through the library and read their fields back through :class:`GgmlTensor`.

    Returns None when every checked field reads back as ggml wrote it, else a short description of
    the first mismatch (this is the check behind "verified incompatible")."""
    overhead = api.ggml_tensor_overhead()
    if overhead != GGML_OBJECT_SIZE + C.sizeof(GgmlTensor):
        return (f"ggml_tensor_overhead() is {overhead} bytes, the layout here needs "
                f"{GGML_OBJECT_SIZE} + {C.sizeof(GgmlTensor)} (sizeof struct ggml_tensor differs)")
    ctx = api.ggml_init(GgmlInitParams(overhead * 8 + 1024, None, True))
    if not ctx:
        return "ggml_init failed"
    try:
        ne = (5, 7, 3, 2)
        t = api.ggml_new_tensor(ctx, 0, 4, (C.c_int64 * 4)(*ne))  # F32
        api.ggml_set_name(t, b"conform-probe")
        view = api.ggml_view_4d(ctx, t, 2, 3, 1, 1, 20, 140, 420, 8)
        scaled = api.ggml_scale(ctx, t, 2.5)
        summed = api.ggml_add(ctx, t, scaled)
        a, v, s, y = t.contents, view.contents, scaled.contents, summed.contents
        checks: list[tuple[str, object, object]] = [
            ("type", a.type, 0),
            ("ne", tuple(a.ne), ne),
            ("nb", tuple(a.nb), (4, 20, 140, 420)),
            ("name", a.name, b"conform-probe"),
            ("buffer", a.buffer, None),
            ("data", a.data, None),
            ("view_src", _address(v.view_src), _address(t)),
            ("view_offs", v.view_offs, 8),
            ("view ne", tuple(v.ne), (2, 3, 1, 1)),
            ("src[0]", _address(s.src[0]), _address(t)),
            ("op_params", C.cast(C.pointer(s.op_params), C.POINTER(C.c_float))[0], 2.5),
            ("src[1]", _address(y.src[1]), _address(scaled)),
            ("src[2..]", [_address(p) for p in y.src[2:]], [None] * (GGML_MAX_SRC - 2)),
        ]
        for field, got, want in checks:
            if got != want:
                return f"struct ggml_tensor field {field} reads {got!r} where ggml wrote {want!r}"
        return None
    finally:
        api.ggml_free(ctx)


# ---- loading ------------------------------------------------------------------------------------

class GgmlLib(GgmlApi):
    """The loaded ggml libraries with every symbol bound; one per process and folder."""

    def __init__(self, lib_dir: str | os.PathLike[str] | None = None) -> None:
        files = find_libraries(lib_dir)
        self.lib_dir = files.folder
        self.files = files
        try:
            # RTLD_GLOBAL so backends loaded later by the registry resolve against this base
            self.base = C.CDLL(str(files.base), mode=C.RTLD_GLOBAL)
            self.registry = C.CDLL(str(files.registry), mode=C.RTLD_GLOBAL)
        except OSError as exc:
            raise GgmlLibraryError(f"{self.lib_dir}: cannot load ggml: {exc}") from None
        # the version first: every later message names the release
        version = ""
        try:
            version_fn = self.base.ggml_version
            version_fn.restype, version_fn.argtypes = C.c_char_p, []
            version = (version_fn() or b"").decode(errors="replace")
        except AttributeError:
            pass
        self.version = version
        label = f"ggml {version or '(no ggml_version)'}"
        missing_core: list[str] = []
        self.missing_symbols: list[str] = []  # op constructors this release lacks
        version_bound = hasattr(self.base, "ggml_version")
        for proto in prototypes().values():
            lib = self.registry if proto.in_registry else self.base
            try:
                fn = getattr(lib, proto.name)
            except AttributeError:
                # a release with no ggml_version predates both symbols; with it, a missing ggml_commit is wrong
                if proto.core and not (proto.name in PREDATED_CORE and not version_bound):
                    missing_core.append(proto.name)
                else:
                    self.missing_symbols.append(proto.name)
                    setattr(self, proto.name, MissingSymbol(proto.name, version or "?"))
                continue
            fn.restype = proto.restype
            fn.argtypes = list(proto.argtypes)
            setattr(self, proto.name, trace.traced(proto.name, fn, proto.restype, proto.argtypes))
        if missing_core:
            raise GgmlLibraryError(
                f"{self.lib_dir}: {label} lacks {len(missing_core)} core symbol(s) this harness binds: "
                + ", ".join(missing_core[:8]) + (", ..." if len(missing_core) > 8 else "")
                + f" (bound prototypes read from ggml {HEADER_CHECKED_RELEASES[0]}..{HEADER_CHECKED_RELEASES[-1]})"
            )
        mismatch = probe_tensor_layout(self)
        if mismatch:
            raise GgmlLibraryError(
                f"{self.lib_dir}: {label} is incompatible: {mismatch}; this harness knows the layout of "
                f"ggml {HEADER_CHECKED_RELEASES[0]}..{HEADER_CHECKED_RELEASES[-1]}"
            )
        self.header_checked = version in HEADER_CHECKED_RELEASES
        # the llama.cpp build (b8121): what tells apart releases that report one ggml_version (0.9.7)
        self.folder_build = build_tag.read_build(files.folder)
        self.build = self.folder_build.tag
        self.commit = (self.ggml_commit() or b"").decode() if "ggml_commit" not in self.missing_symbols else ""
        # no ggml_version at all: a release from before it was added, so before 0.9.1's enum
        self.dev_type_names = dev_type_names(version if "ggml_version" not in self.missing_symbols else "0.0.0")
        # ggml-vulkan lists CPU-type Vulkan devices (lavapipe) only when they are named here; the
        # user's own choice wins
        os.environ.setdefault("GGML_VK_VISIBLE_DEVICES", "0")
        trace.record_library(files, version)
        startup_log.install(self.base)  # before the backends load: their banner stays out of the output
        self.ggml_backend_load_all_from_path(str(self.lib_dir).encode())

    def devices(self) -> list[int]:
        return [d for d in (self.ggml_backend_dev_get(i) for i in range(self.ggml_backend_dev_count())) if d]

    def device_names(self) -> list[str]:
        return [self.ggml_backend_dev_name(d).decode() for d in self.devices()]

    def release_info(self) -> dict[str, Any]:
        """What the results header records about the binding."""
        return {
            "ggml_version": self.version,
            "ggml_commit": self.commit,
            "headers_checked": self.header_checked,
            "missing_symbols": list(self.missing_symbols),
            "libraries": [self.files.base.name, self.files.registry.name],
        } | self.folder_build.record()


_LOADED: dict[str, GgmlLib] = {}


def load(lib_dir: str | os.PathLike[str] | None = None) -> GgmlLib:
    """Load (once per process and directory) the ggml libraries."""
    path = str(resolve_lib_dir(lib_dir))
    if path not in _LOADED:
        _LOADED[path] = GgmlLib(path)
    return _LOADED[path]

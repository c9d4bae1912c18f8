"""ctypes bindings to ggml's core and backend API (libggml-base, libggml).

Only what the harness needs is bound, each symbol with its exact prototype from ggml 0.20.2's
headers. Loading checks the library version and that every bound symbol exists, so a mismatched
build is one clear :class:`GgmlLibraryError` rather than a segfault later.

Library location: ``GGML_LIB_DIR`` or an explicit directory (a llama.cpp build with
``-DGGML_CANN=on`` puts ``libggml*.so`` and ``libggml-cann.so`` in ``build/bin``), else the
``libggml-python`` wheel's ``lib64``.
"""

from __future__ import annotations

import ctypes as C
import os
from pathlib import Path

from device.base import DeviceError

PINNED_GGML_VERSION = "0.20.2"

GGML_MAX_DIMS = 4
GGML_MAX_OP_PARAMS = 64
GGML_MAX_SRC = 10
GGML_MAX_NAME = 64


class GgmlLibraryError(DeviceError):
    """The ggml library cannot be found, loaded, or does not match what we bind."""


class GgmlTensor(C.Structure):
    """``struct ggml_tensor`` (ggml.h 0.20.2); read-only use: ne/nb/type/view info/name."""


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

TensorP = C.POINTER(GgmlTensor)


class GgmlInitParams(C.Structure):
    _fields_ = [("mem_size", C.c_size_t), ("mem_buffer", C.c_void_p), ("no_alloc", C.c_bool)]


_p = C.c_void_p
_t = TensorP
_i = C.c_int
_f = C.c_float
_i64 = C.c_int64
_sz = C.c_size_t
_b = C.c_bool
_s = C.c_char_p

# name -> (restype, argtypes). Every entry must resolve when the library loads.
BASE_SYMBOLS: dict[str, tuple[object, list[object]]] = {
    "ggml_version": (_s, []),
    "ggml_commit": (_s, []),
    "ggml_init": (_p, [GgmlInitParams]),
    "ggml_free": (None, [_p]),
    "ggml_tensor_overhead": (_sz, []),
    "ggml_graph_overhead_custom": (_sz, [_sz, _b]),
    "ggml_new_tensor": (_t, [_p, _i, _i, C.POINTER(_i64)]),
    "ggml_set_name": (_t, [_t, _s]),
    "ggml_nbytes": (_sz, [_t]),
    "ggml_op_desc": (_s, [_t]),
    "ggml_new_graph_custom": (_p, [_p, _sz, _b]),
    "ggml_build_forward_expand": (None, [_p, _t]),
    "ggml_backend_alloc_ctx_tensors": (_p, [_p, _p]),
    "ggml_backend_buffer_free": (None, [_p]),
    "ggml_backend_buffer_get_base": (_p, [_p]),
    "ggml_backend_buffer_get_size": (_sz, [_p]),
    "ggml_backend_buft_get_alloc_size": (_sz, [_p, _t]),
    "ggml_backend_get_default_buffer_type": (_p, [_p]),
    "ggml_backend_tensor_set": (None, [_t, _p, _sz, _sz]),
    "ggml_backend_tensor_get": (None, [_t, _p, _sz, _sz]),
    "ggml_backend_graph_compute": (_i, [_p, _p]),
    "ggml_backend_supports_op": (_b, [_p, _t]),
    "ggml_backend_synchronize": (None, [_p]),
    "ggml_backend_free": (None, [_p]),
    "ggml_backend_dev_name": (_s, [_p]),
    "ggml_backend_dev_description": (_s, [_p]),
    "ggml_backend_dev_memory": (None, [_p, C.POINTER(_sz), C.POINTER(_sz)]),
    "ggml_backend_dev_type": (_i, [_p]),
    "ggml_backend_dev_backend_reg": (_p, [_p]),
    "ggml_backend_dev_init": (_p, [_p, _s]),
    "ggml_backend_reg_name": (_s, [_p]),
    "ggml_backend_reg_get_proc_address": (_p, [_p, _s]),
    "ggml_quantize_chunk": (_sz, [_i, C.POINTER(_f), _p, _i64, _i64, _i64, C.POINTER(_f)]),
    # graph construction: views and layout
    "ggml_view_4d": (_t, [_p, _t, _i64, _i64, _i64, _i64, _sz, _sz, _sz, _sz]),
    "ggml_permute": (_t, [_p, _t, _i, _i, _i, _i]),
    "ggml_transpose": (_t, [_p, _t]),
    "ggml_reshape_4d": (_t, [_p, _t, _i64, _i64, _i64, _i64]),
    "ggml_cont_4d": (_t, [_p, _t, _i64, _i64, _i64, _i64]),
    # op constructors
    "ggml_add": (_t, [_p, _t, _t]),
    "ggml_mul": (_t, [_p, _t, _t]),
    "ggml_div": (_t, [_p, _t, _t]),
    "ggml_scale": (_t, [_p, _t, _f]),
    "ggml_scale_bias": (_t, [_p, _t, _f, _f]),
    "ggml_sqr": (_t, [_p, _t]),
    "ggml_clamp": (_t, [_p, _t, _f, _f]),
    "ggml_leaky_relu": (_t, [_p, _t, _f, _b]),
    "ggml_unary": (_t, [_p, _t, _i]),
    "ggml_norm": (_t, [_p, _t, _f]),
    "ggml_rms_norm": (_t, [_p, _t, _f]),
    "ggml_group_norm": (_t, [_p, _t, _i, _f]),
    "ggml_soft_max_ext": (_t, [_p, _t, _t, _f, _f]),
    "ggml_soft_max_add_sinks": (None, [_t, _t]),
    "ggml_diag_mask_inf": (_t, [_p, _t, _i]),
    "ggml_rope_ext": (_t, [_p, _t, _t, _t, _i, _i, _i, _f, _f, _f, _f, _f, _f]),
    "ggml_mul_mat": (_t, [_p, _t, _t]),
    "ggml_im2col": (_t, [_p, _t, _t, _i, _i, _i, _i, _i, _i, _b, _i]),
    "ggml_pool_2d": (_t, [_p, _t, _i, _i, _i, _i, _i, _f, _f]),
    "ggml_timestep_embedding": (_t, [_p, _t, _i, _i]),
    "ggml_dup": (_t, [_p, _t]),
    "ggml_cont": (_t, [_p, _t]),
    "ggml_cpy": (_t, [_p, _t, _t]),
    "ggml_repeat": (_t, [_p, _t, _t]),
    "ggml_concat": (_t, [_p, _t, _t, _i]),
    "ggml_get_rows": (_t, [_p, _t, _t]),
    "ggml_acc": (_t, [_p, _t, _t, _sz, _sz, _sz, _sz]),
    "ggml_acc_inplace": (_t, [_p, _t, _t, _sz, _sz, _sz, _sz]),
    "ggml_pad": (_t, [_p, _t, _i, _i, _i, _i]),
    "ggml_pad_ext": (_t, [_p, _t, _i, _i, _i, _i, _i, _i, _i, _i]),
    "ggml_upscale": (_t, [_p, _t, _i, _i]),
    "ggml_interpolate": (_t, [_p, _t, _i64, _i64, _i64, _i64, C.c_uint32]),
    "ggml_arange": (_t, [_p, _f, _f, _f]),
    "ggml_argsort": (_t, [_p, _t, _i]),
    "ggml_sum_rows": (_t, [_p, _t]),
}

# libggml.so (the backend registry)
REGISTRY_SYMBOLS: dict[str, tuple[object, list[object]]] = {
    "ggml_backend_load_all_from_path": (None, [_s]),
    "ggml_backend_dev_count": (_sz, []),
    "ggml_backend_dev_get": (_p, [_sz]),
    "ggml_backend_dev_by_name": (_p, [_s]),
}

def wheel_lib_dir() -> Path | None:
    try:
        import libggml  # the libggml-python wheel
    except ImportError:
        return None
    return Path(libggml.__file__).parent / "lib64"


def resolve_lib_dir(lib_dir: str | os.PathLike[str] | None = None) -> Path:
    chosen = lib_dir or os.environ.get("GGML_LIB_DIR") or wheel_lib_dir()
    if chosen is None:
        raise GgmlLibraryError(
            "no ggml library: install libggml-python==0.20.2.post1 or pass --ggml-lib DIR / set GGML_LIB_DIR"
        )
    path = Path(chosen).expanduser()
    if not (path / "libggml-base.so").exists() or not (path / "libggml.so").exists():
        raise GgmlLibraryError(f"{path}: no libggml-base.so and libggml.so here (not a ggml build directory)")
    return path


class GgmlLib:
    """The loaded ggml libraries with every symbol bound; one per process."""

    def __init__(self, lib_dir: str | os.PathLike[str] | None = None, check_version: bool = True) -> None:
        self.lib_dir = resolve_lib_dir(lib_dir)
        try:
            # RTLD_GLOBAL so backends loaded later by the registry resolve against this base
            self.base = C.CDLL(str(self.lib_dir / "libggml-base.so"), mode=C.RTLD_GLOBAL)
            self.registry = C.CDLL(str(self.lib_dir / "libggml.so"), mode=C.RTLD_GLOBAL)
        except OSError as exc:
            raise GgmlLibraryError(f"{self.lib_dir}: cannot load ggml: {exc}") from None
        # read the version first: a build of another ggml version is named as such, even when
        # it also lacks symbols this harness binds
        version = ""
        try:
            version_fn = self.base.ggml_version
            version_fn.restype, version_fn.argtypes = _s, []
            version = (version_fn() or b"").decode(errors="replace")
        except AttributeError:
            pass
        missing = []
        for lib, table in ((self.base, BASE_SYMBOLS), (self.registry, REGISTRY_SYMBOLS)):
            for name, (restype, argtypes) in table.items():
                try:
                    fn = getattr(lib, name)
                except AttributeError:
                    missing.append(name)
                    continue
                fn.restype = restype
                fn.argtypes = argtypes
                setattr(self, name, fn)
        if check_version and version != PINNED_GGML_VERSION:
            lacks = f"; it also lacks {len(missing)} symbol(s) this harness binds" if missing else ""
            raise GgmlLibraryError(
                f"{self.lib_dir}: ggml version {version or '?'} does not match the pinned "
                f"{PINNED_GGML_VERSION} whose struct layouts this harness binds{lacks} "
                "(set GGML_CONFORM_ALLOW_VERSION=1 to try anyway)"
            )
        if missing:
            raise GgmlLibraryError(
                f"{self.lib_dir}: ggml library {version or '?'} lacks {len(missing)} symbol(s) this harness binds: "
                + ", ".join(missing[:8]) + (", ..." if len(missing) > 8 else "")
            )
        self.version = version
        self.commit = (self.ggml_commit() or b"").decode()
        self.ggml_backend_load_all_from_path(str(self.lib_dir).encode())

    def devices(self) -> list[int]:
        return [self.ggml_backend_dev_get(i) for i in range(self.ggml_backend_dev_count())]

    def device_names(self) -> list[str]:
        return [self.ggml_backend_dev_name(d).decode() for d in self.devices()]


_LOADED: dict[str, GgmlLib] = {}


def load(lib_dir: str | os.PathLike[str] | None = None) -> GgmlLib:
    """Load (once per process and directory) the ggml libraries."""
    path = str(resolve_lib_dir(lib_dir))
    if path not in _LOADED:
        allow = os.environ.get("GGML_CONFORM_ALLOW_VERSION", "") not in ("", "0")
        _LOADED[path] = GgmlLib(path, check_version=not allow)
    return _LOADED[path]

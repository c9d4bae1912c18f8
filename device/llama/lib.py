"""ctypes bindings to libllama (``llama.h``), bound only where the loaded library's struct layouts are the
ones read here.

What is bound: loading a model from a GGUF path, a context with an eval callback, ``llama_decode`` of a
batch of token ids, the logits, and the model's sizes. The two parameter structs are passed by value, so
their layout must match the library exactly. They are checked against the library itself before any use:
``llama_model_default_params()`` and ``llama_context_default_params()`` write their defaults into a
sentinel-filled buffer (the x86-64 ABI returns a struct this large through a hidden pointer), and

1. the bytes written must end where the layout's struct ends (a field added or removed moves it);
2. each field this module writes must read back as the release's known default (a field moved within
   the struct shows there).

A mismatch is refused in one line naming the field (:class:`LlamaLibraryError`).

Layouts were read from llama.h of the release ggml 0.25.1 ships with (node-llama-cpp 3.22.1's libllama,
``llama_version()`` 0.5.0-dev): ``llama_model_params`` with ``load_mode``/``lazy_mode`` (80 bytes) and
``llama_context_params`` with ``n_rs_seq``, ``n_outputs_max_per_seq`` and ``ctx_other`` (160 bytes).
"""

from __future__ import annotations

import ctypes as C
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from device.base import DeviceError
from device.ggml import lib as ggml_lib

EVAL_CALLBACK = C.CFUNCTYPE(C.c_bool, C.c_void_p, C.c_bool, C.c_void_p)  # ggml_backend_sched_eval_callback
LOG_CALLBACK = C.CFUNCTYPE(None, C.c_int, C.c_char_p, C.c_void_p)  # ggml_log_callback

FLASH_ATTN_AUTO, FLASH_ATTN_DISABLED, FLASH_ATTN_ENABLED = -1, 0, 1
LOAD_MODE_NONE = 0  # read the file into the device's buffers (no mmap: the file may be deleted after loading)


class LlamaLibraryError(DeviceError):
    """libllama cannot be found, loaded, or its struct layouts are not the ones bound here."""


class ModelParams(C.Structure):
    _fields_ = [
        ("devices", C.c_void_p),  # NULL-terminated ggml_backend_dev_t list; NULL = every device
        ("tensor_buft_overrides", C.c_void_p),
        ("n_gpu_layers", C.c_int32),
        ("split_mode", C.c_int32),
        ("load_mode", C.c_int32),
        ("lazy_mode", C.c_int32),
        ("main_gpu", C.c_int32),
        ("tensor_split", C.c_void_p),
        ("progress_callback", C.c_void_p),
        ("progress_callback_user_data", C.c_void_p),
        ("kv_overrides", C.c_void_p),
        ("vocab_only", C.c_bool),
        ("check_tensors", C.c_bool),
        ("use_extra_bufts", C.c_bool),
        ("no_host", C.c_bool),
        ("no_alloc", C.c_bool),
        ("load_mtp", C.c_bool),
    ]


class ContextParams(C.Structure):
    _fields_ = [
        ("n_ctx", C.c_uint32),
        ("n_batch", C.c_uint32),
        ("n_ubatch", C.c_uint32),
        ("n_seq_max", C.c_uint32),
        ("n_rs_seq", C.c_uint32),
        ("n_outputs_max", C.c_uint32),
        ("n_outputs_max_per_seq", C.c_uint32),
        ("n_threads", C.c_int32),
        ("n_threads_batch", C.c_int32),
        ("ctx_type", C.c_int32),
        ("rope_scaling_type", C.c_int32),
        ("pooling_type", C.c_int32),
        ("attention_type", C.c_int32),
        ("flash_attn_type", C.c_int32),
        ("rope_freq_base", C.c_float),
        ("rope_freq_scale", C.c_float),
        ("yarn_ext_factor", C.c_float),
        ("yarn_attn_factor", C.c_float),
        ("yarn_beta_fast", C.c_float),
        ("yarn_beta_slow", C.c_float),
        ("yarn_orig_ctx", C.c_uint32),
        ("defrag_thold", C.c_float),
        ("cb_eval", EVAL_CALLBACK),
        ("cb_eval_user_data", C.c_void_p),
        ("type_k", C.c_int32),
        ("type_v", C.c_int32),
        ("abort_callback", C.c_void_p),
        ("abort_callback_data", C.c_void_p),
        ("embeddings", C.c_bool),
        ("offload_kqv", C.c_bool),
        ("no_perf", C.c_bool),
        ("op_offload", C.c_bool),
        ("swa_full", C.c_bool),
        ("kv_unified", C.c_bool),
        ("samplers", C.c_void_p),
        ("n_samplers", C.c_size_t),
        ("ctx_other", C.c_void_p),
    ]


class Batch(C.Structure):
    _fields_ = [
        ("n_tokens", C.c_int32),
        ("token", C.POINTER(C.c_int32)),
        ("embd", C.POINTER(C.c_float)),
        ("pos", C.POINTER(C.c_int32)),
        ("n_seq_id", C.POINTER(C.c_int32)),
        ("seq_id", C.POINTER(C.POINTER(C.c_int32))),
        ("logits", C.POINTER(C.c_int8)),
    ]


# the defaults of the fields this module writes or relies on, as the release's llama.cpp sets them
MODEL_DEFAULTS: dict[str, object] = {
    "devices": None, "tensor_buft_overrides": None, "n_gpu_layers": -1, "split_mode": 1, "load_mode": -1,
    "main_gpu": 0, "tensor_split": None, "kv_overrides": None, "vocab_only": False, "check_tensors": False,
    "use_extra_bufts": True, "no_alloc": False,
}
CONTEXT_DEFAULTS: dict[str, object] = {
    "n_ctx": 512, "n_batch": 2048, "n_ubatch": 512, "n_seq_max": 1, "n_threads": 4, "n_threads_batch": 4,
    "ctx_type": 0, "pooling_type": -1, "flash_attn_type": -1, "cb_eval_user_data": None, "type_k": 1,
    "type_v": 1, "abort_callback": None, "embeddings": False, "offload_kqv": True, "no_perf": True,
    "op_offload": True, "samplers": None, "n_samplers": 0, "ctx_other": None,
}


def _probe_defaults(fn: Any, struct: type[C.Structure], defaults: dict[str, object]) -> str | None:
    """Call a ``*_default_params`` function into sentinel-filled buffers; None if the layout holds."""
    size = C.sizeof(struct)
    room = size + 256
    written = 0
    images = []
    for fill in (0xAB, 0x54):
        buf = (C.c_ubyte * room)(*([fill] * room))
        fn.restype, fn.argtypes = C.c_void_p, [C.c_void_p]  # the hidden struct-return pointer
        fn(C.addressof(buf))
        raw = bytes(buf)
        written = max(written, max((i + 1 for i in range(room) if raw[i] != fill), default=0))
        images.append(raw)
    name = fn.__name__
    if not size - 8 < written <= size:
        return f"{name}() writes {written} bytes, the layout bound here has {size} (a field was added or removed)"
    for field, want in defaults.items():
        got = getattr(struct.from_buffer_copy(images[0][:size]), field)
        if isinstance(got, float) or isinstance(want, float):
            same = got == want
        else:
            same = got == want or (want is None and not got)
        if not same:
            return f"{name}(): field {field} reads {got!r} where this release's default is {want!r} (moved field)"
    return None


@dataclass(frozen=True)
class LlamaFiles:
    folder: Path
    library: Path


def find_libllama(lib_dir: str | os.PathLike[str] | None) -> LlamaFiles:
    folder = ggml_lib.resolve_lib_dir(lib_dir)
    exact = folder / "libllama.so"
    found = [exact] if exact.exists() else sorted(folder.glob("libllama.*.so")) + sorted(folder.glob("libllama.so.*"))
    if not found:
        raise LlamaLibraryError(f"{folder}: no libllama.so here (the model tier needs the llama.cpp build's "
                                "libllama next to its ggml; scripts/setup-vulkan.sh puts 0.25.1's there)")
    return LlamaFiles(folder, found[0])


class LlamaLib:
    """The loaded libllama (with the ggml of the same folder); one per process and folder."""

    def __init__(self, lib_dir: str | os.PathLike[str] | None = None) -> None:
        self.ggml = ggml_lib.load(lib_dir)  # first: libllama resolves its ggml against these
        files = find_libllama(lib_dir)
        self.files = files
        try:
            self.lib = C.CDLL(str(files.library), mode=C.RTLD_GLOBAL)
        except OSError as exc:
            raise LlamaLibraryError(f"{files.folder}: cannot load {files.library.name}: {exc}") from None
        version = ""
        if hasattr(self.lib, "llama_version"):
            self.lib.llama_version.restype, self.lib.llama_version.argtypes = C.c_char_p, []
            version = (self.lib.llama_version() or b"").decode(errors="replace")
        self.version = version
        label = f"{files.library.name} ({version or 'no llama_version'}, ggml {self.ggml.version})"
        missing = [s for s in _PROTOTYPES if not hasattr(self.lib, s)]
        if missing:
            raise LlamaLibraryError(f"{label} lacks {', '.join(missing[:5])}: not the llama.h bound here")
        for probe in ((self.lib.llama_model_default_params, ModelParams, MODEL_DEFAULTS),
                      (self.lib.llama_context_default_params, ContextParams, CONTEXT_DEFAULTS)):
            mismatch = _probe_defaults(*probe)
            if mismatch:
                raise LlamaLibraryError(f"{label}: struct layout mismatch: {mismatch}; refusing to bind it")
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(self.lib, name)
            fn.restype, fn.argtypes = restype, argtypes
        self._log_sink = LOG_CALLBACK(self._on_log)
        self.log_tail: list[str] = []
        self.lib.llama_log_set(self._log_sink, None)
        self.lib.llama_backend_init()

    def _on_log(self, level: int, text: bytes | None, user: int | None) -> None:
        # llama.cpp's log goes here, not to stderr: the last lines explain a load that failed
        if text:
            self.log_tail = (self.log_tail + [text.decode(errors="replace")])[-40:]

    def last_error(self) -> str:
        """The last error-looking line llama.cpp logged (to say why a load failed)."""
        lines = [line.strip() for line in "".join(self.log_tail).splitlines() if line.strip()]
        for words in (("error",), ("unknown", "invalid", "cannot", "failed")):
            for line in reversed(lines):
                if any(word in line for word in words):
                    return line
        return lines[-1] if lines else ""

    def model_params(self) -> ModelParams:
        return self.lib.llama_model_default_params()

    def context_params(self) -> ContextParams:
        return self.lib.llama_context_default_params()


_PROTOTYPES: dict[str, tuple[object, list[object]]] = {
    "llama_model_default_params": (ModelParams, []),
    "llama_context_default_params": (ContextParams, []),
    "llama_backend_init": (None, []),
    "llama_log_set": (None, [LOG_CALLBACK, C.c_void_p]),
    "llama_model_load_from_file": (C.c_void_p, [C.c_char_p, ModelParams]),
    "llama_model_free": (None, [C.c_void_p]),
    "llama_init_from_model": (C.c_void_p, [C.c_void_p, ContextParams]),
    "llama_free": (None, [C.c_void_p]),
    "llama_decode": (C.c_int32, [C.c_void_p, Batch]),
    "llama_get_logits_ith": (C.POINTER(C.c_float), [C.c_void_p, C.c_int32]),
    "llama_model_n_embd": (C.c_int32, [C.c_void_p]),
    "llama_model_n_layer": (C.c_int32, [C.c_void_p]),
    "llama_model_get_vocab": (C.c_void_p, [C.c_void_p]),
    "llama_vocab_n_tokens": (C.c_int32, [C.c_void_p]),
    "llama_model_desc": (C.c_int32, [C.c_void_p, C.c_char_p, C.c_size_t]),
    "llama_model_size": (C.c_uint64, [C.c_void_p]),
    "llama_synchronize": (None, [C.c_void_p]),
}

_LOADED: dict[str, LlamaLib] = {}


def load(lib_dir: str | os.PathLike[str] | None = None) -> LlamaLib:
    key = str(ggml_lib.resolve_lib_dir(lib_dir))
    if key not in _LOADED:
        _LOADED[key] = LlamaLib(lib_dir)
    return _LOADED[key]

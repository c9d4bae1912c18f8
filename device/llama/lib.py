"""ctypes bindings to libllama (``llama.h``) of any llama.cpp release from b5640 to v0.5.0, and a user's
own build, bound only where the loaded library's struct layouts are explained.

What is bound: loading a model from a GGUF path, a context with an eval callback, ``llama_decode`` of a
batch of token ids, the logits, and the model's sizes. The two parameter structs are passed by value, so
their layout must be the library's own. Which layout that is comes from the library itself
(``device/llama/layouts.py``): ``llama_model_default_params()`` and ``llama_context_default_params()``
write their defaults into sentinel-filled buffers, and the one llama.h revision whose fields explain the
bytes written (and whose known defaults read back) is bound. Where the build's ``include/llama.h`` lies
beside the library (a build or install tree), its own struct declarations are read and bound when they
explain the probe; a header that does not is set aside for the revision that does. A layout neither
explains is refused in one line (:class:`LlamaLibraryError`).

Functions renamed across releases are bound by role (:data:`FUNCTION_ROLES`): the first name the library
exports is used, so ``llama_memory_clear`` or the older ``llama_kv_self_clear``, ``llama_vocab_n_tokens``
or the older ``llama_n_vocab``. The batch struct has the same layout over the whole span.
"""

from __future__ import annotations

import ctypes as C
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from device.base import DeviceError
from device.ggml import lib as ggml_lib
from device.llama import layouts

EVAL_CALLBACK = layouts.EVAL_CALLBACK  # ggml_backend_sched_eval_callback
LOG_CALLBACK = C.CFUNCTYPE(None, C.c_int, C.c_char_p, C.c_void_p)  # ggml_log_callback

FLASH_ATTN_AUTO, FLASH_ATTN_DISABLED, FLASH_ATTN_ENABLED = -1, 0, 1
ALL_LAYERS = 999  # n_gpu_layers that offloads every layer (and the output) in every release
LOAD_MODE_NONE = 0  # read the file into the device's buffers (no mmap: the file may be deleted after loading)


class LlamaLibraryError(DeviceError):
    """libllama cannot be found, loaded, or its struct layouts are not explained by any llama.h read here."""


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


# Functions every release b5640 .. v0.5.0 exports under one name: (restype, argtypes); a struct argument
# or result is named by its llama.h struct and bound to the layout chosen for the library.
CORE_FUNCTIONS: dict[str, tuple[object, list[object]]] = {
    "llama_backend_init": (None, []),
    "llama_log_set": (None, [LOG_CALLBACK, C.c_void_p]),
    "llama_free": (None, [C.c_void_p]),
    "llama_decode": (C.c_int32, [C.c_void_p, Batch]),
    "llama_get_logits_ith": (C.POINTER(C.c_float), [C.c_void_p, C.c_int32]),
    "llama_model_desc": (C.c_int32, [C.c_void_p, C.c_char_p, C.c_size_t]),
    "llama_model_size": (C.c_uint64, [C.c_void_p]),
    "llama_synchronize": (None, [C.c_void_p]),
}

# A role and its names, newest first: the first the library exports is bound. Each name's prototype.
MODEL_PARAMS, CONTEXT_PARAMS = "llama_model_params", "llama_context_params"
FUNCTION_ROLES: dict[str, tuple[tuple[str, object, list[object]], ...]] = {
    "model_load": (("llama_model_load_from_file", C.c_void_p, [C.c_char_p, MODEL_PARAMS]),
                   ("llama_load_model_from_file", C.c_void_p, [C.c_char_p, MODEL_PARAMS])),
    "model_free": (("llama_model_free", None, [C.c_void_p]), ("llama_free_model", None, [C.c_void_p])),
    "context_new": (("llama_init_from_model", C.c_void_p, [C.c_void_p, CONTEXT_PARAMS]),
                    ("llama_new_context_with_model", C.c_void_p, [C.c_void_p, CONTEXT_PARAMS])),
    "n_embd": (("llama_model_n_embd", C.c_int32, [C.c_void_p]), ("llama_n_embd", C.c_int32, [C.c_void_p])),
    "n_layer": (("llama_model_n_layer", C.c_int32, [C.c_void_p]), ("llama_n_layer", C.c_int32, [C.c_void_p])),
    # the vocabulary size: of the model's vocab object since b4500, of the model itself before
    "n_vocab": (("llama_vocab_n_tokens", C.c_int32, [C.c_void_p]), ("llama_n_vocab", C.c_int32, [C.c_void_p])),
    # clearing the KV cache: the memory object's (b5600+), the context's kv_self (b5000+), the kv_cache's
    "memory_clear": (("llama_memory_clear", None, [C.c_void_p, C.c_bool]),
                     ("llama_kv_self_clear", None, [C.c_void_p]),
                     ("llama_kv_cache_clear", None, [C.c_void_p])),
}
class ChatMessage(C.Structure):  # struct llama_chat_message, unchanged b5640 .. v0.5.0
    _fields_ = [("role", C.c_char_p), ("content", C.c_char_p)]


# The tokenizer's functions take the model's vocab object (llama_model_get_vocab, b4500 and later) and the
# model itself before; the names did not change for tokenize, token_to_piece and vocab_type, so the first
# argument is whatever :meth:`LlamaLib.vocab` gives (``VOCAB`` below).
VOCAB = C.c_void_p
OPTIONAL_FUNCTIONS: dict[str, tuple[object, list[object]]] = {  # used when there, never required
    "llama_version": (C.c_char_p, []),
    "llama_model_get_vocab": (C.c_void_p, [C.c_void_p]),
    "llama_get_memory": (C.c_void_p, [C.c_void_p]),
    "llama_tokenize": (C.c_int32, [VOCAB, C.c_char_p, C.c_int32, C.POINTER(C.c_int32), C.c_int32, C.c_bool,
                                   C.c_bool]),
    "llama_token_to_piece": (C.c_int32, [VOCAB, C.c_int32, C.c_char_p, C.c_int32, C.c_int32, C.c_bool]),
    "llama_vocab_type": (C.c_int, [VOCAB]),
    "llama_chat_apply_template": (C.c_int32, [C.c_char_p, C.POINTER(ChatMessage), C.c_size_t, C.c_bool,
                                              C.c_char_p, C.c_int32]),
    "llama_model_meta_val_str": (C.c_int32, [C.c_void_p, C.c_char_p, C.c_char_p, C.c_size_t]),
}
# Optional roles, newest name first (the model's chat template: its own accessor since b4600, else the
# GGUF key through the metadata accessor)
OPTIONAL_ROLES: dict[str, tuple[tuple[str, object, list[object]], ...]] = {
    "chat_template": (("llama_model_chat_template", C.c_char_p, [C.c_void_p, C.c_char_p]),),
    "vocab_bos": (("llama_vocab_bos", C.c_int32, [VOCAB]), ("llama_token_bos", C.c_int32, [VOCAB])),
    # the KV cache's sequence edits (a context shift, a sequence removed): the memory object's (b5600+),
    # the context's kv_self before
    "seq_rm": (("llama_memory_seq_rm", C.c_bool, [C.c_void_p, C.c_int32, C.c_int32, C.c_int32]),
               ("llama_kv_self_seq_rm", C.c_bool, [C.c_void_p, C.c_int32, C.c_int32, C.c_int32])),
    "seq_add": (("llama_memory_seq_add", None, [C.c_void_p, C.c_int32, C.c_int32, C.c_int32, C.c_int32]),
                ("llama_kv_self_seq_add", None, [C.c_void_p, C.c_int32, C.c_int32, C.c_int32, C.c_int32])),
    "n_ctx": (("llama_n_ctx", C.c_uint32, [C.c_void_p]),),
}
VOCAB_TYPE_NONE = 0  # enum llama_vocab_type: a model without a tokenizer (no_vocab)


def resolve_functions(exports: Callable[[str], bool]) -> dict[str, str] | str:
    """The name bound for each role (``exports(name)``: whether the library has it), or a one-line refusal
    naming the functions no release's names cover."""
    missing = [name for name in CORE_FUNCTIONS if not exports(name)]
    chosen: dict[str, str] = {}
    for role, names in FUNCTION_ROLES.items():
        found = next((name for name, _, _ in names if exports(name)), None)
        if found is None:
            missing.append(" or ".join(name for name, _, _ in names))
        else:
            chosen[role] = found
    if chosen.get("n_vocab") == "llama_vocab_n_tokens" and not exports("llama_model_get_vocab"):
        missing.append("llama_model_get_vocab")
    if chosen.get("memory_clear") == "llama_memory_clear" and not exports("llama_get_memory"):
        missing.append("llama_get_memory")
    if missing:
        return f"lacks {', '.join(missing[:5])}: no llama.h from b5640 to v0.5.0 bound here"
    return chosen


def choose_layouts(model_probe: layouts.Probe, context_probe: layouts.Probe,
                   header: Path | None) -> tuple[layouts.Revision, layouts.Revision, str] | str:
    """The model and context params layouts and where they came from (``include/llama.h`` or the probe);
    a one-line refusal when neither the header beside the library nor a known revision explains a probe."""
    chosen: list[layouts.Revision] = []
    sources = []
    for struct, seen, known in ((MODEL_PARAMS, model_probe, layouts.MODEL_REVISIONS),
                                (CONTEXT_PARAMS, context_probe, layouts.CONTEXT_REVISIONS)):
        header_why = ""
        if header is not None:
            try:
                own = layouts.parse_header(header.read_text(errors="replace"), struct)
            except (OSError, layouts.HeaderError) as exc:
                header_why = f"{header} unreadable ({exc})"
            else:
                why = layouts.fits(own, seen)
                if why is None:
                    chosen.append(own)
                    sources.append(f"{struct} from {header}")
                    continue
                header_why = f"{header} does not match: {why}"
        picked = layouts.choose(known, seen)
        if isinstance(picked, str):
            return picked + (f" ({header_why})" if header_why else "")
        chosen.append(picked)
        sources.append(f"{struct} of {picked.since}" + (f" ({header_why})" if header_why else ""))
    return chosen[0], chosen[1], "; ".join(sources)


def set_fields(params: C.Structure, **values: object) -> list[str]:
    """Set each named field the layout has; the names it lacks are returned (an older llama.h)."""
    have = {name for name, *_ in params._fields_}
    lacking = []
    for name, value in values.items():
        if name in have:
            setattr(params, name, value)
        else:
            lacking.append(name)
    return lacking


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


def _dlopen_hint(exc: OSError) -> str:
    text = str(exc)
    if "cannot open shared object file" in text:
        # node-llama-cpp 3.14.5 ships libllama.vulkan.b7347.so whose NEEDED entries carry the soname's ".so.0"
        # suffix, without the ".so.0" links: it loads only after the ggml it needs is loaded under that soname
        return (" (a library it needs by soname is not in the folder under that name: the ggml of the same "
                "folder must load first, or link the soname to the file)")
    return ""


def _probe(lib: C.CDLL, name: str) -> layouts.Probe:
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = C.c_void_p, [C.c_void_p]  # the hidden struct-return pointer (x86-64 SysV)
    return layouts.probe(fn, name)


class LlamaLib:
    """The loaded libllama (with the ggml of the same folder); one per process and folder."""

    def __init__(self, lib_dir: str | os.PathLike[str] | None = None) -> None:
        self.ggml = ggml_lib.load(lib_dir)  # first: libllama resolves its ggml against these
        files = find_libllama(lib_dir)
        self.files = files
        try:
            self.lib = C.CDLL(str(files.library), mode=C.RTLD_GLOBAL)
        except OSError as exc:
            raise LlamaLibraryError(f"{files.folder}: cannot load {files.library.name}: {exc}"
                                    f"{_dlopen_hint(exc)}") from None
        version = ""
        if hasattr(self.lib, "llama_version"):
            self.lib.llama_version.restype, self.lib.llama_version.argtypes = C.c_char_p, []
            version = (self.lib.llama_version() or b"").decode(errors="replace")
        self.version = version
        label = f"{files.library.name} ({version or 'no llama_version'}, ggml {self.ggml.version})"
        self.label = label
        for name in ("llama_model_default_params", "llama_context_default_params"):
            if not hasattr(self.lib, name):
                raise LlamaLibraryError(f"{label} lacks {name}: not a libllama bound here")
        functions = resolve_functions(lambda name: hasattr(self.lib, name))
        if isinstance(functions, str):
            raise LlamaLibraryError(f"{label} {functions}")
        self.functions = functions
        self._model_probe = _probe(self.lib, "llama_model_default_params")
        self._context_probe = _probe(self.lib, "llama_context_default_params")
        picked = choose_layouts(self._model_probe, self._context_probe, layouts.header_beside(files.folder))
        if isinstance(picked, str):
            raise LlamaLibraryError(f"{label}: struct layout mismatch: {picked}; refusing to bind it")
        self.model_layout, self.context_layout, self.layout_source = picked
        self.ModelParams = self.model_layout.ctype()
        self.ContextParams = self.context_layout.ctype()
        structs = {MODEL_PARAMS: self.ModelParams, CONTEXT_PARAMS: self.ContextParams}
        prototypes = dict(CORE_FUNCTIONS)
        for role, names in FUNCTION_ROLES.items():
            for name, restype, argtypes in names:
                if name == functions[role]:
                    prototypes[name] = (restype, [structs.get(a, a) if isinstance(a, str) else a for a in argtypes])
        prototypes.update({n: p for n, p in OPTIONAL_FUNCTIONS.items() if hasattr(self.lib, n)})
        self.optional_roles: dict[str, str] = {}
        for role, names in OPTIONAL_ROLES.items():
            for name, restype, argtypes in names:
                if hasattr(self.lib, name):
                    self.optional_roles[role] = name
                    prototypes[name] = (restype, argtypes)
                    break
        for name, (restype, argtypes) in prototypes.items():
            fn = getattr(self.lib, name)
            fn.restype, fn.argtypes = restype, argtypes
        self._log_sink = LOG_CALLBACK(self._on_log)
        self.log_tail: list[str] = []
        self.lib.llama_log_set(self._log_sink, None)
        self.lib.llama_backend_init()

    @property
    def revision(self) -> str:
        """The llama.h revisions bound: the model params' and the context params' (one word when equal)."""
        model, context = self.model_layout.since, self.context_layout.since
        return model if model == context else f"{model}/{context}"

    def call(self, role: str, *args: object) -> Any:
        return getattr(self.lib, self.functions[role])(*args)

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

    def model_params(self) -> C.Structure:
        """The library's defaults (as its ``llama_model_default_params()`` wrote them) in its layout."""
        return self.ModelParams.from_buffer_copy(self._model_probe.images[0][:C.sizeof(self.ModelParams)])

    def context_params(self) -> C.Structure:
        return self.ContextParams.from_buffer_copy(self._context_probe.images[0][:C.sizeof(self.ContextParams)])

    def loading_params(self, devices: int | None) -> C.Structure:
        """Model params that put every layer on ``devices`` (a NULL-terminated list), read the file into the
        device's buffers (no mmap) and keep the weights in their GGUF types (no repacked CPU layouts)."""
        mp = self.model_params()
        # every layer on the device: -1 means "all" only where the library's own default is -1 (b6845 and
        # later); before, -1 offloads none (the layers from n_layer - n_gpu_layers on go to the device)
        every_layer = -1 if mp.n_gpu_layers == -1 else ALL_LAYERS
        set_fields(mp, devices=devices, n_gpu_layers=every_layer)
        if set_fields(mp, load_mode=LOAD_MODE_NONE):  # before b10361: a use_mmap flag
            set_fields(mp, use_mmap=False)
        # b5640 has no use_extra_bufts: its CPU backend may repack Q4_0/Q8_0 weights (the capture then sees
        # the repacked bytes and says so at the nodes that read them)
        set_fields(mp, use_extra_bufts=False)
        return mp

    def decoding_params(self, n_ctx: int, n_batch: int, threads: int, flash_attn: int,
                        cb_eval: object = None, type_k: int | None = None, type_v: int | None = None,
                        n_seq_max: int = 1) -> C.Structure:
        """``type_k``/``type_v``: the KV cache's ggml types (None: the library's default, F16); ``n_seq_max``
        sequences share one (unified) cache, so a removed sequence's cells are reused by the next."""
        cp = self.context_params()
        set_fields(cp, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch, n_threads=threads, n_threads_batch=threads)
        if type_k is not None:
            cp.type_k = type_k
        if type_v is not None:
            cp.type_v = type_v
        if n_seq_max > 1:
            set_fields(cp, n_seq_max=n_seq_max, kv_unified=True)
        if set_fields(cp, flash_attn_type=flash_attn):  # before b6431: a flash_attn flag, no "auto"
            if flash_attn == FLASH_ATTN_AUTO:
                raise LlamaLibraryError(f"{self.label}: --flash-attn auto needs llama.h b6431 or later "
                                        "(flash_attn_type); this libllama has only on and off")
            set_fields(cp, flash_attn=flash_attn == FLASH_ATTN_ENABLED)
        if cb_eval is not None:
            cp.cb_eval = cb_eval
        return cp

    def n_vocab(self, model: int) -> int:
        if self.functions["n_vocab"] == "llama_vocab_n_tokens":
            return int(self.lib.llama_vocab_n_tokens(self.lib.llama_model_get_vocab(model)))
        return int(self.lib.llama_n_vocab(model))

    # ---- the model's tokenizer ----

    def vocab(self, model: int) -> int:
        """The first argument of the tokenizer's functions: the vocab object, or the model before it existed."""
        if hasattr(self.lib, "llama_model_get_vocab"):
            return int(self.lib.llama_model_get_vocab(model) or 0)
        return model

    def _need(self, name: str) -> None:
        if not hasattr(self.lib, name):
            raise LlamaLibraryError(f"{self.label} lacks {name}: it cannot tokenize here")

    def has_tokenizer(self, model: int) -> bool:
        self._need("llama_vocab_type")
        return int(self.lib.llama_vocab_type(self.vocab(model))) != VOCAB_TYPE_NONE

    def tokenize(self, model: int, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """``text`` as the model's tokenizer splits it (``llama_tokenize``); ``add_special`` adds the BOS the
        model asks for, ``parse_special`` reads control-token text (a chat template's) as those tokens."""
        self._need("llama_tokenize")
        data = text.encode()
        room = len(data) + 8
        ids = (C.c_int32 * room)()
        n = int(self.lib.llama_tokenize(self.vocab(model), data, len(data), ids, room, add_special, parse_special))
        if n < 0:  # -n is the count it needed
            room = -n
            ids = (C.c_int32 * room)()
            n = int(self.lib.llama_tokenize(self.vocab(model), data, len(data), ids, room, add_special,
                                            parse_special))
        if n < 0:
            raise LlamaLibraryError(f"{self.label}: llama_tokenize failed ({n}) on {text[:40]!r}")
        return list(ids[:n])

    def piece(self, model: int, token: int, special: bool = True) -> bytes:
        """The bytes of one token (``llama_token_to_piece``)."""
        self._need("llama_token_to_piece")
        buf = C.create_string_buffer(64)
        n = int(self.lib.llama_token_to_piece(self.vocab(model), token, buf, 64, 0, special))
        if n < 0:
            buf = C.create_string_buffer(-n)
            n = int(self.lib.llama_token_to_piece(self.vocab(model), token, buf, -n, 0, special))
        return buf.raw[:max(n, 0)]

    def chat_template(self, model: int) -> str | None:
        """The model's own chat template (``tokenizer.chat_template``), or None where it has none."""
        if "chat_template" in self.optional_roles:
            text = self.lib.llama_model_chat_template(model, None)
            return text.decode(errors="replace") if text else None
        if hasattr(self.lib, "llama_model_meta_val_str"):
            n = int(self.lib.llama_model_meta_val_str(model, b"tokenizer.chat_template", None, 0))
            if n >= 0:
                buf = C.create_string_buffer(n + 1)
                self.lib.llama_model_meta_val_str(model, b"tokenizer.chat_template", buf, n + 1)
                return buf.value.decode(errors="replace")
        return None

    def apply_chat_template(self, template: str, messages: list[tuple[str, str]]) -> str | None:
        """The messages as ``template`` lays them out with the assistant's turn opened
        (``llama_chat_apply_template``); None where libllama does not recognise the template."""
        self._need("llama_chat_apply_template")
        chat = (ChatMessage * len(messages))(*(ChatMessage(r.encode(), c.encode()) for r, c in messages))
        room = 256 + 2 * sum(len(r) + len(c) for r, c in messages)
        buf = C.create_string_buffer(room)
        n = int(self.lib.llama_chat_apply_template(template.encode(), chat, len(messages), True, buf, room))
        if n > room:
            buf = C.create_string_buffer(n + 1)
            n = int(self.lib.llama_chat_apply_template(template.encode(), chat, len(messages), True, buf, n + 1))
        return buf.raw[:n].decode(errors="replace") if n >= 0 else None

    def vocab_only_params(self) -> C.Structure:
        mp = self.model_params()
        set_fields(mp, vocab_only=True, n_gpu_layers=0)
        return mp

    def _memory_target(self, role: str, ctx: int) -> int:
        name = self.optional_roles.get(role)
        if name is None:
            raise LlamaLibraryError(f"{self.label} lacks llama_memory_{role} and llama_kv_self_{role}: it cannot "
                                    "edit the KV cache's sequences here")
        return int(self.lib.llama_get_memory(ctx)) if name.startswith("llama_memory_") else ctx

    def seq_rm(self, ctx: int, seq: int, p0: int, p1: int) -> bool:
        """Remove sequence ``seq``'s cells at positions [p0, p1) (-1: open-ended) from the KV cache."""
        target = self._memory_target("seq_rm", ctx)
        return bool(getattr(self.lib, self.optional_roles["seq_rm"])(target, seq, p0, p1))

    def seq_add(self, ctx: int, seq: int, p0: int, p1: int, delta: int) -> None:
        """Move sequence ``seq``'s positions [p0, p1) by ``delta``: the next decode re-ropes the K cache (a shift)."""
        target = self._memory_target("seq_add", ctx)
        getattr(self.lib, self.optional_roles["seq_add"])(target, seq, p0, p1, delta)

    def memory_clear(self, ctx: int) -> None:
        if self.functions["memory_clear"] == "llama_memory_clear":
            self.lib.llama_memory_clear(self.lib.llama_get_memory(ctx), True)
        else:
            self.call("memory_clear", ctx)


_LOADED: dict[str, LlamaLib] = {}


def load(lib_dir: str | os.PathLike[str] | None = None) -> LlamaLib:
    key = str(ggml_lib.resolve_lib_dir(lib_dir))
    if key not in _LOADED:
        _LOADED[key] = LlamaLib(lib_dir)
    return _LOADED[key]

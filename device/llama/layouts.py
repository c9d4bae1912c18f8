"""The layouts of libllama's by-value structs across llama.h revisions, and the rule that picks one.

``llama_model_params`` and ``llama_context_params`` are passed by value, so their layout must be the
library's own. llama.h changed them several times between llama.cpp b5640 (June 2025) and v0.5.0; the
revisions below are our own tables of the fields in order (read from each release's llama.h). The batch
struct has not changed in that span.

**The probing rule** (:func:`fits`): ``llama_*_default_params()`` writes its defaults into two buffers
filled with different sentinels; a byte differing from its sentinel in either was written. A layout fits
when

1. every byte of every field was written (a field the library lacks would stay sentinel),
2. the written bytes are exactly the fields' bytes, or the whole struct (a compiler that copies padding),
3. each field with a known default reads back one of the values llama.cpp's releases set.

The library's layout is the one revision that fits, or the one parsed from an ``include/llama.h`` beside
the library when that fits (:func:`parse_header`).
"""

from __future__ import annotations

import ctypes as C
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

EVAL_CALLBACK = C.CFUNCTYPE(C.c_bool, C.c_void_p, C.c_bool, C.c_void_p)  # ggml_backend_sched_eval_callback

# field kinds -> ctypes
KINDS: dict[str, object] = {"ptr": C.c_void_p, "i32": C.c_int32, "u32": C.c_uint32, "f32": C.c_float,
                            "bool": C.c_bool, "size": C.c_size_t, "eval_cb": EVAL_CALLBACK}


@dataclass(frozen=True)
class Revision:
    struct: str  # llama_model_params or llama_context_params
    since: str  # the first llama.cpp release with this layout
    fields: tuple[tuple[str, str], ...]  # (name, kind) in order

    @property
    def label(self) -> str:
        return f"{self.struct} of llama.cpp {self.since}"

    def ctype(self) -> type[C.Structure]:
        return type(f"{self.struct}_{self.since}", (C.Structure,),
                    {"_fields_": [(name, KINDS[kind]) for name, kind in self.fields]})


def _fields(spec: str) -> tuple[tuple[str, str], ...]:
    out = []
    for item in spec.split():
        name, _, kind = item.partition(":")
        out.append((name, kind))
    return tuple(out)


_M_HEAD = "devices:ptr tensor_buft_overrides:ptr n_gpu_layers:i32 split_mode:i32"
_M_PTRS = ("main_gpu:i32 tensor_split:ptr progress_callback:ptr progress_callback_user_data:ptr "
           "kv_overrides:ptr")
MODEL_REVISIONS: tuple[Revision, ...] = (
    Revision("llama_model_params", "b5640", _fields(
        f"{_M_HEAD} {_M_PTRS} vocab_only:bool use_mmap:bool use_mlock:bool check_tensors:bool")),
    Revision("llama_model_params", "b6122", _fields(
        f"{_M_HEAD} {_M_PTRS} vocab_only:bool use_mmap:bool use_mlock:bool check_tensors:bool "
        "use_extra_bufts:bool")),
    Revision("llama_model_params", "b6845", _fields(
        f"{_M_HEAD} {_M_PTRS} vocab_only:bool use_mmap:bool use_mlock:bool check_tensors:bool "
        "use_extra_bufts:bool no_host:bool")),
    Revision("llama_model_params", "b7698", _fields(
        f"{_M_HEAD} {_M_PTRS} vocab_only:bool use_mmap:bool use_direct_io:bool use_mlock:bool "
        "check_tensors:bool use_extra_bufts:bool no_host:bool no_alloc:bool")),
    Revision("llama_model_params", "b10361", _fields(
        f"{_M_HEAD} load_mode:i32 {_M_PTRS} vocab_only:bool check_tensors:bool use_extra_bufts:bool "
        "no_host:bool no_alloc:bool load_mtp:bool")),
    Revision("llama_model_params", "v0.4.0", _fields(
        f"{_M_HEAD} load_mode:i32 lazy_mode:i32 {_M_PTRS} vocab_only:bool check_tensors:bool "
        "use_extra_bufts:bool no_host:bool no_alloc:bool load_mtp:bool")),
)

_C_THREADS = "n_threads:i32 n_threads_batch:i32"
_C_ENUMS = "rope_scaling_type:i32 pooling_type:i32 attention_type:i32"
_C_MID = ("rope_freq_base:f32 rope_freq_scale:f32 yarn_ext_factor:f32 yarn_attn_factor:f32 yarn_beta_fast:f32 "
          "yarn_beta_slow:f32 yarn_orig_ctx:u32 defrag_thold:f32 cb_eval:eval_cb cb_eval_user_data:ptr "
          "type_k:i32 type_v:i32 abort_callback:ptr abort_callback_data:ptr embeddings:bool offload_kqv:bool")
_C_SIZES = "n_ctx:u32 n_batch:u32 n_ubatch:u32 n_seq_max:u32"
CONTEXT_REVISIONS: tuple[Revision, ...] = (
    Revision("llama_context_params", "b5640", _fields(
        f"{_C_SIZES} {_C_THREADS} {_C_ENUMS} {_C_MID} flash_attn:bool no_perf:bool op_offload:bool "
        "swa_full:bool")),
    Revision("llama_context_params", "b6122", _fields(
        f"{_C_SIZES} {_C_THREADS} {_C_ENUMS} {_C_MID} flash_attn:bool no_perf:bool op_offload:bool "
        "swa_full:bool kv_unified:bool")),
    Revision("llama_context_params", "b6431", _fields(
        f"{_C_SIZES} {_C_THREADS} {_C_ENUMS} flash_attn_type:i32 {_C_MID} no_perf:bool op_offload:bool "
        "swa_full:bool kv_unified:bool")),
    Revision("llama_context_params", "b7698", _fields(
        f"{_C_SIZES} {_C_THREADS} {_C_ENUMS} flash_attn_type:i32 {_C_MID} no_perf:bool op_offload:bool "
        "swa_full:bool kv_unified:bool samplers:ptr n_samplers:size")),
    Revision("llama_context_params", "b9842", _fields(
        f"{_C_SIZES} n_rs_seq:u32 n_outputs_max:u32 {_C_THREADS} ctx_type:i32 {_C_ENUMS} flash_attn_type:i32 "
        f"{_C_MID} no_perf:bool op_offload:bool swa_full:bool kv_unified:bool samplers:ptr n_samplers:size "
        "ctx_other:ptr")),
    Revision("llama_context_params", "b10361", _fields(
        f"n_ctx:u32 n_batch:u32 n_ubatch:u32 n_seq_max:u32 n_rs_seq:u32 n_outputs_max:u32 "
        f"n_outputs_max_per_seq:u32 {_C_THREADS} ctx_type:i32 {_C_ENUMS} flash_attn_type:i32 "
        f"{_C_MID} no_perf:bool op_offload:bool swa_full:bool kv_unified:bool samplers:ptr n_samplers:size "
        "ctx_other:ptr")),
)

# The values llama.cpp's *_default_params() set for a field, in any release b5640 .. v0.5.0 (a set where
# releases differ: n_gpu_layers 0 / 999 on Metal / -1; load_mode MMAP then AUTO; the yarn factors' "from
# the model" sentinel -1 since b6673). A field not named here is not checked.
NULL = None
KNOWN_DEFAULTS: dict[str, tuple[object, ...]] = {
    # llama_model_params
    "devices": (NULL,), "tensor_buft_overrides": (NULL,), "n_gpu_layers": (0, 999, -1), "split_mode": (1,),
    "load_mode": (1, -1), "lazy_mode": (1,), "main_gpu": (0,), "tensor_split": (NULL,),
    "progress_callback": (NULL,), "kv_overrides": (NULL,), "vocab_only": (False,), "use_mmap": (True,),
    "use_direct_io": (True, False), "use_mlock": (False,), "check_tensors": (False,), "use_extra_bufts": (True,),
    "no_host": (False,), "no_alloc": (False,), "load_mtp": (False,),
    # llama_context_params
    "n_ctx": (512,), "n_batch": (2048,), "n_ubatch": (512,), "n_seq_max": (1,), "n_rs_seq": (0,),
    "n_outputs_max": (0,), "n_outputs_max_per_seq": (1,), "n_threads": (4,), "n_threads_batch": (4,),
    "ctx_type": (0,), "rope_scaling_type": (-1,), "pooling_type": (-1,), "attention_type": (-1,),
    "flash_attn_type": (-1,), "rope_freq_base": (0.0,), "rope_freq_scale": (0.0,), "yarn_ext_factor": (-1.0,),
    "yarn_attn_factor": (1.0, -1.0), "yarn_beta_fast": (32.0, -1.0), "yarn_beta_slow": (1.0, -1.0),
    "yarn_orig_ctx": (0,), "defrag_thold": (-1.0,), "cb_eval_user_data": (NULL,), "type_k": (1,), "type_v": (1,),
    "abort_callback": (NULL,), "abort_callback_data": (NULL,), "embeddings": (False,), "offload_kqv": (True,),
    "flash_attn": (False,), "no_perf": (True,), "op_offload": (True,), "swa_full": (True,),
    "kv_unified": (False,), "samplers": (NULL,), "n_samplers": (0,), "ctx_other": (NULL,),
}
SENTINELS = (0xAB, 0x54)


@dataclass(frozen=True)
class Probe:
    """What a ``*_default_params()`` call wrote: one image per sentinel fill and the bytes it wrote."""

    function: str
    images: tuple[bytes, bytes]
    written: frozenset[int]

    @property
    def extent(self) -> int:
        return max(self.written, default=-1) + 1


def probe(fn: Callable[..., object], name: str, room: int = 512) -> Probe:
    """Call ``fn`` (the hidden struct-return pointer as its one argument) into sentinel-filled buffers."""
    images = []
    for fill in SENTINELS:
        buf = (C.c_ubyte * room)(*([fill] * room))
        fn(C.addressof(buf))
        images.append(bytes(buf))
    written = frozenset(i for i in range(room) if images[0][i] != SENTINELS[0] or images[1][i] != SENTINELS[1])
    return Probe(name, (images[0], images[1]), written)


def field_bytes(struct: type[C.Structure]) -> frozenset[int]:
    out: set[int] = set()
    for name, ctype in struct._fields_:  # type: ignore[misc]
        desc = getattr(struct, name)
        out.update(range(desc.offset, desc.offset + C.sizeof(ctype)))
    return frozenset(out)


def fits(revision: Revision, seen: Probe) -> str | None:
    """None when ``revision`` explains what the library wrote; else why not (one clause)."""
    struct = revision.ctype()
    size = C.sizeof(struct)
    covered = field_bytes(struct)
    missing = sorted(covered - seen.written)
    if missing:
        field = next(name for name, ctype in struct._fields_  # type: ignore[misc]
                     if getattr(struct, name).offset <= missing[0] < getattr(struct, name).offset + C.sizeof(ctype))
        return f"field {field} (byte {missing[0]}) is not written"
    if not (seen.written <= covered or seen.written == frozenset(range(size))):
        extra = min(seen.written - covered)
        return f"byte {extra} is written but is no field of the {size}-byte layout"
    values = struct.from_buffer_copy(seen.images[0][:size])
    for name, _ in revision.fields:
        allowed = KNOWN_DEFAULTS.get(name)
        if allowed is None:
            continue
        got = getattr(values, name)
        if not any(got == want or (want is None and not got) for want in allowed):
            return f"field {name} reads {got!r}, no release's default ({'/'.join(map(repr, allowed))})"
    return None


def choose(candidates: tuple[Revision, ...], seen: Probe, header: Revision | None = None) -> Revision | str:
    """The one revision the probe fits (the header's when it fits), or a one-line refusal."""
    if header is not None:
        why = fits(header, seen)
        if why is None:
            return header
        return f"{seen.function}() does not match the llama.h beside the library: {why}"
    fitting = [r for r in candidates if fits(r, seen) is None]
    if len(fitting) == 1:
        return fitting[0]
    if fitting:
        return (f"{seen.function}() is explained by {len(fitting)} llama.h revisions "
                f"({', '.join(r.since for r in fitting)}); put the build's include/llama.h beside the library")
    return (f"{seen.function}() writes {len(seen.written)} bytes up to byte {seen.extent}, which no llama.h revision "
            f"bound here ({candidates[0].since} .. {candidates[-1].since}) explains; put the build's "
            "include/llama.h beside the library")


# ---- a build's own llama.h -------------------------------------------------------------------------------

_C_TYPES = {"int32_t": "i32", "uint32_t": "u32", "float": "f32", "bool": "bool", "size_t": "size",
            "ggml_backend_sched_eval_callback": "eval_cb", "int": "i32"}


class HeaderError(ValueError):
    """A llama.h whose struct this module cannot read."""


def parse_header(text: str, struct: str) -> Revision:
    """The field list of ``struct`` in a llama.h's text (enums are 32-bit ints, any pointer a pointer)."""
    match = re.search(r"struct\s+" + struct + r"\s*\{(.*?)\n\s*\}\s*;", text, re.S)
    if match is None:
        raise HeaderError(f"no struct {struct} in it")
    body = re.sub(r"/\*.*?\*/", "", re.sub(r"//[^\n]*", "", match.group(1)), flags=re.S)
    fields = []
    for decl in (" ".join(d.split()) for d in body.split(";")):
        if not decl:
            continue
        found = re.fullmatch(r"(?:const\s+)?(?:(struct|enum)\s+)?(\w+)\s*(\*+)?\s*(?:const\s+)?(\*+)?\s*(\w+)", decl)
        if found is None:
            raise HeaderError(f"{struct}: cannot read the field declaration {decl!r}")
        tag, typename, star1, star2, name = found.groups()
        if star1 or star2:
            kind = "ptr"
        elif tag == "enum":
            kind = "i32"
        elif typename in _C_TYPES:
            kind = _C_TYPES[typename]
        elif typename.endswith("_callback"):
            kind = "ptr"
        else:
            raise HeaderError(f"{struct}: field {name} has type {typename}, which is not bound here")
        fields.append((name, kind))
    return Revision(struct, "the build's llama.h", tuple(fields))


def header_beside(folder: Path) -> Path | None:
    """``include/llama.h`` of a build or install tree that holds ``folder`` (build/bin, lib, or the folder)."""
    for up in (folder, folder.parent, folder.parent.parent):
        candidate = up / "include" / "llama.h"
        if candidate.is_file():
            return candidate
    return None

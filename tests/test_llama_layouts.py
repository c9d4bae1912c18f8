"""device.llama.layouts: each llama.h revision is told apart from the others by the probing rule, and a
real libllama's default params are explained by exactly one revision."""

from __future__ import annotations

import ctypes as C
from pathlib import Path

import pytest

from device.llama import layouts

REVISIONS = layouts.MODEL_REVISIONS + layouts.CONTEXT_REVISIONS


def _image(revision: layouts.Revision, fill: int) -> bytes:
    """What a library of this revision writes into a buffer filled with ``fill``: each field's first known
    default (0 / NULL where none is listed) over the field's bytes, the sentinel elsewhere."""
    struct = revision.ctype()
    values = struct()
    for name, kind in revision.fields:
        allowed = layouts.KNOWN_DEFAULTS.get(name, (None,))
        if allowed[0] is not None and kind != "eval_cb":
            setattr(values, name, allowed[0])
    raw = bytes(values)
    buf = bytearray([fill] * 512)
    for offset in layouts.field_bytes(struct):
        buf[offset] = raw[offset]
    return bytes(buf)


def _synthetic_probe(revision: layouts.Revision) -> layouts.Probe:
    images = (_image(revision, layouts.SENTINELS[0]), _image(revision, layouts.SENTINELS[1]))
    written = frozenset(i for i in range(512) if images[0][i] != layouts.SENTINELS[0]
                        or images[1][i] != layouts.SENTINELS[1])
    # a field whose default byte equals both sentinels cannot exist (the sentinels differ), so this is exact
    return layouts.Probe(revision.struct, images, written)


@pytest.mark.parametrize("revision", REVISIONS, ids=lambda r: f"{r.struct}-{r.since}")
def test_each_revision_is_the_only_one_that_fits_its_own_probe(revision: layouts.Revision) -> None:
    candidates = layouts.MODEL_REVISIONS if revision.struct == "llama_model_params" else layouts.CONTEXT_REVISIONS
    assert layouts.choose(candidates, _synthetic_probe(revision)) == revision


def test_a_layout_no_revision_explains_is_refused_in_one_line() -> None:
    seen = _synthetic_probe(layouts.MODEL_REVISIONS[-1])
    short = layouts.Probe(seen.function, seen.images, frozenset(i for i in seen.written if i < 40))
    why = layouts.choose(layouts.MODEL_REVISIONS, short)
    assert isinstance(why, str) and "\n" not in why and "no llama.h revision" in why


def test_parse_header_reads_a_struct_as_its_revision() -> None:
    revision = layouts.CONTEXT_REVISIONS[0]
    c_types = {"i32": "int32_t", "u32": "uint32_t", "f32": "float", "bool": "bool", "size": "size_t",
               "ptr": "void *", "eval_cb": "ggml_backend_sched_eval_callback"}
    body = "\n".join(f"        {c_types[kind]} {name}; // a comment" for name, kind in revision.fields)
    text = f"struct llama_context_params {{\n{body}\n    }};\n"
    assert layouts.parse_header(text, "llama_context_params").fields == revision.fields


_VULKAN = Path(__file__).resolve().parents[1] / ".backends" / "ggml-0.25.1-vulkan"


def test_the_installed_libllama_is_explained_by_exactly_one_revision() -> None:
    libs = sorted(_VULKAN.glob("libllama*.so"))
    if not libs:
        pytest.skip(f"no libllama in {_VULKAN} (scripts/setup-vulkan.sh installs ggml 0.25.1's)")
    lib = C.CDLL(str(libs[0]))
    for function, candidates in (("llama_model_default_params", layouts.MODEL_REVISIONS),
                                 ("llama_context_default_params", layouts.CONTEXT_REVISIONS)):
        fn = getattr(lib, function)
        fn.restype, fn.argtypes = None, [C.c_void_p]  # a struct returned by value: the hidden pointer argument
        chosen = layouts.choose(candidates, layouts.probe(fn, function))
        assert isinstance(chosen, layouts.Revision), chosen

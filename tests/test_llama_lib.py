"""device.llama.lib wired to device.llama.layouts: the functions bound per llama.h revision, the layouts
chosen from a probe or from a build's own include/llama.h, the params each layout gets, and every real
libllama folder here bound and run end to end (each in a fresh interpreter: one ggml per process)."""

from __future__ import annotations

import ctypes as C
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from device.llama import layouts, lib
from tests.test_llama_layouts import _synthetic_probe

ROOT = Path(__file__).resolve().parents[1]

# exported names, as `nm -D` lists them, that decide a role: b5640 (node-llama-cpp 3.10.0) exports both the
# llama_memory_* and the older llama_kv_self_* names; b6431 (3.13.0) on only the memory ones; a build from
# before b4500 (llama.h's vocab and memory APIs) only the old ones
_CORE = set(lib.CORE_FUNCTIONS)
EXPORTS = {
    "b5640": _CORE | {"llama_model_load_from_file", "llama_load_model_from_file", "llama_model_free",
                      "llama_free_model", "llama_init_from_model", "llama_new_context_with_model",
                      "llama_model_n_embd", "llama_n_embd", "llama_model_n_layer", "llama_vocab_n_tokens",
                      "llama_n_vocab", "llama_model_get_vocab", "llama_get_memory", "llama_memory_clear",
                      "llama_kv_self_clear"},
    "b6431": _CORE | {"llama_model_load_from_file", "llama_model_free", "llama_init_from_model", "llama_model_n_embd",
                      "llama_model_n_layer", "llama_vocab_n_tokens", "llama_model_get_vocab", "llama_get_memory",
                      "llama_memory_clear"},
    "b4000": _CORE | {"llama_load_model_from_file", "llama_free_model", "llama_new_context_with_model", "llama_n_embd",
                      "llama_n_layer", "llama_n_vocab", "llama_kv_cache_clear"},
}
BOUND = {
    "b5640": {"model_load": "llama_model_load_from_file", "model_free": "llama_model_free",
              "context_new": "llama_init_from_model", "n_embd": "llama_model_n_embd", "n_layer": "llama_model_n_layer",
              "n_vocab": "llama_vocab_n_tokens", "memory_clear": "llama_memory_clear"},
    "b4000": {"model_load": "llama_load_model_from_file", "model_free": "llama_free_model",
              "context_new": "llama_new_context_with_model", "n_embd": "llama_n_embd", "n_layer": "llama_n_layer",
              "n_vocab": "llama_n_vocab", "memory_clear": "llama_kv_cache_clear"},
}
BOUND["b6431"] = BOUND["b5640"]


@pytest.mark.parametrize("revision", sorted(EXPORTS))
def test_each_role_binds_the_name_that_revision_exports(revision: str) -> None:
    assert lib.resolve_functions(EXPORTS[revision].__contains__) == BOUND[revision]


def test_a_library_lacking_a_role_is_refused_in_one_line_naming_it() -> None:
    exports = EXPORTS["b6431"] - {"llama_memory_clear", "llama_decode"}
    why = lib.resolve_functions(exports.__contains__)
    assert isinstance(why, str) and "\n" not in why
    assert "llama_decode" in why and "llama_memory_clear or llama_kv_self_clear or llama_kv_cache_clear" in why
    # the vocab accessor needs the model's vocab object
    why = lib.resolve_functions((EXPORTS["b6431"] - {"llama_model_get_vocab"}).__contains__)
    assert isinstance(why, str) and "llama_model_get_vocab" in why


def _pair(model_since: str, context_since: str) -> tuple[layouts.Probe, layouts.Probe]:
    model = next(r for r in layouts.MODEL_REVISIONS if r.since == model_since)
    context = next(r for r in layouts.CONTEXT_REVISIONS if r.since == context_since)
    return _synthetic_probe(model), _synthetic_probe(context)


def _header(revisions: list[layouts.Revision]) -> str:
    c_types = {"i32": "int32_t", "u32": "uint32_t", "f32": "float", "bool": "bool", "size": "size_t",
               "ptr": "void *", "eval_cb": "ggml_backend_sched_eval_callback"}
    return "".join(f"struct {r.struct} {{\n" + "".join(f"    {c_types[k]} {n};\n" for n, k in r.fields) + "};\n"
                   for r in revisions)


def test_layouts_come_from_the_probe_when_no_header_lies_beside_the_library() -> None:
    chosen = lib.choose_layouts(*_pair("b6845", "b6431"), header=None)
    assert not isinstance(chosen, str)
    model, context, source = chosen
    assert (model.since, context.since) == ("b6845", "b6431")
    assert source == "llama_model_params of b6845; llama_context_params of b6431"


def test_a_builds_own_header_is_bound_when_it_explains_the_probe(tmp_path: Path) -> None:
    revisions = [next(r for r in layouts.MODEL_REVISIONS if r.since == "b7698"),
                 next(r for r in layouts.CONTEXT_REVISIONS if r.since == "b7698")]
    header = tmp_path / "include" / "llama.h"
    header.parent.mkdir()
    header.write_text(_header(revisions))
    assert layouts.header_beside(tmp_path / "build" / "bin") == header  # a source tree's build/bin
    assert layouts.header_beside(tmp_path / "lib") == header  # an install tree: lib/ beside include/
    assert layouts.header_beside(tmp_path / "x" / "y" / "z") is None  # only the folder and two above it
    chosen = lib.choose_layouts(*_pair("b7698", "b7698"), header=header)
    assert not isinstance(chosen, str)
    assert chosen[0].since == chosen[1].since == "the build's llama.h"
    assert chosen[0].fields == revisions[0].fields and str(header) in chosen[2]


def test_a_header_that_does_not_explain_the_probe_gives_way_to_the_revision_that_does(tmp_path: Path) -> None:
    header = tmp_path / "llama.h"
    header.write_text(_header([layouts.MODEL_REVISIONS[-1], layouts.CONTEXT_REVISIONS[-1]]))  # v0.5.0's
    chosen = lib.choose_layouts(*_pair("b6122", "b6122"), header=header)
    assert not isinstance(chosen, str)
    assert (chosen[0].since, chosen[1].since) == ("b6122", "b6122")
    assert "does not match" in chosen[2]


def test_a_probe_neither_explains_is_refused_in_one_line(tmp_path: Path) -> None:
    model, context = _pair("b10361", "b10361")
    short = layouts.Probe(model.function, model.images, frozenset(i for i in model.written if i < 40))
    header = tmp_path / "llama.h"
    header.write_text(_header([layouts.MODEL_REVISIONS[-1], layouts.CONTEXT_REVISIONS[-1]]))
    why = lib.choose_layouts(short, context, header=header)
    assert isinstance(why, str) and "\n" not in why
    assert "no llama.h revision" in why and "does not match" in why


def _bound(model_since: str, context_since: str) -> lib.LlamaLib:
    """A LlamaLib of these layouts with no library behind it (only the params builders are used)."""
    bound = object.__new__(lib.LlamaLib)
    model_probe, context_probe = _pair(model_since, context_since)
    bound._model_probe, bound._context_probe = model_probe, context_probe
    bound.model_layout = next(r for r in layouts.MODEL_REVISIONS if r.since == model_since)
    bound.context_layout = next(r for r in layouts.CONTEXT_REVISIONS if r.since == context_since)
    bound.ModelParams, bound.ContextParams = bound.model_layout.ctype(), bound.context_layout.ctype()
    bound.label = f"libllama of {model_since}"
    return bound


def test_loading_params_turn_mmap_and_repacking_off_in_each_layouts_own_words() -> None:
    bound = _bound("v0.4.0", "b10361")
    defaults = bound.model_params()
    defaults.n_gpu_layers = -1  # as v0.4.0's own default: -1 is "every layer" there
    bound.model_params = lambda: type(defaults).from_buffer_copy(bytes(defaults))  # type: ignore[method-assign]
    newest = bound.loading_params(1234)
    assert (newest.devices, newest.n_gpu_layers, newest.load_mode, newest.use_extra_bufts) == (1234, -1, 0, False)
    older = _bound("b6122", "b6122").loading_params(None)
    # its probe's n_gpu_layers default is 0 (the synthetic image's first known default): -1 would offload no layer
    assert (older.use_mmap, older.use_extra_bufts, older.n_gpu_layers) == (False, False, lib.ALL_LAYERS)
    oldest = _bound("b5640", "b5640").loading_params(None)
    assert not oldest.use_mmap and "use_extra_bufts" not in {n for n, _ in oldest._fields_}


def test_flash_attention_maps_to_the_old_flag_and_auto_is_refused_there() -> None:
    cp = _bound("b6122", "b6122").decoding_params(64, 8, 2, lib.FLASH_ATTN_ENABLED)
    assert (cp.flash_attn, cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_threads) == (True, 64, 8, 8, 2)
    assert _bound("b6122", "b6122").decoding_params(64, 8, 1, lib.FLASH_ATTN_DISABLED).flash_attn is False
    with pytest.raises(lib.LlamaLibraryError, match="--flash-attn auto needs llama.h b6431"):
        _bound("b6122", "b6122").decoding_params(64, 8, 1, lib.FLASH_ATTN_AUTO)
    assert _bound("b7698", "b6431").decoding_params(64, 8, 1, lib.FLASH_ATTN_AUTO).flash_attn_type == -1


# ---- real libllamas -------------------------------------------------------------------------------------

def _release_folder(version: str) -> str:
    """Where node-llama-cpp ``version``'s package lies: the checkout's .backends/vulkan-V (what
    ``scripts/setup-vulkan.sh V`` makes, and what .ci/run fetches for 3.14.5 and 3.16.2), else
    /work/releases/vulkan-V (a shared folder of every release); the former when neither exists."""
    local = ROOT / ".backends" / f"vulkan-{version}"
    shared = Path("/work/releases") / f"vulkan-{version}"
    return str(shared if not local.exists() and shared.exists() else local)


# node-llama-cpp release -> (folder, the layouts its libllama is bound with): measured by probing each
RELEASES = {
    "3.10.0": (_release_folder("3.10.0"), "b5640"),
    "3.13.0": (_release_folder("3.13.0"), "b6122/b6431"),
    "3.14.5": (_release_folder("3.14.5"), "b6845/b6431"),
    "3.15.1": (_release_folder("3.15.1"), "b7698"),
    "3.16.2": (_release_folder("3.16.2"), "b7698"),
    "3.17.1": (_release_folder("3.17.1"), "b7698"),
    "3.18.1": (_release_folder("3.18.1"), "b7698"),
    "3.20.0": (_release_folder("3.20.0"), "b10361"),
    "3.21.1": (_release_folder("3.21.1"), "v0.4.0/b10361"),
    "3.22.1": (str(ROOT / ".backends" / "ggml-0.25.1-vulkan"), "v0.4.0/b10361"),
}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


@pytest.mark.slow
@pytest.mark.parametrize("release", sorted(RELEASES))
def test_a_real_libllama_is_bound_and_judges_a_synthetic_model_on_the_cpu(release: str, tmp_path: Path) -> None:
    folder, revision = RELEASES[release]
    if not any(Path(folder).glob("libllama*.so")):
        pytest.skip(f"no libllama in {folder} (node-llama-cpp {release}: bash scripts/setup-vulkan.sh {release}, "
                    "where its package ships one)")
    probe = subprocess.run([sys.executable, "-c", "import json, sys\nfrom device.llama import lib\n"
                            "bound = lib.load(sys.argv[1])\n"
                            "print(json.dumps({'revision': bound.revision, 'functions': bound.functions}))", folder],
                           capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=120)
    assert probe.returncode == 0, probe.stderr[-2000:]
    bound = json.loads(probe.stdout.strip().splitlines()[-1])
    assert bound["revision"] == revision
    assert bound["functions"] == BOUND["b6431"]  # b5640 too: the newer names win where both are exported
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", "model", "--arch", "llama", "--weights", "f16",
                           "--no-cpu", "--decode", "1", "--ggml-lib", folder, "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=300)
    result = json.loads((tmp_path / "model.json").read_text())
    assert f"llama.h {revision}" in result["libllama"]
    counts = result["counts"]
    if release == "3.13.0":  # its ggml's SET_ROWS has no destination source: the KV writes cannot be judged
        assert proc.returncode == 3 and set(counts) == {"pass", "not judged"}, (proc.stdout[-1500:], counts)
    else:
        assert proc.returncode == 0, proc.stdout[-1500:] + proc.stderr[-1500:]
        assert set(counts) == {"pass"} and result["verdict"] == "pass"


@pytest.mark.slow
def test_every_layer_goes_to_the_device_where_minus_one_meant_none(tmp_path: Path) -> None:
    """3.14.5's libllama (b7347) defaults n_gpu_layers to 999: there -1 offloaded no layer, and a Vulkan0 run
    was the CPU's. The weight products must run on Vulkan0."""
    folder = RELEASES["3.14.5"][0]
    if not any(Path(folder).glob("libllama*.so")):
        pytest.skip(f"no libllama in {folder} (node-llama-cpp 3.14.5: bash scripts/setup-vulkan.sh 3.14.5)")
    devices = subprocess.run([sys.executable, "-m", "conformance.cli", "devices", "--ggml-lib", folder],
                             capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=120)
    if "ggml:Vulkan0" not in devices.stdout:
        pytest.skip(f"{folder}'s ggml lists no Vulkan0 here (no usable Vulkan driver)")
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", "model", "--arch", "llama", "--weights", "f16",
                           "--no-cpu", "--decode", "1", "--device", "ggml:Vulkan0", "--ggml-lib", folder,
                           "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=600)
    result = json.loads((tmp_path / "model.json").read_text())
    products = [n for n in result["nodes"] if n["op"] == "MUL_MAT"]
    assert products and {n["backend"] for n in products} == {"Vulkan0"}, (proc.stdout[-1500:], products[:2])


def test_a_libllama_whose_layout_no_revision_explains_is_refused_in_one_line() -> None:
    folder = RELEASES["3.22.1"][0]
    if not any(Path(folder).glob("libllama*.so")):
        pytest.skip(f"no libllama in {folder} (scripts/setup-vulkan.sh puts 0.25.1's there)")
    code = ("import sys\nfrom device.llama import layouts, lib\n"
            "layouts.KNOWN_DEFAULTS['n_threads'] = (8,)  # as if n_threads had moved: no revision reads 4 there\n"
            "try:\n    lib.load(sys.argv[1])\nexcept lib.LlamaLibraryError as exc:\n    print(exc)\n")
    proc = subprocess.run([sys.executable, "-c", code, folder], capture_output=True, text=True, cwd=ROOT, env=_env(),
                          timeout=120)
    line = proc.stdout.strip().splitlines()[-1]
    assert "struct layout mismatch: llama_context_default_params() writes" in line
    assert "which no llama.h revision bound here (b5640 .. b10361) explains" in line


def test_the_probe_reads_the_struct_by_its_hidden_return_pointer() -> None:
    # a by-value struct of more than 16 bytes comes back through a pointer the caller passes (x86-64 SysV):
    # the probe gives it the buffer; a fake default_params writes an image through that pointer
    revision = layouts.CONTEXT_REVISIONS[2]
    image = _synthetic_probe(revision).images[0]

    @C.CFUNCTYPE(None, C.c_void_p)
    def fake(out: int) -> None:
        C.memmove(out, image, C.sizeof(revision.ctype()))

    seen = layouts.probe(fake, "llama_context_default_params")
    assert layouts.choose(layouts.CONTEXT_REVISIONS, seen) == revision

"""ggml releases: the binding checks what the loaded library is.

* every ggml release we can get here loads, and ``struct ggml_tensor`` read through our ctypes
  layout matches what that library wrote (``probe_tensor_layout``), each in its own process;
* a library whose struct differs (a stub with 12 src pointers, or two fields swapped) is refused in
  one line that names the field;
* ``--ggml-lib`` folders: a suffixed libggml is found, a soname chain is one library, two distinct
  libggml builds are ambiguous (one line, exit 2);
* ``GGML_VK_VISIBLE_DEVICES`` defaults to 0 and a user's value is kept;
* an op constructor the release lacks makes that op unsupported (ggml 0.0.1 has no ggml_pad_ext).

Folders of other releases come from ``scripts/setup-ggml-release.sh`` and ``scripts/setup-vulkan.sh``
(into ``.backends/``); tests that need one skip, saying which script makes it, when it is absent.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from device.base import Unsupported
from device.ggml import lib as ggml_lib

ROOT = Path(__file__).parent.parent
BACKENDS = ROOT / ".backends"

# folder -> the ggml_version() it must report (and how to make it)
RELEASE_FOLDERS = {
    "ggml-0.17.0": ("0.17.0", "scripts/setup-ggml-release.sh"),
    "ggml-0.3.5": ("0.0.1", "scripts/setup-ggml-release.sh 0.3.5"),
    "ggml-0.25.1-vulkan": ("0.25.1", "scripts/setup-vulkan.sh"),
}


def run_python(code: str, env_extra: dict[str, str] | None = None, drop: tuple[str, ...] = ()) -> str:
    """Run ``code`` in a fresh interpreter (one ggml release per process: two releases' symbols
    would interpose on each other) and return its stdout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    for name in drop:
        env.pop(name, None)
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def conform(*args: str) -> tuple[int, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)
    return proc.returncode, proc.stderr


PROBE = """
import json, sys
from device.ggml import lib
L = lib.load(sys.argv[1] if len(sys.argv) > 1 else None)
print(json.dumps({"version": L.version, "probe": lib.probe_tensor_layout(L), "checked": L.header_checked,
                  "missing": L.missing_symbols, "devices": L.device_names(),
                  "vk_visible": __import__("os").environ.get("GGML_VK_VISIBLE_DEVICES")}))
"""


def probe(folder: Path | None, **kw: object) -> dict[str, object]:
    code = PROBE.replace("sys.argv[1] if len(sys.argv) > 1 else None", repr(str(folder)) if folder else "None")
    return dict(json.loads(run_python(code, **kw).strip().splitlines()[-1]))  # type: ignore[arg-type]


def release_folder(name: str) -> Path:
    folder = BACKENDS / name
    if not (folder / "libggml-base.so").exists():
        pytest.skip(f"no {folder.relative_to(ROOT)} (run {RELEASE_FOLDERS[name][1]})")
    return folder


# ---- real releases --------------------------------------------------------------------------------

def test_the_wheel_is_the_default_release() -> None:
    if ggml_lib.wheel_lib_dir() is None:
        pytest.skip("the libggml-python wheel is not installed")
    found = probe(None)
    assert found["version"] == ggml_lib.DEFAULT_GGML_VERSION
    assert found["probe"] is None and found["checked"] is True and found["missing"] == []
    assert "CPU" in found["devices"]  # type: ignore[operator]


@pytest.mark.parametrize("name", sorted(RELEASE_FOLDERS))
def test_release_loads_and_its_struct_layout_matches(name: str) -> None:
    folder = release_folder(name)
    found = probe(folder)
    assert found["version"] == RELEASE_FOLDERS[name][0]
    assert found["probe"] is None  # every probed field of struct ggml_tensor reads back as written
    assert found["checked"] is True
    assert "CPU" in found["devices"]  # type: ignore[operator]


def test_vulkan_folder_lists_vulkan0_without_any_override(tmp_path: Path) -> None:
    folder = release_folder("ggml-0.25.1-vulkan")
    found = probe(folder, drop=("GGML_VK_VISIBLE_DEVICES",))
    if "Vulkan0" not in found["devices"]:  # type: ignore[operator]
        pytest.skip("no Vulkan driver here (scripts/setup-vulkan.sh installs lavapipe)")
    assert found["vk_visible"] == "0"
    code, err = conform("devices", "--ggml-lib", str(folder))
    assert code == 0, err


def test_user_choice_of_vulkan_devices_is_kept() -> None:
    if ggml_lib.wheel_lib_dir() is None:
        pytest.skip("the libggml-python wheel is not installed")
    assert probe(None, drop=("GGML_VK_VISIBLE_DEVICES",))["vk_visible"] == "0"
    assert probe(None, env_extra={"GGML_VK_VISIBLE_DEVICES": "1,2"})["vk_visible"] == "1,2"


def test_a_constructor_the_release_lacks_makes_only_its_op_unsupported() -> None:
    folder = release_folder("ggml-0.3.5")  # ggml 0.0.1: no ggml_pad_ext
    out = run_python(f"""
        import json
        from device.ggml.device import GgmlDevice
        from golden.case import parse_case_id
        from conformance.inputs import make_inputs
        dev = GgmlDevice("CPU", {str(folder)!r})
        res = {{}}
        for cid in ("PAD(type=f32,ne=[4,3,1,1],dst=f32,form=pad_ext,lp=[1,0,0,0],rp=[2,1,0,0],data=uniform:1)",
                    "PAD(type=f32,ne=[4,3,1,1],dst=f32,lp=[0,0,0,0],rp=[2,1,0,0],data=uniform:1)"):
            case = parse_case_id(cid)
            try:
                dev.run(case, make_inputs(case))
                res[cid] = "ran"
            except Exception as exc:
                res[cid] = type(exc).__name__ + ": " + str(exc)
        print(json.dumps({{"missing": dev.lib.missing_symbols, "res": res}}))
    """)
    found = json.loads(out.strip().splitlines()[-1])
    assert found["missing"] == ["ggml_pad_ext"]
    pad_ext, plain = found["res"].values()
    assert pad_ext == "Unsupported: ggml 0.0.1 has no ggml_pad_ext()"
    assert plain == "ran"


def test_missing_symbol_declines_the_case() -> None:
    stand_in = ggml_lib.MissingSymbol("ggml_pad_ext", "0.0.1")
    with pytest.raises(Unsupported, match=r"ggml 0\.0\.1 has no ggml_pad_ext\(\)"):
        stand_in(None, None)


def test_prototypes_come_from_the_typed_declarations() -> None:
    protos = ggml_lib.prototypes()
    rope = protos["ggml_rope_ext"]
    assert len(rope.argtypes) == 13 and not rope.core
    assert rope.argtypes[3] is ggml_lib.TENSOR_POINTER  # the optional freq-factors tensor
    assert protos["ggml_interpolate"].argtypes[-1].__name__ == "c_uint"  # uint32_t mode
    assert protos["ggml_backend_dev_count"].in_registry and protos["ggml_backend_dev_count"].core
    assert protos["ggml_tensor_overhead"].core and protos["ggml_view_4d"].core


def test_device_type_enum_by_release() -> None:
    assert ggml_lib.dev_type_names("0.0.1")[2] == "accel"  # before IGPU was inserted
    assert ggml_lib.dev_type_names("0.25.1")[2] == "igpu"
    assert ggml_lib.parse_version("0.25.1-dirty") == (0, 25, 1)


# ---- a library whose struct ggml_tensor differs: stub libraries compiled here ---------------------

STUB = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
struct t {
    int type; void *buffer; int64_t ne[4]; size_t nb[4]; int op; int32_t op_params[16]; int32_t flags;
    struct t *src[MAX_SRC];
#ifdef SWAP
    size_t view_offs; struct t *view_src;
#else
    struct t *view_src; size_t view_offs;
#endif
    void *data; char name[64]; void *extra; char padding[8];
};
struct init_params { size_t mem_size; void *mem_buffer; _Bool no_alloc; };
static struct t *make(void) { return calloc(1, sizeof(struct t)); }
const char *ggml_version(void) { return "9.9.9"; }
size_t ggml_tensor_overhead(void) { return 32 + sizeof(struct t); }
void *ggml_init(struct init_params p) { (void)p; return calloc(1, 1); }
void ggml_free(void *ctx) { free(ctx); }
struct t *ggml_new_tensor(void *ctx, int type, int n, const int64_t *ne) {
    struct t *r = make(); (void)ctx; r->type = type; size_t s = 4;
    for (int i = 0; i < 4; i++) { r->ne[i] = i < n ? ne[i] : 1; r->nb[i] = s; s *= r->ne[i]; }
    return r;
}
struct t *ggml_set_name(struct t *a, const char *name) { strncpy(a->name, name, 63); return a; }
struct t *ggml_view_4d(void *ctx, struct t *a, int64_t n0, int64_t n1, int64_t n2, int64_t n3,
                       size_t nb1, size_t nb2, size_t nb3, size_t offset) {
    struct t *r = make(); (void)ctx;
    r->ne[0] = n0; r->ne[1] = n1; r->ne[2] = n2; r->ne[3] = n3;
    r->nb[0] = 4; r->nb[1] = nb1; r->nb[2] = nb2; r->nb[3] = nb3;
    r->view_src = a; r->view_offs = offset; r->src[0] = a; return r;
}
struct t *ggml_scale(void *ctx, struct t *a, float s) {
    struct t *r = make(); (void)ctx; r->src[0] = a; memcpy(r->op_params, &s, sizeof s); return r;
}
struct t *ggml_add(void *ctx, struct t *a, struct t *b) {
    struct t *r = make(); (void)ctx; r->src[0] = a; r->src[1] = b; return r;
}
"""
PROBED = {"ggml_version", "ggml_tensor_overhead", "ggml_init", "ggml_free", "ggml_new_tensor", "ggml_set_name",
          "ggml_view_4d", "ggml_scale", "ggml_add"}


def build_stub(where: Path, *defines: str) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a stub ggml library")
    where.mkdir(parents=True, exist_ok=True)
    protos = ggml_lib.prototypes().values()
    base = STUB + "".join(f"void {p.name}(void) {{}}\n" for p in protos if not p.in_registry and p.name not in PROBED)
    registry = "".join(f"void {p.name}(void) {{}}\n" for p in protos if p.in_registry)
    for name, body in (("libggml-base.so", base), ("libggml.so", registry)):
        src = where / (name + ".c")
        src.write_text(body)
        subprocess.run([cc, "-shared", "-fPIC", *[f"-D{d}" for d in defines], "-o", str(where / name), str(src)],
                       check=True, capture_output=True)
    return where


def one_line(code: int, stderr: str) -> str:
    assert code == 2, stderr
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def test_the_stub_with_the_known_layout_passes_the_probe(tmp_path: Path) -> None:
    """The control for the two refusals below: the same stub, laid out as ggml is, loads."""
    folder = build_stub(tmp_path / "same", "MAX_SRC=10")
    out = run_python(f"""
        from device.ggml import lib
        L = lib.GgmlLib.__new__(lib.GgmlLib)
        import ctypes as C
        base = C.CDLL({str(folder / "libggml-base.so")!r})
        for p in lib.prototypes().values():
            if not p.in_registry and hasattr(base, p.name):
                fn = getattr(base, p.name); fn.restype, fn.argtypes = p.restype, list(p.argtypes)
                setattr(L, p.name, fn)
        print(lib.probe_tensor_layout(L))
    """)
    assert out.strip() == "None"


def test_more_src_pointers_is_refused_in_one_line(tmp_path: Path) -> None:
    folder = build_stub(tmp_path / "src12", "MAX_SRC=12")
    line = one_line(*conform("devices", "--ggml-lib", str(folder)))
    assert "ggml 9.9.9 is incompatible" in line and "sizeof struct ggml_tensor differs" in line
    assert "0.0.1..0.25.1" in line


def test_moved_field_is_refused_in_one_line(tmp_path: Path) -> None:
    folder = build_stub(tmp_path / "swap", "MAX_SRC=10", "SWAP")
    line = one_line(*conform("devices", "--ggml-lib", str(folder)))
    assert "ggml 9.9.9 is incompatible" in line and "field view_src" in line


# ---- which libggml in a folder ----------------------------------------------------------------------

def touch(folder: Path, *names: str, content: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_text(content or name)
    return folder


def test_suffixed_libggml_is_found(tmp_path: Path) -> None:
    folder = touch(tmp_path, "libggml-base.so", "libggml.vulkan.v0.5.0.so", "libggml-vulkan.so", "libggml-cpu-x64.so")
    files = ggml_lib.find_libraries(folder)
    assert files.registry.name == "libggml.vulkan.v0.5.0.so" and files.base.name == "libggml-base.so"


def test_plain_libggml_wins_and_a_soname_chain_is_one_library(tmp_path: Path) -> None:
    plain = touch(tmp_path / "a", "libggml-base.so", "libggml.so", "libggml.so.0", "libggml.so.0.17.0")
    assert ggml_lib.find_libraries(plain).registry.name == "libggml.so"
    chain = touch(tmp_path / "b", "libggml-base.so", "libggml.so.0", "libggml.so.0.17.0")
    assert ggml_lib.find_libraries(chain).registry.name == "libggml.so.0"


def test_two_libggml_builds_are_ambiguous(tmp_path: Path) -> None:
    folder = touch(tmp_path, "libggml-base.so", "libggml.vulkan.v0.5.0.so", "libggml.cuda.v0.5.0.so")
    with pytest.raises(ggml_lib.GgmlLibraryError, match="more than one libggml library"):
        ggml_lib.find_libraries(folder)
    line = one_line(*conform("devices", "--ggml-lib", str(folder)))
    assert "libggml.cuda.v0.5.0.so" in line and "libggml.vulkan.v0.5.0.so" in line


def test_links_to_one_library_are_not_ambiguous(tmp_path: Path) -> None:
    folder = touch(tmp_path, "libggml-base.so", "libggml.vulkan.v0.5.0.so")
    (folder / "libggml.v0.so").symlink_to(folder / "libggml.vulkan.v0.5.0.so")
    assert ggml_lib.find_libraries(folder).registry.resolve() == (folder / "libggml.vulkan.v0.5.0.so").resolve()


# ---- the setup scripts --------------------------------------------------------------------------------

def test_release_script_skips_in_one_line_when_the_wheel_cannot_be_had(tmp_path: Path) -> None:
    proc = subprocess.run(["bash", str(ROOT / "scripts/setup-ggml-release.sh"), "0.0.0.404"], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == ""
    skip_lines = [line for line in proc.stderr.splitlines() if line.startswith("skip: ")]
    assert skip_lines == ["skip: pip could not download libggml-python==0.0.0.404"], proc.stderr
    assert not (BACKENDS / "ggml-0.0.0.404").exists()


def test_release_script_is_idempotent() -> None:
    folder = release_folder("ggml-0.17.0")
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    proc = subprocess.run(["bash", str(ROOT / "scripts/setup-ggml-release.sh")], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == str(folder)
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before  # nothing fetched again

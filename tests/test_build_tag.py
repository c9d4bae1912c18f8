"""The llama.cpp build a library folder says (device/build_tag.py): file names, node-llama-cpp's build metadata,
the user's word; unknown where none speaks or they disagree; the order of bNNNN and vX.Y.Z tags."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from device.build_tag import ENV_VAR, METADATA_FILE, build_key, in_range, read_build


def _folder(tmp_path: Path, names: tuple[str, ...] = (), release: str | None = None) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name in names:
        (tmp_path / name).write_bytes(b"")
    if release is not None:
        meta = {"buildOptions": {"llamaCpp": {"repo": "ggml-org/llama.cpp", "release": release}}}
        (tmp_path / METADATA_FILE).write_text(json.dumps(meta))
    return tmp_path


@pytest.fixture(autouse=True)
def _no_declared_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


def test_the_file_names_and_the_metadata_each_say_the_build(tmp_path: Path) -> None:
    named = read_build(_folder(tmp_path / "a", ("libggml-base.so", "libggml.vulkan.b8121.so",
                                                "libllama.vulkan.b8121.so")))
    assert (named.tag, named.source) == ("b8121", "file names")
    meta = read_build(_folder(tmp_path / "b", ("libggml-base.so", "libggml.so"), release="b8179"))
    assert (meta.tag, meta.source) == ("b8179", METADATA_FILE)
    both = read_build(_folder(tmp_path / "c", ("libggml.vulkan.v0.5.0.so",), release="v0.5.0"))
    assert both.tag == "v0.5.0" and both.record() == {"llama_build": "v0.5.0",
                                                      "llama_build_source": f"file names, {METADATA_FILE}"}


def test_no_word_or_disagreeing_words_leave_the_build_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert read_build(_folder(tmp_path / "none", ("libggml-base.so", "libggml.so"))).tag is None
    mixed = read_build(_folder(tmp_path / "mixed", ("libggml.vulkan.b8095.so", "libllama.vulkan.b8121.so")))
    assert mixed.tag is None and "b8095, b8121" in mixed.conflict
    against = read_build(_folder(tmp_path / "against", ("libggml.vulkan.b8121.so",), release="b8179"))
    assert against.tag is None and against.record()["llama_build"] is None and against.conflict
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / METADATA_FILE).write_text("{not json")
    assert read_build(tmp_path / "bad").tag is None
    monkeypatch.setenv(ENV_VAR, "b8179")  # the user's word for a folder that says nothing
    assert read_build(tmp_path / "none").tag == "b8179" and read_build(tmp_path / "none").source == ENV_VAR
    assert read_build(tmp_path / "against").tag is None  # and it may not settle a disagreement
    monkeypatch.setenv(ENV_VAR, "latest")
    assert read_build(tmp_path / "none").tag is None and "not a build tag" in read_build(tmp_path / "none").conflict


def test_builds_order_by_number_then_node_llama_cpp_tags() -> None:
    ordered = ["b999", "b6431", "b8121", "b8179", "b10361", "v0.4.0", "v0.5.0", "v0.10.0"]
    assert sorted(reversed(ordered), key=build_key) == ordered
    assert in_range("b8179", "b8179", "") and in_range("v0.5.0", "b8179", "") and not in_range("b8121", "b8179", "")
    assert not in_range(None, "", "b9999") and not in_range("8179", "", "")


ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("folder", "version", "build"), [("vulkan-3.16.2", "0.9.7", "b8121"),
                                                           ("ggml-0.25.1-vulkan", "0.25.1", "v0.5.0")])
def test_the_device_inventory_records_the_build_of_a_real_release(folder: str, version: str, build: str) -> None:
    where = ROOT / ".backends" / folder
    if not (where / "libggml-base.so").exists():
        pytest.skip(f"needs {where} (bash scripts/setup-vulkan.sh{' 3.16.2' if '3.16' in folder else ''})")
    probe = ("import json, sys; from device.ggml import lib; "
             "print(json.dumps(lib.load(sys.argv[1]).release_info()))")  # a process per release: they cannot share one
    done = subprocess.run([sys.executable, "-c", probe, str(where)], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    info = json.loads(done.stdout.strip().splitlines()[-1])
    assert (info["ggml_version"], info["llama_build"]) == (version, build)
    # scripts/setup-vulkan.sh keeps node-llama-cpp's metadata beside the libraries since 2026-12-04; a folder
    # unpacked before that has the file names only
    assert info["llama_build_source"] in ("file names", f"file names, {METADATA_FILE}"), info["llama_build_source"]

"""ggml's start-up banner stays out of the run's output; every other ggml log line still reaches stderr."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from device.ggml.startup_log import SHOW_ALL_ENV, StartupLogFilter

ROOT = Path(__file__).resolve().parent.parent
VULKAN = ROOT / ".backends" / "ggml-0.25.1-vulkan"
DEBUG, INFO, WARN, ERROR, CONT = 1, 2, 3, 4, 5
BANNER = [
    (DEBUG, b"ggml_vulkan: Found 1 Vulkan devices:\n"),
    (DEBUG, b"ggml_vulkan: 0 = llvmpipe (LLVM 15.0.6, 256 bits) (llvmpipe) | uma: 0 | fp16: 1 | bf16: 0 | fp4: 0 "
            b"| warp size: 8 | shared memory: 32768 | int dot: 0 | matrix cores: none\n"),
    (DEBUG, b"ggml_vulkan: Warning: Device type is CPU. This is probably not the device you want.\n"),
    (INFO, b"load_backend: loaded Vulkan backend from .backends/ggml-0.25.1-vulkan/libggml-vulkan.so\n"),
    (INFO, b"load_backend: loaded CPU backend from .backends/ggml-0.25.1-vulkan/libggml-cpu-zen4.so\n"),
]


def test_the_banner_is_dropped_and_every_other_line_passes(capfd: pytest.CaptureFixture[str]) -> None:
    log = StartupLogFilter()
    for level, text in BANNER:
        log(level, text, None)
    log(CONT, b"  (a continuation of the banner line)\n", None)
    kept = [
        (WARN, b"ggml_vulkan: Found 1 Vulkan devices:\n"),  # the same words at warning level are not the banner
        (ERROR, b"load_backend: loaded Vulkan backend from x.so\n"),
        (INFO, b"ggml_backend_load_best: failed to load libggml-cpu-haswell.so\n"),
        (CONT, b"  and its continuation\n"),
        (DEBUG, b"ggml_vulkan: WARNING: No suitable matrix core mode found. Disabling matrix cores.\n"),
    ]
    for level, text in kept:
        log(level, text, None)
    err = capfd.readouterr().err
    assert err == "".join(text.decode() for _, text in kept)
    assert log.dropped == len(BANNER) + 1


def _list_devices(env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), **env_extra)
    return subprocess.run([sys.executable, "-m", "conformance.cli", "devices", "--ggml-lib", str(VULKAN)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)


def test_loading_ggml_vulkan_prints_no_banner_unless_asked() -> None:
    """A real load of ggml-vulkan (the device list, as every run's start and each device worker does):
    no banner on stderr; CONFORM_GGML_LOG=all shows it as ggml prints it."""
    if not (VULKAN / "libggml-vulkan.so").exists():
        pytest.skip(f"no {VULKAN.relative_to(ROOT)} (run scripts/setup-vulkan.sh)")
    quiet = _list_devices({})
    assert quiet.returncode == 0, quiet.stderr
    if "ggml:Vulkan0" not in quiet.stdout:
        pytest.skip("ggml 0.25.1 lists no Vulkan0 here (no Vulkan driver; scripts/setup-vulkan.sh installs lavapipe)")
    assert "ggml_vulkan" not in quiet.stderr and "load_backend" not in quiet.stderr, quiet.stderr
    shown = _list_devices({SHOW_ALL_ENV: "all"})
    assert "ggml_vulkan: Found 1 Vulkan devices:" in shown.stderr and "load_backend: loaded" in shown.stderr

"""Headless Chromium for the rendering test and the benchmark (Debian's ``chromium`` package)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    return next((path for path in map(shutil.which, CHROMIUM_NAMES) if path), None)


def run_chromium(binary: str, page: Path, *extra: str,
                 timeout: float = 90.0) -> subprocess.CompletedProcess[str]:
    """Open ``page`` headless with a fresh profile and no network chatter; returns the finished process."""
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        command = [
            binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-extensions", f"--user-data-dir={profile}", *extra, page.resolve().as_uri(),
        ]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=True)


def dump_dom(binary: str, page: Path, *extra: str) -> str:
    """The DOM after load (and after the page's scripts ran); ``extra`` e.g. ``--window-size=1024,900``."""
    return run_chromium(binary, page, "--dump-dom", *extra).stdout


def screenshot(binary: str, page: Path, png: Path, width: int = 1400, height: int = 2400) -> Path:
    run_chromium(binary, page, f"--screenshot={png.resolve()}", f"--window-size={width},{height}",
                 "--hide-scrollbars")
    return png

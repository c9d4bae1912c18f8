"""ggml's start-up banner, kept out of the run's output; every other ggml log line still reaches stderr.

Each process that loads ggml (conform, pytest, every device worker) prints a line per backend it
loads and, with ggml-vulkan, the device list and a warning that lavapipe is a CPU device: five lines
each time, which made up half a CI log and the first lines of each crash's stderr tail. Those known
lines, at ggml's debug and info levels, are dropped; warnings, errors and every other line pass to
stderr unchanged (a failed GGML_ASSERT does not go through the log at all). ``CONFORM_GGML_LOG=all``
keeps the banner.
"""

from __future__ import annotations

import atexit
import ctypes as C
import os
import re
from typing import Any

LOG_LEVEL_INFO = 2
LOG_LEVEL_CONT = 5  # continues the previous message
SHOW_ALL_ENV = "CONFORM_GGML_LOG"
BANNER = re.compile(
    r"(load_backend: loaded \S+ backend from "
    r"|ggml_vulkan: Found \d+ Vulkan devices:"
    r"|ggml_vulkan: \d+ = .* \| uma: "
    r"|ggml_vulkan: Warning: Device type is CPU\. )")
LOG_CALLBACK = C.CFUNCTYPE(None, C.c_int, C.c_char_p, C.c_void_p)


def is_banner(level: int, text: str) -> bool:
    """A line of ggml's start-up banner: one of the known lines, logged at debug or info level."""
    return level <= LOG_LEVEL_INFO and BANNER.match(text) is not None


class StartupLogFilter:
    """ggml's log callback: drops the banner (and its continuations), writes the rest to fd 2."""

    def __init__(self) -> None:
        self.dropping = False
        self.dropped = 0

    def __call__(self, level: int, text: bytes | None, user_data: Any) -> None:
        if not text:
            return
        line = text.decode(errors="replace")
        if level == LOG_LEVEL_CONT:
            drop = self.dropping
        else:
            drop = self.dropping = is_banner(level, line)
        if drop:
            self.dropped += 1
            return
        try:
            os.write(2, text)
        except OSError:
            pass


_INSTALLED: list[tuple[Any, Any]] = []  # (library, callback): ggml holds the pointer, so we keep the callback


def install(base: Any) -> None:
    """Route ``base``'s (libggml-base's) log through the filter, before its backends load. A library
    without ``ggml_log_set`` (older than the log API) keeps its own logging."""
    if os.environ.get(SHOW_ALL_ENV) == "all":
        return
    try:
        log_set = base.ggml_log_set
    except AttributeError:
        return
    log_set.restype, log_set.argtypes = None, [LOG_CALLBACK, C.c_void_p]
    callback = LOG_CALLBACK(StartupLogFilter())
    log_set(callback, None)
    if not _INSTALLED:
        atexit.register(_uninstall)
    _INSTALLED.append((base, callback))


def _uninstall() -> None:
    """ggml's default logger back before the interpreter ends: a log line from a library's destructor
    must not call into a finished Python."""
    for base, _ in _INSTALLED:
        try:
            base.ggml_log_set(LOG_CALLBACK(), None)  # NULL: ggml's default logger
        except Exception:
            pass

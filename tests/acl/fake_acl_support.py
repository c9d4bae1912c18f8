"""Helpers for the ACL binding tests: building the C test double and reading its call log."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from device.acl.loader import AclLibraries
from device.acl.opapi import AclOpApi
from device.acl.runtime import AclRuntime

FAKE_SOURCE = Path(__file__).with_name("fake_ascendcl.c")
PARTS = (("FAKE_PART_RUNTIME", "libascendcl.so", ()),
         ("FAKE_PART_NNOPBASE", "libnnopbase.so", ("-lascendcl",)),
         ("FAKE_PART_OPAPI", "libopapi.so", ("-lascendcl", "-lnnopbase")))


def compile_fake(out_dir: Path, *defines: str, parts: tuple = PARTS) -> Path:
    """Compile the test double's libraries into ``out_dir`` (created).

    Each build is linked -Bsymbolic (its own calls stay inside it). Tests that need the same
    libraries under another directory symlink them, so dlopen sees one file and one state."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler (cc/gcc) to build the ACL test double")
    out_dir.mkdir(parents=True, exist_ok=True)
    for part, library, links in parts:
        command = [compiler, "-shared", "-fPIC", "-O1", "-Wall", f"-D{part}", *[f"-D{d}" for d in defines],
                   "-o", str(out_dir / library), str(FAKE_SOURCE), f"-L{out_dir}", *links,
                   "-Wl,-rpath,$ORIGIN", "-Wl,-Bsymbolic", "-lm"]
        built = subprocess.run(command, capture_output=True, text=True)
        if built.returncode != 0:
            raise RuntimeError(f"building the ACL test double failed:\n{built.stderr}")
    return out_dir


LOG_LINE = re.compile(r"^(\w+)\((.*)\)(?: -> (\S+))?(.*)$")


@dataclass
class Call:
    name: str
    args: str
    result: str | None
    rest: str


class FakeControl:
    """The test double's control surface (fake_* exports of its libascendcl)."""

    def __init__(self, runtime_library: ctypes.CDLL) -> None:
        self.lib = runtime_library
        self.lib.fake_log.restype = ctypes.c_char_p
        self.lib.fake_fail.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        self.lib.fake_set_soc_name.argtypes = [ctypes.c_char_p]
        self.lib.fake_set_version.argtypes = [ctypes.c_char_p]
        self.lib.fake_set_workspace_size.argtypes = [ctypes.c_uint64]
        self.lib.fake_set_device_count.argtypes = [ctypes.c_uint32]
        self.lib.fake_sizeof_package_version.restype = ctypes.c_size_t

    def reset(self) -> None:
        self.lib.fake_reset()

    def clear_log(self) -> None:
        self.lib.fake_clear_log()

    def log(self) -> str:
        return self.lib.fake_log().decode()

    def calls(self, include_err_msg: bool = False) -> list[Call]:
        out = []
        for line in self.log().splitlines():
            match = LOG_LINE.match(line)
            assert match, f"unparsable fake log line: {line!r}"
            call = Call(*match.groups())
            if include_err_msg or call.name != "aclGetRecentErrMsg":
                out.append(call)
        return out

    def names(self) -> list[str]:
        return [c.name for c in self.calls()]

    def fail(self, function: str, code: int, nth: int = 1) -> None:
        self.lib.fake_fail(function.encode(), nth, code)

    def live(self) -> dict[str, int]:
        return {"allocations": self.lib.fake_live_allocations(), "streams": self.lib.fake_live_streams(),
                "descriptors": self.lib.fake_live_descriptors(), "executors": self.lib.fake_live_executors()}

    def device_refs(self, device: int) -> int:
        return self.lib.fake_device_refs(device)


@dataclass
class FakeAcl:
    libraries: AclLibraries
    runtime: AclRuntime
    opapi: AclOpApi
    control: FakeControl

"""A vendor's backend brings its own expectations without touching the repository: a TOML file with a
``[backend]`` table beside a module (its predicates and named bounds), made known by a ``conform.known_bugs``
entry point of an installed distribution. Here all three live in a tmp folder put on sys.path."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.triage import _backend_of, deviation_bounds
from device import expectation_file, known_bugs
from golden.case import parse_case_id
from tests.graph_examples import example

MODULE = '''
from dataclasses import replace

import numpy as np

from device.golden_device import GoldenDevice
from golden.tolerance import Tolerance

NAMED_BOUNDS = {"acme_silu_f32": Tolerance("acme's SILU: exp2 of a 12-bit table", rtol=1e-4)}


def long_rows(case):
    """What the vocabulary cannot say: the row is longer than the kernel's tile."""
    return case.inputs[0].ne[0] > 16


class AcmeDevice:
    """The golden device as Acme's SILU gives it: 32·2^-23 relatively high (within the vendor's bound only)."""

    def __init__(self):
        self.name = "acme"
        self._golden = GoldenDevice()

    def info(self):
        return {"spec": "acme_conform_bugs:device", "name": "Acme0", "ggml_version": "1.0", "backend": "acme"}

    def supports(self, case):
        return self._golden.supports(case)

    def run(self, case, inputs):
        result = self._golden.run(case, inputs)
        if case.op != "SILU":
            return result
        out = result.output.astype(np.float32)
        return replace(result, output=(out * np.float32(1 + 32 * 2.0 ** -23)).astype(np.float32))

    def close(self):
        self._golden.close()


def device(options):
    return AcmeDevice()
'''
TOML = '''
[backend]
name = "acme"
devices = ["Acme*"]

[[bug]]
id = "acme-silu-table"
devices = "Acme*"
op = "SILU"
releases = ["1.0"]
reason = "SILU through a 12-bit exp2 table: a documented deviation"
repro = "SILU(type=f32,ne=[32,1,1,1],dst=f32,data=dense:0)"
deviation = "acme_silu_f32"
[[bug.when]]
python = "acme_conform_bugs:long_rows"

[[graph_bug]]  # no devices: the [backend] table's
id = "acme-argsort-graph-hang"
outcomes = ["timeout"]
corrupts_process = true
reason = "a graph with ARGSORT leaves the queue stalled"
repro = "acme_repro.c"
[[graph_bug.when]]
node_op = "ARGSORT"
'''
ENTRY_POINTS = "[conform.known_bugs]\nacme = acme_conform_bugs\n"
LONG = parse_case_id("SILU(type=f32,ne=[32,1,1,1],dst=f32,data=dense:0)")
SHORT = parse_case_id("SILU(type=f32,ne=[8,1,1,1],dst=f32,data=dense:0)")


@pytest.fixture
def vendor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "acme_conform_bugs.py").write_text(MODULE)
    (tmp_path / "acme_conform_bugs.toml").write_text(TOML)
    dist = tmp_path / "acme_conform_bugs-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-conform-bugs\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield tmp_path
    sys.modules.pop("acme_conform_bugs", None)


def test_a_plugged_in_backend_is_found_with_its_module(vendor: Path) -> None:
    found = {b.name: b for b in expectation_file.backends()}
    assert {"cpu", "vulkan", "acme"} <= set(found)
    acme = found["acme"]
    assert acme.path == vendor / "acme_conform_bugs.toml" and acme.module == "acme_conform_bugs"
    assert acme.covers("Acme0") and not acme.covers("Vulkan0")


def test_its_expectations_apply_to_its_device_only(vendor: Path) -> None:
    bug = known_bugs.find(LONG, "Acme0", "1.0")
    assert bug is not None and bug.id == "acme-silu-table" and bug.source == str(vendor / "acme_conform_bugs.toml")
    assert bug.tolerance is not None and bug.tolerance.rtol == 1e-4  # its named bound, from its own module
    assert known_bugs.find(SHORT, "Acme0", "1.0") is None  # its Python predicate
    assert known_bugs.find(LONG, "Acme0", "2.0") is None
    assert all(not b.id.startswith("acme-") for b in known_bugs.find_all(LONG, "CPU", "1.0"))
    assert deviation_bounds("Acme0", "SILU") == [("acme_silu_f32", bug.tolerance)]  # what triage tries
    assert _backend_of("Acme0") == ("acme", "Acme*")  # the name and pattern triage's proposed entry takes
    graph = known_bugs.find_graph(example("topk_moe/sigmoid_bias_decode"), "Acme0", "1.0")
    assert graph is not None and graph.id == "acme-argsort-graph-hang" and graph.corrupts_process
    assert graph.devices == "Acme*"  # taken from its [backend] table
    assert ("Acme0", "1.0") in known_bugs.targets()


def test_without_the_plugin_nothing_of_it_is_left(vendor: Path) -> None:
    sys.path.remove(str(vendor))
    importlib.invalidate_caches()
    assert "acme" not in {b.name for b in expectation_file.backends()}
    assert known_bugs.find(LONG, "Acme0", "1.0") is None


def test_an_entry_point_without_a_file_says_which(vendor: Path) -> None:
    (vendor / "acme_conform_bugs.toml").unlink()
    with pytest.raises(expectation_file.ExpectationFileError, match=r"entry point acme = acme_conform_bugs"):
        expectation_file.backends()


def test_a_plug_in_device_s_case_is_judged_by_the_vendor_s_entry(vendor: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    from conformance.harness import Harness

    root = Path(__file__).resolve().parent.parent
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(vendor), str(root)]))  # the device's worker imports it
    harness = Harness("acme_conform_bugs:device", {}, out_dir=str(tmp_path / "out"), timeout=60, run_id="r1")
    try:
        assert harness.bug_identity() == ("Acme0", "1.0")
        long_record, short_record = harness.evaluate(LONG), harness.evaluate(SHORT)
    finally:
        harness.close()
    # the long row is judged against the vendor's bound and passes it, recorded with the entry attached
    assert long_record.expected is not None and long_record.expected.id == "acme-silu-table", long_record.message
    assert long_record.decided_by == "deviation:acme-silu-table"
    # the short row has no entry: the catalogue's bound holds it, and the drift is 8x that
    assert short_record.expected is None and short_record.outcome.value == "fail", short_record.message

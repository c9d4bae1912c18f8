"""Repro lines that work when pasted anywhere (plug-ins included), and device columns that come from
the records, never from what a device's ``info()`` claims."""

from __future__ import annotations

import html as html_lib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reports.analysis import analyse, describes_cpu
from reports.html import build_report
from reports.repro import is_plugin_spec, pasteable_repro
from results.load import load_results
from tests.reports.synth import header, make_case, plugin_failure, write_results

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = "tests.plugins.faulty:erf_gelu_quick"
LINE = f"conform repro 'GELU_QUICK(type=f32,ne=[4,1,1,1],dst=f32,data=dense:1)' --device {PLUGIN}"


def test_plugin_specs() -> None:
    assert is_plugin_spec(PLUGIN) and is_plugin_spec("mypkg.dev:make")
    assert not any(map(is_plugin_spec, ("ggml:CPU", "ggml:CANN0", "acl:0", "golden")))


def test_builtin_devices_keep_their_line() -> None:
    line = "conform repro 'ADD(type=f32,ne=[4,1,1,1],dst=f32,data=dense:1)' --device ggml:CPU"
    assert pasteable_repro(line, "ggml:CPU", {"cwd": "/w"}, {}) == (line, "")
    absolute = line + " --ggml-lib /opt/llama/build/bin"
    assert pasteable_repro(absolute, "ggml:CPU", {"cwd": "/w"}, {}) == (absolute, "")


def test_plugin_lines_get_the_import_root_or_the_run_directory() -> None:
    with_root = pasteable_repro(LINE, PLUGIN, {"cwd": "/work/run dir"}, {"import_root": "/src/my plugin"})
    assert with_root == (f"PYTHONPATH='/src/my plugin' {LINE}", "")
    with_cwd = pasteable_repro(LINE, PLUGIN, {"cwd": "/work/run"}, {})
    assert with_cwd == (f"cd /work/run && PYTHONPATH=/work/run {LINE}", "")
    line, note = pasteable_repro(LINE, PLUGIN, {}, {})
    assert line == LINE and "tests.plugins.faulty must be importable" in note


def test_a_relative_ggml_lib_is_resolved_from_the_run_directory() -> None:
    line = "conform repro 'ADD(type=f32,ne=[4,1,1,1],dst=f32,data=dense:1)' --device ggml:CUDA0 --ggml-lib build/bin"
    assert pasteable_repro(line, "ggml:CUDA0", {"cwd": "/llama"}, {}) == (f"cd /llama && {line}", "")
    assert "relative" in pasteable_repro(line, "ggml:CUDA0", {}, {})[1]
    transfer = "pytest conformance/test_transfer.py --device ggml:CPU -k q4_0  # case SET_GET(type=q4_0)"
    assert pasteable_repro(transfer, "ggml:CPU", {"cwd": "/repo"}, {}) == (f"cd /repo && {transfer}", "")


def test_a_pasted_plugin_repro_runs_from_another_directory(tmp_path: Path) -> None:
    """The line the report prints is run by bash in an unrelated folder and reproduces the failure."""
    results = write_results(tmp_path / "run" / "results.jsonl", [plugin_failure(1, 4)],
                            header_record=header(devices=[PLUGIN], cwd=str(ROOT)))
    out = tmp_path / "report.html"
    build_report([results], out)
    match = re.search(r'<pre class="repro">(.*?)</pre>', out.read_text(), re.S)
    assert match is not None
    line = html_lib.unescape(match.group(1))
    assert line.startswith(f"cd {ROOT} && PYTHONPATH={ROOT} conform repro ")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # the venv's conform
    done = subprocess.run(["bash", "-c", line], cwd=elsewhere, env=env, capture_output=True, text=True,
                          timeout=240)
    assert "No module named" not in done.stderr, done.stderr
    assert done.returncode == 1 and done.stdout.startswith("FAIL  GELU_QUICK("), done.stdout + done.stderr


def test_columns_come_from_the_records_not_from_info(tmp_path: Path) -> None:
    """A plug-in that inherited the golden device's info() lists itself as "golden" in the header."""
    inherited = header(devices=["golden"])  # what info()["spec"] said
    results = write_results(tmp_path / "r.jsonl", [plugin_failure(1, 4), make_case("ADD", device=PLUGIN, index=2)],
                            header_record=inherited)
    out = tmp_path / "report.html"
    data = build_report([results], out)
    assert [column.spec for column in data.columns] == [PLUGIN]
    assert data.listed_without_cases == ["golden"]
    html = out.read_text()
    assert 'data-device="golden"' not in html and f'data-device="{PLUGIN}"' in html
    assert "<title>ggml conformance report: erf_gelu_quick</title>" in html


@pytest.mark.parametrize("spec, name", [("ggml:Vulkan0", "Vulkan0"), ("ggml:CANN0", "CANN0")])
def test_the_title_and_texts_name_the_devices_in_the_report(tmp_path: Path, spec: str, name: str) -> None:
    head = header(devices=[spec, "ggml:CPU"], env={})
    results = write_results(tmp_path / "r.jsonl", [make_case("ADD", device=spec), make_case("ADD", device="ggml:CPU")],
                            header_record=head)
    out = tmp_path / "report.html"
    data = analyse([load_results(results)])
    assert data.title() == f"ggml conformance report: {name}, CPU"
    build_report([results], out)
    html = out.read_text()
    assert f"<title>ggml conformance report: {name}, CPU</title>" in html
    assert f"computed on {name}, CPU against" in html
    if name != "CANN0":
        assert "CANN" not in html  # nothing on the page speaks of a backend that is not in it


def test_a_tolerance_reason_that_describes_the_cpu_says_so(tmp_path: Path) -> None:
    cpu_reason = plugin_failure(1, 4, device="ggml:Vulkan0")
    exact = make_case("RELU", device="ggml:Vulkan0", outcome="fail", index=2,
                      tolerance={"reason": "bit-exact: the op moves or selects values without arithmetic"})
    out = tmp_path / "report.html"
    build_report([write_results(tmp_path / "r.jsonl", [cpu_reason, exact])], out)
    html = out.read_text()
    gelu = html[html.index('data-case-id="GELU_QUICK'):]
    gelu = gelu[:gelu.index("</dl>")]
    relu = html[html.index('data-case-id="RELU'):]
    relu = relu[:relu.index("</dl>")]
    assert "describes ggml's CPU, where the bound was calibrated, not ggml:Vulkan0" in gelu
    assert "describes ggml" not in relu


@pytest.mark.parametrize(("fields", "noted"), [
    ({}, True),  # a file written before row ids: the row this catalogue keys by op and dtypes
    ({"decided_by": "catalogue:GELU_QUICK[f32]"}, True),
    ({"decided_by": "catalogue:RELU[*]"}, False),  # the reason's words do not decide
    ({"decided_by": "deviation:vk-gelu-quick"}, False),  # a known bug's own bound
    ({"tolerance": {"reason": "measured on ggml's CPU", "calibration": "definition"}}, False),
    ({"tolerance": {"reason": "the op's definition", "calibration": "ggml-cpu"}}, True),
])
def test_the_cpu_note_is_decided_by_the_tolerance_row_not_its_words(tmp_path: Path, fields: dict,
                                                                     noted: bool) -> None:
    record = plugin_failure(1, 4, device="ggml:Vulkan0") | fields
    assert describes_cpu(record) is noted
    out = tmp_path / "report.html"
    build_report([write_results(tmp_path / "r.jsonl", [record])], out)
    assert ("describes ggml's CPU, where the bound was calibrated" in out.read_text()) is noted

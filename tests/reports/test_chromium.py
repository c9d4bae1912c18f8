"""The report rendered by a real browser: the matrix cells exist in the DOM, the page draws."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from reports.html import build_report
from tests.reports.browser import dump_dom, find_chromium, screenshot
from tests.reports.synth import make_case, make_cases, write_results

pytestmark = pytest.mark.chromium

CHROMIUM = find_chromium()
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium binary on PATH (Debian: apt-get install chromium)"
)


@needs_chromium
def test_rendered_matrix_cells_exist_in_the_dom(tmp_path: Path) -> None:
    assert CHROMIUM is not None
    cpu = write_results(tmp_path / "cpu.jsonl", make_cases(400, devices=("ggml:CPU",)))
    hostile = make_case("ADD", device="ggml:CANN0", outcome="fail", run_id="r2",
                        params={"x": "<script>document.title='pwned'</script>"})
    npu_cases = make_cases(400, devices=("ggml:CANN0",), run_id="r2") + [hostile]
    npu = write_results(tmp_path / "npu.jsonl", npu_cases)
    out = tmp_path / "report.html"
    data = build_report([cpu, npu], out)

    dom = dump_dom(CHROMIUM, out)
    cells = re.findall(r'<td class="cell k-([a-z-]+)" data-kind="\1"', dom)
    assert len(cells) == len(data.matrix) * 2  # every op x type row has one cell per device
    assert {"all-pass", "claimed-fail", "not-claimed"} <= set(cells)
    assert "<title>ggml CANN conformance report</title>" in dom  # no injected script ran
    assert "&lt;script&gt;document.title" in dom

    png = screenshot(CHROMIUM, out, tmp_path / "report.png")
    header = png.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", header[16:24])
    assert (width, height) == (1400, 2400)

"""Issue 6's acceptance: a run on ggml:CPU and a run on a faulty plug-in merge into one report that
marks the faulty cells "claimed supported, but fails", with repro lines, rendered in Chromium."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from reports.analysis import CLAIMED_FAIL
from tests.reports.browser import dump_dom, find_chromium

ROOT = Path(__file__).resolve().parent.parent


def _run(tmp: Path, device: str, name: str) -> Path:
    out = tmp / name
    subprocess.run(
        [sys.executable, "-m", "conformance.cli", "run", "--device", device, "--out", str(out), "--profile", "dev",
         "-k", "gelu_quick or (relu and not leaky)", "--no-report"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    results = out / "results.jsonl"
    assert results.exists()
    return results


@pytest.fixture(scope="module")
def merged_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("e2e")
    cpu = _run(tmp, "ggml:CPU", "cpu")
    faulty = _run(tmp, "tests.plugins.faulty:erf_gelu_quick", "faulty")
    html = tmp / "report.html"
    done = subprocess.run([sys.executable, "-m", "conformance.cli", "report", str(cpu), str(faulty), "-o", str(html)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return html


def _cell(html: str, op: str, dtype: str, device: str) -> str:
    pattern = rf'<td class="cell k-([\w-]+)"[^>]*data-op="{op}" data-dtype="{dtype}" data-device="{device}"'
    match = re.search(pattern, html)
    assert match, f"no matrix cell for {op}/{dtype}/{device}"
    return match.group(1)


def test_faulty_cells_are_claimed_supported_but_failing(merged_report: Path) -> None:
    html = merged_report.read_text()
    faulty = "tests.plugins.faulty:erf_gelu_quick"
    assert _cell(html, "GELU_QUICK", "f32", faulty) == CLAIMED_FAIL
    assert _cell(html, "GELU_QUICK", "f32", "ggml:CPU") == "all-pass"
    assert _cell(html, "RELU", "f32", faulty) == "all-pass"  # only the faulty op is marked
    assert "conform repro &#39;GELU_QUICK(" in html or "conform repro 'GELU_QUICK(" in html


def test_merged_report_renders_in_chromium(merged_report: Path) -> None:
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("no chromium binary on PATH (.ci/run installs Debian's chromium as root)")
    dom = dump_dom(chromium, merged_report)
    assert f'class="cell k-{CLAIMED_FAIL}"' in dom

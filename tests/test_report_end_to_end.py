"""Acceptance on real runs: ggml:CPU and a faulty plug-in (GELU_QUICK computed as erf-GELU) merge
into one report that marks the faulty cells "claimed supported, but fails", lists the failures in
clusters that open with the shrunk case, draws the error against the input, names the devices it
holds (no phantom "golden" column from the plug-in's inherited info()), gives repro lines that work
when pasted, and lays out in Chromium without sideways scrolling."""

from __future__ import annotations

import html as html_lib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reports.analysis import CLAIMED_FAIL
from results.load import load_results
from tests.reports.browser import dump_dom, find_chromium
from tests.reports.test_chromium import measure

ROOT = Path(__file__).resolve().parent.parent
FAULTY = "tests.plugins.faulty:erf_gelu_quick"


def _run(tmp: Path, device: str, name: str) -> Path:
    out = tmp / name
    # an example database of its own: the checkout's (.hypothesis) may hold a failing example of these
    # tests from another run, which hypothesis replays without shrinking it again
    subprocess.run(
        [sys.executable, "-m", "conformance.cli", "run", "--device", device, "--out", str(out), "--profile", "dev",
         "-k", "gelu_quick or (relu and not leaky)", "--no-report", "--hypothesis-db", str(tmp / f"{name}-db")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    results = out / "results.jsonl"
    assert results.exists()
    return results


@pytest.fixture(scope="module")
def merged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("e2e")
    cpu = _run(tmp, "ggml:CPU", "cpu")
    faulty = _run(tmp, FAULTY, "faulty")
    html = tmp / "report.html"
    done = subprocess.run([sys.executable, "-m", "conformance.cli", "report", str(cpu), str(faulty), "-o", str(html)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return html, faulty


def _cell(html: str, op: str, dtype: str, device: str) -> str:
    pattern = rf'<td class="cell k-([\w-]+)"[^>]*data-op="{op}" data-dtype="{dtype}" data-device="{device}"'
    match = re.search(pattern, html)
    assert match, f"no matrix cell for {op}/{dtype}/{device}"
    return match.group(1)


def test_faulty_cells_are_claimed_supported_but_failing(merged: tuple[Path, Path]) -> None:
    html = merged[0].read_text()
    assert _cell(html, "GELU_QUICK", "f32", FAULTY) == CLAIMED_FAIL
    # ggml's CPU evaluates F32 GELU_QUICK through its F16 table: a known deviation, never "all-pass"
    cpu_f32 = re.search(r'<td class="cell k-[\w-]+"[^>]*data-op="GELU_QUICK" data-dtype="f32" '
                        r'data-device="ggml:CPU".*?</td>', html, re.S)
    assert cpu_f32 is not None and "known)" in cpu_f32.group(0)
    assert _cell(html, "GELU_QUICK", "f16", "ggml:CPU") == "all-pass"
    assert _cell(html, "RELU", "f32", FAULTY) == "all-pass"  # only the faulty op is marked
    assert "conform repro &#39;GELU_QUICK(" in html or "conform repro 'GELU_QUICK(" in html


def test_clusters_open_with_the_shrunk_case_and_plot_the_error(merged: tuple[Path, Path]) -> None:
    html = merged[0].read_text()
    clusters = re.findall(r'<section class="cluster" id="cluster-\d+" data-cluster="([^"]+)"', html)
    assert clusters and all(label.startswith("GELU_QUICK ") and FAULTY in label for label in clusters)
    first = re.search(r'data-case-id="([^"]+)" data-role="smallest"', html)
    assert first is not None and "ne=[1,1,1,1]" in first.group(1)  # Hypothesis shrinks to one element
    assert 'class="plot scatter"' in html  # the artefacts next to the results feed the error plot


def test_the_report_names_its_devices_and_no_phantom_column(merged: tuple[Path, Path]) -> None:
    html = merged[0].read_text()
    assert "<title>ggml conformance report: CPU, erf_gelu_quick</title>" in html
    assert 'data-device="golden"' not in html


def test_the_plugin_repro_works_when_pasted_elsewhere(merged: tuple[Path, Path], tmp_path: Path) -> None:
    html, faulty = merged
    header = load_results(faulty).headers[0]
    match = re.search(rf'<pre class="repro">([^<]*--device {re.escape(FAULTY)}[^<]*)</pre>(.*?)</dd>',
                      html.read_text(), re.S)
    assert match is not None
    line, note = html_lib.unescape(match.group(1)), match.group(2)
    located = isinstance(header.get("cwd"), str) or any(
        isinstance(d, dict) and d.get("import_root") for d in header.get("devices") or [])
    if not located:  # the harness did not record where the plug-in imports from: the report says so
        assert "must be importable" in note
        return
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 1 and done.stdout.startswith("FAIL  GELU_QUICK("), done.stdout + done.stderr


def test_merged_report_renders_in_chromium(merged: tuple[Path, Path], tmp_path: Path) -> None:
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("no chromium binary on PATH (.ci/run installs Debian's chromium as root)")
    dom = dump_dom(chromium, merged[0])
    assert f'class="cell k-{CLAIMED_FAIL}"' in dom
    for width in (1024, 1920):
        m = measure(merged[0], width, tmp_path)
        assert m["scrollWidth"] <= m["clientWidth"], json.dumps(m)[:500]
        assert m["plots"] and all(w > 0 and h > 0 for _, w, h in m["plots"])


def _partial_baseline(results: Path, out: Path) -> Path:
    """The first half of a run's results as a killed run leaves them: no footer, the last line cut off."""
    lines = results.read_text(encoding="utf-8").splitlines()
    cases = [line for line in lines if json.loads(line).get("type") == "case"]
    kept = cases[: len(cases) // 2]
    out.write_text("\n".join([lines[0], *kept]) + "\n" + cases[len(kept)][:60], encoding="utf-8")
    return out


def test_merged_report_over_a_partial_baseline_reads_at_both_widths(merged: tuple[Path, Path],
                                                                      tmp_path: Path) -> None:
    """The two runs (ggml:CPU and the planted fault) against a baseline of half a CPU run, killed: the
    baseline section lists the plug-in's new clusters and support changes, and at 1024 and 1920 px the
    page does not scroll sideways with every section open, the Summary fits, and the plots are drawn."""
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("no chromium binary on PATH (.ci/run installs Debian's chromium as root)")
    html_path, faulty = merged
    cpu = html_path.parent / "cpu" / "results.jsonl"
    baseline = _partial_baseline(cpu, tmp_path / "baseline.jsonl")
    assert load_results(baseline).is_partial
    page = tmp_path / "report.html"
    done = subprocess.run([sys.executable, "-m", "conformance.cli", "report", str(cpu), str(faulty),
                           "--baseline", str(baseline), "-o", str(page)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    html = page.read_text()
    def diff_rows(anchor: str) -> list[str]:
        section = html[html.index(f'id="{anchor}"'):]
        return re.findall(r"<tr><td>.*?</tr>", section[:section.index("</table>")])

    new_clusters, support_changes = diff_rows("diff-new-clusters"), diff_rows("diff-support")
    assert new_clusters and all(row.startswith("<tr><td>GELU_QUICK</td>") and FAULTY in row for row in new_clusters)
    faulty_changes = [row for row in support_changes if FAULTY in row]
    assert len(faulty_changes) == 2 and all(f'class="k-{CLAIMED_FAIL}"' in row for row in faulty_changes)
    assert 'id="baseline-partial"' in html  # the report says the baseline was cut off
    from tests.reports.test_chromium_model import measure as measure_words

    for width in (1024, 1920):
        words = measure_words(page, width, tmp_path, tables="table")
        # a soft hyphen (the Summary's "un&shy;expected") is a break the template offers
        broken = [b for b in words["broken"] if "\u00ad" not in b[1]]
        assert not broken, f"{width} px: words broken inside (text, word, section, table): {broken}"
        m = measure(page, width, tmp_path)
        assert m["scrollWidth"] <= m["clientWidth"], f"{width} px: {json.dumps(m)[:500]}"
        assert m["summaryRight"] <= m["clientWidth"] and m["summaryScroll"] <= m["summaryBox"], "Summary cut off"
        assert m["sections"] > 0 and m["openedSections"] == m["sections"], "a collapsed section opens onto nothing"
        assert m["plots"] and all(w > 0 and h > 0 for _, w, h in m["plots"])

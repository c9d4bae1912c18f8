"""The report as a browser lays it out, at 1024 and 1920 px: no horizontal overflow (long case ids,
messages, specs and paths wrap), the Summary table fits, every failure cluster is on the page, and
the plots are drawn with a size. The page has no script; the measurement runs in a copy."""

from __future__ import annotations

import html as html_lib
import json
import re
import struct
from pathlib import Path
from typing import Any

import pytest

from reports.analysis import ReportData
from reports.html import build_report
from tests.reports.browser import dump_dom, find_chromium, screenshot
from tests.reports.synth import gelu_quick_as_erf_gelu, header, make_case, make_cases, plugin_failure, write_results

pytestmark = pytest.mark.chromium

CHROMIUM = find_chromium()
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium binary on PATH (Debian: apt-get install chromium)"
)
LONG_PLUGIN = "vendor_conformance_plugins.accelerators.experimental_backend:make_device_with_a_long_factory_name"

# Runs in a copy of the report after layout; writes what it measured into a data attribute that
# --dump-dom returns.
MEASURE = """<script>
const root = document.documentElement;
const closedHeight = root.scrollHeight;  // as the page opens: collapsed sections closed
const sections = [...document.querySelectorAll('details')];
sections.forEach(d => { d.open = true; });  // then every section opened: each must lay out within the width
const rendered = el => { const r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
const summary = document.querySelector('table.summary');
const out = {
  scrollWidth: root.scrollWidth, clientWidth: root.clientWidth, closedHeight: closedHeight,
  sections: sections.length, openedSections: sections.filter(d => d.open && [...d.children].some(rendered)).length,
  summaryRight: summary.getBoundingClientRect().right, summaryScroll: summary.scrollWidth,
  summaryBox: summary.parentElement.clientWidth,
  widestCard: Math.max(...[...document.querySelectorAll('.failure, section.cluster')].map(
    el => el.getBoundingClientRect().right)),
  clusters: [...document.querySelectorAll('section.cluster[id^="cluster-"]')].map(
    el => [el.dataset.cluster, rendered(el)]),
  plots: [...document.querySelectorAll('svg.plot')].filter(el => !el.closest('details:not([open])')).map(
    el => [el.getAttribute('class'), Math.round(el.getBoundingClientRect().width),
           Math.round(el.getBoundingClientRect().height)]),
};
document.body.setAttribute('data-measured', JSON.stringify(out));
</script></body>"""


def rich_report(tmp_path: Path) -> tuple[ReportData, Path]:
    """Two ggml devices and a plug-in with a long spec, many clusters, long unbroken text, hostile
    markup, artefacts for the error plot, a known bug and a baseline run with a falling op."""
    run_dir = tmp_path / "nightly" / ("a-rather-long-folder-name-" * 4) / "results"
    cases = make_cases(600, devices=("ggml:CPU", "ggml:Vulkan0"), extra_ops=10, fail_rate=0.1)
    for index, size in enumerate((1, 96, 200, 300)):
        artefact = f"artefacts/gelu_quick-{index}.npz"
        gelu_quick_as_erf_gelu(run_dir / artefact, size, seed=index)
        cases.append(plugin_failure(1000 + index, size, device=LONG_PLUGIN, artefact=artefact))
    unbroken = "x" * 3000
    cases.append(make_case("CPY", device="ggml:Vulkan0", outcome="fail", index=2000, message=f"boom {unbroken}",
                           case_id=f"CPY(type=f32,ne=[{','.join(['4096'] * 40)}],dst=f32,data=wide:{unbroken[:300]})",
                           params={"note": "<script>document.title='pwned'</script>"}))
    cases.append(make_case("SILU", device="ggml:Vulkan0", outcome="fail", index=2001,
                           expected={"id": "vk-silu", "reason": "4 ulp", "repro": "SILU(...)"}))
    head = header(devices=["ggml:CPU", "ggml:Vulkan0", LONG_PLUGIN], cwd="/" + "very-long-directory/" * 12)
    head["devices"][0]["library_path"] = "/" + "deeply/nested/" * 20 + "libggml-base.so"
    results = write_results(run_dir / "results.jsonl", cases, header_record=head)
    base_cases = [c for c in make_cases(600, devices=("ggml:CPU", "ggml:Vulkan0"), extra_ops=10, seed=5,
                                        fail_rate=0.01, run_id="base")]
    base_cases += [make_case("GELU_QUICK", device=LONG_PLUGIN, index=3000 + i, run_id="base") for i in range(20)]
    baseline = write_results(tmp_path / "baseline.jsonl", base_cases)
    out = tmp_path / "html" / "report.html"
    data = build_report([results], out, baseline_paths=[baseline])
    return data, out


def measure(page: Path, width: int, tmp_path: Path) -> dict[str, Any]:
    assert CHROMIUM is not None
    probe = tmp_path / f"measure-{width}.html"
    probe.write_text(page.read_text().replace("</body>", MEASURE))
    dom = dump_dom(CHROMIUM, probe, f"--window-size={width},900")
    found = re.search(r'data-measured="([^"]*)"', dom)
    assert found, "the measuring script did not run"
    return json.loads(html_lib.unescape(found.group(1)))


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[ReportData, Path, Path]:
    tmp = tmp_path_factory.mktemp("chromium")
    data, page = rich_report(tmp)
    return data, page, tmp


@needs_chromium
@pytest.mark.parametrize("width", [1024, 1920])
def test_layout_at_width(report: tuple[ReportData, Path, Path], width: int) -> None:
    data, page, tmp = report
    m = measure(page, width, tmp)
    assert m["scrollWidth"] <= m["clientWidth"], "the page scrolls sideways"
    assert m["widestCard"] <= m["clientWidth"]
    assert m["summaryRight"] <= m["clientWidth"] and m["summaryScroll"] <= m["summaryBox"], "Summary cut off"
    # every cluster is on the page, drawn
    assert len(data.clusters) >= 20
    assert [label for label, _ in m["clusters"]] == [cluster.key.label for cluster in data.clusters]
    assert all(shown for _, shown in m["clusters"])
    # the plots are drawn with a size: the error-against-input scatter, a histogram per op and device
    # that ran, the pass rate of the op that fell since the baseline
    kinds = [cls for cls, w, h in m["plots"] if w > 0 and h > 0]
    assert len(kinds) == len(m["plots"])
    assert kinds.count("plot scatter") == 1
    histograms = sum(1 for op in data.ops.values() for stats in op.per_device.values() if stats.ran)
    assert kinds.count("plot hist") == histograms
    assert kinds.count("plot rate") >= 1


@needs_chromium
def test_nothing_injected_runs_and_the_page_draws(report: tuple[ReportData, Path, Path]) -> None:
    assert CHROMIUM is not None
    data, page, tmp = report
    dom = dump_dom(CHROMIUM, page)
    assert f"<title>{html_lib.escape(data.title(), quote=False)}</title>" in dom  # no injected script ran
    assert "Vulkan0" in data.title() and "CANN" not in data.title()
    assert "&lt;script&gt;document.title" in dom
    cells = re.findall(r'<td class="cell k-([a-z-]+)" data-kind="\1"', dom)
    assert len(cells) == len(data.matrix) * len(data.columns)
    png = screenshot(CHROMIUM, page, tmp / "report.png", width=1024, height=1600)
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", head[16:24]) == (1024, 1600)


def perf_report(tmp_path: Path) -> Path:
    """A perf run on ggml:CPU and a long-named plug-in over a baseline in which one case was faster."""
    def timed(device: str, label: str, median: float, run_id: str, index: int) -> dict[str, Any]:
        block = {"role": label, "median_s": median, "min_s": median, "max_s": median, "mean_s": median,
                 "repeats": 5, "warmup": 2, "bytes": 33 << 20, "flops": 34 << 30, "gb_per_s": 1.0, "gflop_per_s": 9.0}
        return make_case("MUL_MAT", device=device, index=index, run_id=run_id,
                         test_id=f"perf::llama-7b {label} attn_q f16 with a rather long role name",
                         case_id=f"MUL_MAT(type0=f16,ne0=[4096,4096,1,1],name0=blk.0.attn_q.weight,type1=f32,"
                                 f"ne1=[4096,{index},1,1],dst=f32,data=uniform:20240601)", perf=block)

    now, before = [], []
    for index, (label, n) in enumerate((("decode", 1), ("prefill", 512))):
        for device, scale in (("ggml:CPU", 1.0), (LONG_PLUGIN, 0.1)):
            now.append(timed(device, label, 1e-3 * n * scale, "now", n + index))
            faster = 0.5 if (label, device) == ("prefill", LONG_PLUGIN) else 1.0  # one regression
            before.append(timed(device, label, 1e-3 * n * scale * faster, "base", n + index))
    results = write_results(tmp_path / "perf" / "results.jsonl", now, header_record=header(run_id="now"))
    baseline = write_results(tmp_path / "perf-base.jsonl", before, header_record=header(run_id="base"))
    out = tmp_path / "perf-html" / "report.html"
    build_report([results], out, baseline_paths=[baseline])
    return out


@needs_chromium
def test_perf_section_lays_out_and_draws(tmp_path: Path) -> None:
    page = perf_report(tmp_path)
    html = page.read_text()
    assert html.count('class="regressed"') == 1 and 'id="perf-regressions"' in html
    m = measure(page, 1024, tmp_path)
    assert m["scrollWidth"] <= m["clientWidth"], "the perf section makes the page scroll sideways"
    charts = [(w, h) for cls, w, h in m["plots"] if cls == "plot perf"]
    assert len(charts) == 1 and all(w > 0 and h > 0 for w, h in charts)  # one op: one chart, drawn


# ---- a release manager's report at 81 ops: height, width, every section opens ------------------------
SCREEN_HEIGHT = 900  # the window the layout tests use
MOST_SCREENS = 10


def cpu_like_cases(device: str = "ggml:CPU", known_clusters: int = 116, run_id: str = "run-1") -> list[dict[str, Any]]:
    """What a clean run on ggml:CPU 0.20.2 looks like: every catalogue op in two types, mostly passing,
    and over a hundred clusters of known bugs (crashes and wrong values, each with its reason)."""
    from golden import catalogue

    cases: list[dict[str, Any]] = []
    index = 0
    pairs = [(op, dtype) for op in catalogue.OPS for dtype in ("f32", "f16")]
    for number, (op, dtype) in enumerate(pairs):
        for _ in range(12):
            cases.append(make_case(op, device=device, src0=dtype, dst=dtype, index=index, run_id=run_id,
                                   error_ratio=1.0 if number % 9 == 0 else 0.2))  # some half-ulp ties
            index += 1
        if number < known_clusters:
            crash = number % 2 == 0
            bug = {"id": f"cpu-known-bug-{number:03d}", "repro": f"{op}(type={dtype},ne=[4,2,3,1],dst={dtype})",
                   "reason": "the kernel addresses row j at j*nb1 of the source although the view is permuted "
                             "(evidence: ops.cpp, a minimal repro and the measured values)", "outcomes": ["crash"]}
            for _ in range(6):
                extra: dict[str, Any] = {"expected": bug}
                if crash:
                    extra["crash"] = {"signal": "SIGABRT", "exitcode": -6, "stderr_tail": "GGML_ASSERT(nb00 == 4)"}
                cases.append(make_case(op, device=device, src0=dtype, dst=dtype, index=index, run_id=run_id,
                                       outcome="crash" if crash else "fail", error_ratio=None if crash else 40.0,
                                       **extra))
                index += 1
    return cases


def _release_report(tmp_path: Path, with_failures: bool) -> Path:
    results = [write_results(tmp_path / "cpu" / "results.jsonl", cpu_like_cases())]
    if with_failures:  # a second device with unexpected failures, merged into one report
        cases = cpu_like_cases("ggml:Vulkan0", known_clusters=20, run_id="run-2")
        cases += [make_case(op, device="ggml:Vulkan0", outcome="fail", error_ratio=80.0, index=9000 + i,
                            run_id="run-2") for i, op in enumerate(("MUL_MAT", "SOFT_MAX", "ROPE", "GELU") * 5)]
        results.append(write_results(tmp_path / "vk" / "results.jsonl", cases,
                                     header_record=header(run_id="run-2", devices=["ggml:Vulkan0"])))
    out = tmp_path / "report.html"
    build_report(results, out)
    return out


@needs_chromium
@pytest.mark.parametrize("with_failures", [False, True], ids=["clean-cpu-run", "merged-run-with-failures"])
@pytest.mark.parametrize("width", [1024, 1920])
def test_a_release_report_reads_at_a_glance(tmp_path: Path, width: int, with_failures: bool) -> None:
    """At most ten screens tall at 1,024 px for a clean CPU run (collapsed sections closed); no sideways
    scroll with every section opened; every collapsed section opens onto content."""
    page = _release_report(tmp_path, with_failures)
    html = page.read_text()
    m = measure(page, width, tmp_path)
    assert m["scrollWidth"] <= m["clientWidth"], "with every section open, the page scrolls sideways"
    assert m["summaryRight"] <= m["clientWidth"] and m["summaryScroll"] <= m["summaryBox"], "Summary cut off"
    assert m["sections"] > 0 and m["openedSections"] == m["sections"], "a collapsed section opens onto nothing"
    if not with_failures and width == 1024:
        assert m["closedHeight"] <= MOST_SCREENS * SCREEN_HEIGHT, f"{m['closedHeight']} px tall"
    assert html.count('class="known-cluster"') >= 116  # one line each
    assert 'id="half-ulp-ties"' in html
    verdict = html[html.index('id="verdict"'):].split("</div>", 1)[0]
    assert ("Needs attention." in verdict) == with_failures and ("Healthy." in verdict) != with_failures


# ---- the model section: in the main report and in conform model's model.html ----------------------------
MODEL_MEASURE = """<script>
const root = document.documentElement;
document.querySelectorAll('details').forEach(d => { d.open = true; });
const box = el => el.getBoundingClientRect();
const tables = [...document.querySelectorAll('section.model table')];
const first = document.querySelector('section.model tr.first-failure');
document.body.setAttribute('data-measured', JSON.stringify({
  scrollWidth: root.scrollWidth, clientWidth: root.clientWidth,
  models: document.querySelectorAll('section.model').length,
  widestTable: Math.max(...tables.map(t => box(t).right)), tables: tables.length,
  firstFailure: first ? [box(first).width, box(first).height, first.cells[0].textContent] : null,
}));
</script></body>"""


def model_result(device: str, failing_at: int | None, nodes: int = 120) -> dict[str, Any]:
    """A conform model result as model.json holds it: long names, case ids and details, one failing node."""
    rows = []
    for index in range(nodes):
        status = "FAIL" if index == failing_at else ("not judged" if index % 17 == 5 else "pass")
        case_id = (f"MUL_MAT(type0=q8_0,ne0=[4096,14336,1,1],name0=blk.{index}.ffn_up.weight,type1=f32,"
                   f"ne1=[4096,{index + 1},1,1],dst=f32,data=uniform:0)")
        rows.append({"index": index, "step": index // 60, "name": f"ffn_up-{index}-with-a-long-llama-cpp-node-name",
                     "op": "MUL_MAT", "backend": device.partition(":")[2],
                     "shapes": f"q8_0[4096,14336,1,1], f32[4096,{index + 1},1,1] -> f32[14336,{index + 1},1,1]",
                     "status": status, "error_ratio": 40.0 if status == "FAIL" else (None if status != "pass" else 0.1),
                     "case_id": case_id if status != "not judged" else "",
                     "detail": "out[5,0,0,0]=0.145, but should be -0.105 " + "y" * 200 if status == "FAIL" else "",
                     "artefact": f"artefacts/node-{index:05d}-mul_mat.npz" if status == "FAIL" else ""})
    first = rows[failing_at] if failing_at is not None else None
    return {"model": "/models/" + "a-very-long-folder-name/" * 6 + "tiny-llama-q8_0.gguf", "device_spec": device,
            "device": device.partition(":")[2], "description": "llama, 2 layers, Q8_0",
            "verdict": f"FAIL at node {failing_at} (ffn_up, MUL_MAT)" if first else "pass",
            "counts": {"pass": nodes - 8, "not judged": 7, "FAIL": 1}, "replayed_from_device": 7,
            "first_failure": first, "logits_nmse_bar": 1e-4, "nodes": rows,
            "logits": [{"device": name, "nmse": 2.8e-4, "kl_mean": 1.3e-4, "kl_p999": 2.2e-4, "kl_max": 2.2e-4,
                        "top1_agreement": 1.0, "n_tokens": 8} for name in ("node by node", device.partition(":")[2])]}


def _model_measure(page: Path, width: int, tmp_path: Path) -> dict[str, Any]:
    assert CHROMIUM is not None
    probe = tmp_path / f"model-measure-{width}-{page.stem}.html"
    probe.write_text(page.read_text().replace("</body>", MODEL_MEASURE))
    dom = dump_dom(CHROMIUM, probe, f"--window-size={width},900")
    found = re.search(r'data-measured="([^"]*)"', dom)
    assert found, "the measuring script did not run"
    return json.loads(html_lib.unescape(found.group(1)))


@needs_chromium
@pytest.mark.parametrize("width", [1024, 1920])
def test_the_model_section_lays_out_in_the_report_and_in_model_html(tmp_path: Path, width: int) -> None:
    from reports.model_html import build_model_report

    folder = tmp_path / "model-run"
    for name, failing in (("Vulkan0", 70), ("CPU", None)):
        (folder / name).mkdir(parents=True)
        (folder / name / "model.json").write_text(json.dumps(model_result(f"ggml:{name}", failing)))
    results = write_results(tmp_path / "ops" / "results.jsonl", cpu_like_cases(known_clusters=4))
    page = tmp_path / "report.html"
    build_report([results], page, model_paths=[folder])  # a run folder with one model.json per device
    html = page.read_text()
    assert 'id="models"' in html and html.count('class="banner bad model-verdict"') == 1
    verdict = html[html.index('id="verdict"'):].split("</div>", 1)[0]
    assert "Needs attention." in verdict and "1 model run fails" in verdict
    model_page = build_model_report(sorted(folder.glob("*/model.json")), tmp_path / "model.html")
    for shown in (page, model_page):
        m = _model_measure(shown, width, tmp_path)
        assert m["models"] == 2 and m["tables"] == 4
        assert m["scrollWidth"] <= m["clientWidth"], f"{shown.name} scrolls sideways at {width} px"
        assert m["widestTable"] <= m["clientWidth"], f"a model table of {shown.name} is cut off"
        width_px, height_px, index = m["firstFailure"]
        assert width_px > 0 and height_px > 0 and index == "70", "the first failing node is not drawn"

"""The model section's node table as Chromium lays it out at 1024 and 1920 px, in ``conform model``'s
model.html and in the main report's Models section (they share reports/model_section.html.j2): no
header or value is broken inside a word (the letter-by-letter wrap of squeezed columns), every table
fits the window or scrolls in its own box, a mostly empty column takes no more than its share of the
width, and at 1920 px every node is one line. The measurement runs in a copy of the page."""

from __future__ import annotations

import html as html_lib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from reports.html import build_report
from reports.model_html import build_model_report
from tests.reports.browser import dump_dom, find_chromium
from tests.reports.synth import write_results
from tests.reports.test_chromium import cpu_like_cases, model_result

pytestmark = pytest.mark.chromium

CHROMIUM = find_chromium()
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium binary on PATH (Debian: apt-get install chromium)"
)

# A token (text between white space) longer than this may break anywhere (a hash, a run of one letter);
# a shorter one only after a hyphen or a slash, where a browser breaks it on its own, or where the report
# offers a break (a soft hyphen; <wbr> after , ( [ . : _ in identifiers, reports.html.breakable).
LONG_TOKEN = 40
# A column may be wider than the fraction of rows that fill it by this much (a mostly empty column that
# takes half the table is what the test is for).
EMPTY_COLUMN_SLACK = 0.10

MEASURE = """<script>
const root = document.documentElement;
document.querySelectorAll('details').forEach(d => { d.open = true; });
const LONG = LONG_TOKEN;
const range = document.createRange();
const broken = [];  // [cell text, token] for each token broken between lines where it should not be
function checkCell(cell) {
  const chars = [];  // [character, top of its line box]
  const walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  for (let node = walk.nextNode(); node; node = walk.nextNode()) {
    chars.push([' ', null]);  // text in another element (after a <br>, in a <span>) starts a new token
    for (let i = 0; i < node.data.length; i++) {
      range.setStart(node, i); range.setEnd(node, i + 1);
      const rects = range.getClientRects();
      chars.push([node.data[i], rects.length ? rects[0].top : null]);
    }
  }
  let token = [];
  const flush = () => {
    for (let i = 1; i < token.length; i++) {
      const [prev, prevTop] = token[i - 1], [, top] = token[i];
      if (prevTop !== null && top !== null && Math.abs(top - prevTop) > 1 && !'-/\u00ad,([.:_'.includes(prev)
          && token.length <= LONG) {
        const where = cell.closest('table'), sec = cell.closest('section, details');
        broken.push([cell.textContent.trim().slice(0, 80), token.map(c => c[0]).join(''),
                     (sec && sec.id) || '', (where && where.className) || '']);
        return;
      }
    }
  };
  for (const c of chars) {
    if (/\\s/.test(c[0])) { flush(); token = []; } else { token.push(c); }
  }
  flush();
}
const box = el => el.getBoundingClientRect();
const scrollsInItsBox = el => {
  for (let up = el.parentElement; up && up !== document.body; up = up.parentElement) {
    const overflow = getComputedStyle(up).overflowX;
    if (overflow === 'auto' || overflow === 'scroll') return box(up).right <= root.clientWidth;
  }
  return false;
};
const tables = [...document.querySelectorAll('TABLE_SELECTOR')];
tables.forEach(t => t.querySelectorAll('th, td').forEach(checkCell));
const columns = [], rowHeights = [];
document.querySelectorAll('section.model table.nodes').forEach(t => {
  const head = t.rows[0], width = box(t).width;
  const body = [...t.rows].slice(1).filter(r => r.cells.length === head.cells.length);  // a node's own row
  [...head.cells].forEach((th, i) => {
    const filled = body.filter(r => r.cells[i].textContent.trim() !== '').length / Math.max(body.length, 1);
    columns.push([th.textContent, box(th).width / width, filled]);
  });
  rowHeights.push([box(head).height, Math.max(...body.map(r => box(r).height))]);
});
document.body.setAttribute('data-measured', JSON.stringify({
  scrollWidth: root.scrollWidth, clientWidth: root.clientWidth, tables: tables.length,
  overflowing: tables.filter(t => box(t).right > root.clientWidth && !scrollsInItsBox(t)).length,
  broken: broken.slice(0, 20), brokenCount: broken.length, columns: columns, rowHeights: rowHeights,
  detailRows: document.querySelectorAll('section.model tr.node-detail').length,
}));
</script></body>""".replace("LONG_TOKEN", str(LONG_TOKEN))
MODEL_TABLES = "section.model table"


def llama_like_result(device: str, nodes: int = 150) -> dict[str, Any]:
    """A model.json as ``conform model --arch llama`` writes it on Vulkan0: llama.cpp's node names (with
    "(reshaped) (view)"), the host buffer's backend name, tiny and ordinary error ratios, statuses of
    every kind, and a detail on a few nodes only."""
    kinds = [("embd", "GET_ROWS", "Vulkan_Host (CPU)", "f32[64,128,1,1], i32[6,1,1,1] -> f32[64,6,1,1]"),
             ("norm-{l}", "RMS_NORM", device, "f32[64,6,1,1] -> f32[64,6,1,1]"),
             ("Qcur-{l}", "MUL_MAT", device, "q8_0[64,64,1,1], f32[64,6,1,1] -> f32[64,6,1,1]"),
             ("cache_v_l{l} (reshaped) (view)", "SET_ROWS", device,
              "f32[1,192,1,1], i64[192,1,1,1], f16[1,8192,1,1] -> f16[1,8192,1,1]"),
             ("kq_soft_max-{l}", "SOFT_MAX", device, "f32[256,6,4,1], f32[256,6,1,1] -> f32[256,6,4,1]"),
             ("__fattn__-{l}", "FLASH_ATTN_EXT", device,
              "f32[16,6,4,1], f16[16,256,2,1], f16[16,256,2,1], f16[256,8,1,1] -> f32[16,4,6,1]"),
             ("ffn_moe_topk-{l}", "ARGSORT", device, "f32[8,6,1,1] -> i32[8,6,1,1]")]
    rows = []
    for index in range(nodes):
        name, op, backend, shapes = kinds[index % len(kinds)]
        status = ("expected" if index % 37 == 25 else "not judged" if index % 29 == 6 else
                  "FAIL" if index == 140 else "pass")
        detail = {"expected": "known bug vulkan-mul-mat-f16-intermediates: out[1,2,1,0]=-1.107421875, but should be "
                              "-1.108915803813943 (|Δ|=0.00149, 1.78× the allowed error; 18/384 elements out of "
                              "tolerance, 0 NaN/inf mismatches, NMSE 9.96e-08)",
                  "not judged": "no golden translation for this node's op",
                  "FAIL": "out[3,1,0,0]=nan, but should be 0.25"}.get(status, "")
        rows.append({"index": index, "step": index // 60, "name": name.format(l=index // 40), "op": op,
                     "backend": backend, "shapes": shapes, "status": status,
                     "error_ratio": None if status == "not judged" else 5.76e-06 * (index + 1),
                     "case_id": "" if status == "not judged" else f"{op}(type=f32,ne=[64,6,1,1],data=uniform:0)",
                     "detail": detail, "artefact": ""})
    return {"model": "/tmp/model-run/tiny-llama-q8_0-s0.gguf", "device_spec": f"ggml:{device}", "device": device,
            "description": "llama ?B (guessed) Q8_0", "verdict": "FAIL at node 140 (__fattn__-3, FLASH_ATTN_EXT)",
            "counts": {"pass": 140, "expected": 4, "not judged": 5, "FAIL": 1}, "replayed_from_device": 1,
            "first_failure": rows[140], "logits_nmse_bar": 1e-4, "nodes": rows,
            "logits": [{"device": name, "nmse": 1.97e-07, "kl_mean": 9.08e-08, "kl_p999": 1.76e-07,
                        "kl_max": 1.76e-07, "top1_agreement": 1.0, "n_tokens": 8}
                       for name in ("node by node", device, "CPU")]}


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """model.html and the main report of one model run folder: three devices, one model.json each (a
    llama-shaped run with details on few nodes, long names with one long unbroken detail, a run whose
    nodes all pass with no detail at all)."""
    tmp = tmp_path_factory.mktemp("chromium-model")
    folder = tmp / "model-run"
    records = {"Vulkan0": llama_like_result("Vulkan0"), "CANN0": model_result("ggml:CANN0", 70),
               "CPU": model_result("ggml:CPU", None)}
    for name, record in records.items():
        (folder / name).mkdir(parents=True)
        (folder / name / "model.json").write_text(json.dumps(record))
    model_page = build_model_report(sorted(folder.glob("*/model.json")), tmp / "model.html")
    results = write_results(tmp / "ops" / "results.jsonl", cpu_like_cases(known_clusters=4))
    report = tmp / "report.html"
    build_report([results], report, model_paths=[folder])
    return model_page, report, tmp


def measure(page: Path, width: int, tmp_path: Path, tables: str = MODEL_TABLES) -> dict[str, Any]:
    """The layout figures of ``page`` at ``width``; ``tables``: the CSS selector of the tables whose
    cells are checked for words broken inside."""
    assert CHROMIUM is not None
    probe = tmp_path / f"measure-{page.stem}-{width}.html"
    probe.write_text(page.read_text().replace("</body>", MEASURE.replace("TABLE_SELECTOR", tables)))
    dom = dump_dom(CHROMIUM, probe, f"--window-size={width},900")
    found = re.search(r'data-measured="([^"]*)"', dom)
    assert found, "the measuring script did not run"
    return json.loads(html_lib.unescape(found.group(1)))


@needs_chromium
@pytest.mark.parametrize("which", ["model.html", "report.html"])
@pytest.mark.parametrize("width", [1024, 1920])
def test_the_node_table_reads_at_width(pages: tuple[Path, Path, Path], width: int, which: str) -> None:
    model_page, report, tmp = pages
    m = measure(model_page if which == "model.html" else report, width, tmp)
    assert m["tables"] == 6  # logits and nodes of three runs
    assert m["brokenCount"] == 0, f"{m['brokenCount']} cells broken inside a word, e.g. {m['broken']}"
    assert m["scrollWidth"] <= m["clientWidth"], f"the page scrolls sideways at {width} px"
    assert m["overflowing"] == 0, "a model table is cut off (wider than the window, in no scrolling box)"
    crowded = [(name, round(share, 2), round(filled, 2)) for name, share, filled in m["columns"]
               if share > filled + EMPTY_COLUMN_SLACK]
    assert not crowded, f"columns wider than the share of rows they fill (name, width share, filled): {crowded}"
    # every node's detail is on the page: the llama-shaped run's expected, not judged and failing nodes
    # and the long-named run's failing node
    assert m["detailRows"] == 4 + 5 + 1 + 1
    if width == 1920:  # room enough: no node wraps onto a second line
        assert all(tallest <= header + 2 for header, tallest in m["rowHeights"]), m["rowHeights"]

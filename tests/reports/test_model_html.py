"""The model section page (``conform model``'s model.html): the verdict, the logits figures, every node with
the first failing one highlighted, and results text escaped; rendered by headless Chromium where there is one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reports.model_html import build_model_report, render_model_section
from tests.reports.browser import dump_dom, find_chromium


def _verdict() -> dict[str, Any]:
    nodes = [
        {"index": 3, "step": 0, "name": "norm-0", "op": "RMS_NORM", "shapes": "f32[64,6,1,1] -> f32[64,6,1,1]",
         "status": "pass", "error_ratio": 0.06, "case_id": "RMS_NORM(...)", "detail": "", "artefact": ""},
        {"index": 9, "step": 1, "name": "attn_norm-0", "op": "MUL", "shapes": "f32[64,1,1,1] -> f32[64,1,1,1]",
         "status": "FAIL", "error_ratio": 6.7e7, "case_id": "MUL(type0=f32,ne0=[64,1,1,1])",
         "detail": "out[5,0,0,0]=0.145, but should be -0.105 <script>", "artefact": "artefacts/node-00009-mul.npz"},
        {"index": 12, "step": 1, "name": "ffn_moe", "op": "TOP_K", "shapes": "f32[4,1,1,1] -> i32[2,1,1,1]",
         "status": "not judged", "error_ratio": None, "case_id": "", "detail": "no translation", "artefact": ""},
    ]
    return {"model": "tiny-llama.gguf", "device_spec": "ggml:Vulkan0", "description": "llama Q8_0",
            "verdict": "FAIL at node 9 (attn_norm-0, MUL)", "counts": {"pass": 1, "FAIL": 1, "not judged": 1},
            "replayed_from_device": 1, "first_failure": nodes[1], "logits_nmse_bar": 1e-4,
            "logits": [{"device": "node by node", "nmse": 1e-3, "kl_mean": 5e-4, "kl_p999": 2e-3, "kl_max": 2e-3,
                        "top1_agreement": 1.0, "n_tokens": 8}],
            "nodes": nodes}


def test_the_model_section_highlights_the_first_failing_node_and_escapes_text() -> None:
    page = render_model_section([_verdict()])
    assert 'class="status-FAIL first-failure"' in page
    assert page.count("first-failure\"") == 1
    assert "&lt;script&gt;" in page and "<script>" not in page
    assert "conform repro 'MUL(type0=f32,ne0=[64,1,1,1])' --device ggml:Vulkan0" in page
    assert 'class="status-not-judged"' in page
    assert "FAIL at node 9" in page and "100.0%" in page


def test_an_incomplete_run_lists_its_gaps_by_reason_and_says_the_logits_are_not_judged() -> None:
    incomplete = dict(_verdict(), verdict="incomplete: 1 of 3 computed nodes not judged; logits not judged",
                      first_failure=None, logits=[], replayed_from_device=1,
                      not_judged=[{"reason": "a source has ggml type q4_1, which the golden does not read", "nodes": 1,
                                   "ops": ["TOP_K"]}],
                      logits_not_judged="the golden's forward pass cannot compute 1 node(s) (no translation: 1)")
    page = render_model_section([incomplete])
    assert "not judged: 1 node(s) (TOP_K): a source has ggml type q4_1, which the golden does not read" in page
    assert "Logits against the golden's own forward pass: not judged" in page
    assert "forward pass cannot compute 1 node(s) (no translation: 1)" in page  # the results text is escaped
    assert "NMSE bar" not in page and "took 1 node(s) from the device" not in page
    assert 'class="verdict-fail">incomplete' in page


def test_a_crashed_run_has_its_section_too() -> None:
    crashed = {"device_spec": "ggml:CANN0", "model": "m.gguf", "device": "CANN0", "description": "",
               "verdict": "CRASH at node 7 (ffn_up-7, MUL_MAT, step 0)", "counts": {}, "replayed_from_device": 0,
               "first_failure": None, "logits": [], "logits_nmse_bar": 1e-4, "nodes": [],
               "crash": {"verdict": "CRASH at node 7", "detail": "the model process died (signal 6)",
                         "stage": "capture",
                         "node": "node\t7\t0\tMUL_MAT\tffn_up-7"}}
    page = render_model_section([_verdict(), crashed])
    assert page.count('<section class="model"') == 2
    assert "CRASH at node 7 (ffn_up-7, MUL_MAT, step 0)" in page and "the model process died (signal 6)" in page


@pytest.mark.chromium
@pytest.mark.skipif(find_chromium() is None, reason="no chromium binary on PATH (Debian: apt-get install chromium)")
def test_the_model_section_renders_in_chromium(tmp_path: Path) -> None:
    import json

    (tmp_path / "model.json").write_text(json.dumps(_verdict()))
    page = build_model_report([tmp_path / "model.json"], tmp_path / "model.html")
    binary = find_chromium()
    assert binary is not None
    dom = dump_dom(binary, page, "--window-size=1024,900")
    # logits header + row, nodes header + 3 nodes, and a detail row under each of the 2 nodes with a detail
    assert dom.count("<tr") == 1 + 1 + 1 + 3 + 2
    assert "first-failure" in dom and "FAIL at node 9" in dom


def test_conform_report_takes_model_results_beside_op_results(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from reports.cli import report_main
    from tests.reports.synth import make_cases, write_results

    run = tmp_path / "model-run"
    run.mkdir()
    (run / "model.json").write_text(json.dumps({"device_spec": "ggml:Vulkan0", **_verdict()}, indent=1))
    renamed = tmp_path / "vulkan-model.json"  # any name: a .json that opens as a model result
    renamed.write_text((run / "model.json").read_text())
    results = write_results(tmp_path / "results.jsonl", make_cases(20))
    for model_input in (run, run / "model.json", renamed):
        out = tmp_path / "report.html"
        assert report_main([str(results), str(model_input), "-o", str(out)]) == 0
        page = out.read_text()
        assert 'id="models"' in page and 'class="status-FAIL first-failure"' in page
        assert "Model tiny-llama.gguf on ggml:Vulkan0: FAIL at node 9" in page  # the banner at the top
        assert "1 model run (1 failing)" in capsys.readouterr().out
    # a model result alone makes a report too
    assert report_main([str(run), "-o", str(tmp_path / "alone.html")]) == 0
    assert "FAIL at node 9" in (tmp_path / "alone.html").read_text()
    # a folder without model.json, or a JSON that is not a model result: one line, exit 2
    (tmp_path / "empty").mkdir()
    broken = tmp_path / "model.json"
    broken.write_text('{"device_spec": "ggml:CPU"}')
    for bad, reason in ((tmp_path / "empty", "a folder without model.json"), (broken, "not a conform model result")):
        assert report_main([str(bad), "-o", str(tmp_path / "x.html")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and reason in err[0]

"""Memory growth per device process, from the footer's devices_end, is flagged in the report."""

from __future__ import annotations

from pathlib import Path

import pytest

from reports.cli import report_main
from reports.runstatus import MEMORY_GROWTH_FLAG
from tests.reports.synth import footer, make_case, write_results

MIB = 2**20


def _run(tmp_path: Path, rss_growth: int, used_growth: int) -> tuple[int, str, str]:
    end = [{"spec": "ggml:CPU", "worker_rss_start": 40 * MIB, "worker_rss_end": 40 * MIB + rss_growth,
            "worker_rss_growth": rss_growth, "worker_rss_growth_max": rss_growth, "memory_used_growth": used_growth}]
    path = write_results(tmp_path / "r.jsonl", [make_case("ADD", index=i) for i in range(3)],
                         footer_record=footer(exitstatus=0, pytest_failed=0, pytest_errors=0, devices_end=end))
    out = tmp_path / "report.html"
    code = report_main([str(path), "-o", str(out)])
    return code, out.read_text(), str(path)


def test_a_leaking_device_process_is_flagged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, html, _ = _run(tmp_path, rss_growth=3 * 1024 * MIB, used_growth=0)
    assert code == 0
    assert 'id="memory-growth"' in html and "the device process grew by 3,072 MiB from 40 MiB" in html
    assert "grew by 3,072 MiB" in capsys.readouterr().err


def test_device_memory_not_given_back_is_flagged(tmp_path: Path) -> None:
    _, html, _ = _run(tmp_path, rss_growth=0, used_growth=MEMORY_GROWTH_FLAG + MIB)
    assert 'id="memory-growth"' in html and "of device memory in use at the end" in html


def test_ordinary_growth_is_not_flagged(tmp_path: Path) -> None:
    _, html, _ = _run(tmp_path, rss_growth=30 * MIB, used_growth=0)
    assert 'id="memory-growth"' not in html

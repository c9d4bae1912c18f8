"""Several devices under pytest-xdist: one results file, each worker pinned to one device.

Worker gwN serves device N mod count; a test runs on the device of the worker that xdist gives it,
so the selection is spread over the devices. Every worker appends its own header, its case records
and its footer to the one results file, all under the controller's run id.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).parent.parent
# four tests, so xdist's first batch gives each of the two workers some
SELECTION = "f32 and not leaky and (relu or tanh or silu or sqr)"


def run(args: list[str], cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("CONFORM_RUN_ID", None)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=180)


def check_one_file_two_workers(results: Path, devices: list[str]) -> list[dict]:
    records = [json.loads(line) for line in results.read_text().splitlines()]
    kinds = Counter(r["type"] for r in records)
    assert kinds["header"] == 2 and kinds["footer"] == 2, kinds
    assert len({r["run_id"] for r in records}) == 1, "all workers of one run share its run id"
    headers = {r["worker"]: r for r in records if r["type"] == "header"}
    footers = {r["worker"]: r for r in records if r["type"] == "footer"}
    assert set(headers) == set(footers) == {"gw0", "gw1"}
    cases = [r for r in records if r["type"] == "case"]
    for index, worker in enumerate(("gw0", "gw1")):
        # pinning: gwN serves device N, its header describes exactly that device
        assert [d["spec"] for d in headers[worker]["devices"]] == [devices[index]]
        mine = [r for r in cases if r["worker"] == worker]
        assert mine and {r["device"] for r in mine} == {devices[index]}
        assert sum(footers[worker]["counts"].values()) == len(mine)
        # each worker writes its header before its cases and its footer after them
        lines = [i for i, r in enumerate(records) if r["worker"] == worker]
        assert records[lines[0]]["type"] == "header" and records[lines[-1]]["type"] == "footer"
    assert {r["device"] for r in cases} == set(devices)
    return records


def test_pytest_xdist_two_devices_one_file(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    proc = run(["-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "--device", "ggml:CPU",
                "--device", "golden", "-n", "2", "-k", SELECTION, "--results", str(results),
                "--conform-profile", "dev"])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    check_one_file_two_workers(results, ["ggml:CPU", "golden"])


def test_conform_run_with_a_glob_spreads_over_workers(tmp_path: Path) -> None:
    """``conform run`` starts one worker per device by default; ``ggml:C*`` expands to ggml:CPU."""
    out = tmp_path / "run"
    proc = run(["-m", "conformance.cli", "run", "--device", "ggml:C*", "--device", "golden",
                "--profile", "dev", "--out", str(out), "-k", SELECTION])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "running 2 device(s) ggml:CPU, golden" in proc.stdout
    check_one_file_two_workers(out / "results.jsonl", ["ggml:CPU", "golden"])
    # one report from the merged file, with a matrix column for each worker's device
    html = (out / "report.html").read_text()
    assert 'data-device="ggml:CPU"' in html and 'data-device="golden"' in html

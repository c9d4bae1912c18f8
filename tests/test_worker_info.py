"""DeviceWorker.refresh_info: a fresh inventory from the device process, also after a crash."""

from __future__ import annotations

from conformance.harness import Harness
from golden.case import OpCase, TensorSpec


def test_refresh_info_on_a_ggml_device() -> None:
    h = Harness("ggml:CPU", {}, timeout=60)
    try:
        info = h.refresh_info()
        assert info["spec"] == "ggml:CPU" and info["memory_free"] > 0 and info["worker_rss_bytes"] > 0
        assert "worker_rss_bytes" not in h.inventory  # the opening inventory (the header's) is kept as was
    finally:
        h.close()


def test_refresh_info_restarts_a_crashed_worker() -> None:
    h = Harness("tests.plugins.faulty:aborts_on_odd_rows", {}, timeout=60)
    try:
        assert h.evaluate(OpCase("RELU", (TensorSpec("f32", (7, 1, 1, 1)),))).outcome == "crash"
        info = h.refresh_info()
        assert info["spec"] == "golden" and info["worker_rss_bytes"] > 0  # the plug-in reports as golden
        assert h.runner.restarts == 1
    finally:
        h.close()


def test_refresh_info_in_process() -> None:
    h = Harness("golden", {})
    assert h.refresh_info()["backend"] == "golden"

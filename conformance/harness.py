"""Running one case on one device end to end: inputs, golden, device attempt, verdict, record.

:class:`Harness` is what the pytest fixture ``conform`` hands to tests and what ``conform repro``
uses. ``check(case)`` returns the results record and raises :class:`CaseFailed` (an
AssertionError) for fail/crash/timeout/error outcomes, with the one-line repro attached.
"""

from __future__ import annotations

import os
import shlex
import time
from typing import Any

import numpy as np

from conformance import cases
from conformance.data import as_stored, make_inputs
from conformance.verdict import Metrics, compare, same_values
from device import known_bugs
from device.base import DeviceError, RunResult
from device.known_bugs import KnownBug
from device.worker import Attempt, DeviceWorker
from golden import catalogue, dtypes
from golden.case import OpCase, TensorSpec

FAILING = ("fail", "crash", "timeout", "error")

class CaseFailed(AssertionError):
    """A case whose outcome is fail, crash, timeout or error."""


class InProcessRunner:
    """Runs an in-process device (the golden oracle) with the worker's ``attempt`` interface."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.inventory = device.info()
        self.spec = device.name

    def attempt(self, case: OpCase, inputs: list[np.ndarray], timeout: float | None = None) -> Attempt:
        from device.base import Unsupported

        start = time.perf_counter()
        try:
            supported = self.device.supports(case)
            if supported is False:
                return Attempt("unsupported", False, message="the device rejects this case")
            result = self.device.run(case, inputs)
            return Attempt("ok", supported, result, duration_s=time.perf_counter() - start)
        except Unsupported as exc:
            return Attempt("unsupported", None, message=str(exc))
        except Exception as exc:
            return Attempt("error", None, message=f"{type(exc).__name__}: {exc}")

    def refresh_info(self) -> dict[str, Any]:
        from device.worker import process_rss

        return dict(self.device.info()) | {"worker_rss_bytes": process_rss()}

    def call(self, method: str, args: tuple[Any, ...], timeout: float | None = None) -> Attempt:
        if not hasattr(self.device, method):
            return Attempt("unsupported", None, message=f"{self.spec} has no {method}()")
        start = time.perf_counter()
        try:
            return Attempt("ok", True, getattr(self.device, method)(*args), duration_s=time.perf_counter() - start)
        except Exception as exc:
            return Attempt("error", None, message=f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        self.device.close()


def open_runner(spec: str, options: dict[str, Any], timeout: float) -> InProcessRunner | DeviceWorker:
    if spec == "golden":
        from device.registry import open_device

        return InProcessRunner(open_device(spec, options))
    worker = DeviceWorker(spec, options, timeout=timeout)
    worker.start()
    return worker


def _describe_case(case: OpCase) -> dict[str, Any]:
    names = [f"src{i}" for i in range(len(case.inputs))]
    return {
        "dtypes": {n: t.dtype for n, t in zip(names, case.inputs, strict=True)} | {"dst": case.out_dtype},
        "shapes": {n: list(t.ne) for n, t in zip(names, case.inputs, strict=True)},
        "layout": {n: t.layout.label() for n, t in zip(names, case.inputs, strict=True)},
        "params": dict(case.params) | ({"form": case.variant} if case.variant else {}),
    }


def repro_line(case: OpCase, device: str, options: dict[str, Any]) -> str:
    parts = ["conform", "repro", case.case_id, "--device", device]
    if options.get("ggml_lib"):
        parts += ["--ggml-lib", str(options["ggml_lib"])]
    return " ".join(shlex.quote(p) for p in parts)


class Harness:
    def __init__(
        self,
        device_spec: str,
        options: dict[str, Any] | None = None,
        writer: Any = None,
        out_dir: str = ".",
        timeout: float = 120.0,
        base_record: dict[str, Any] | None = None,
    ) -> None:
        self.device_spec = device_spec
        self.options = dict(options or {})
        self.writer = writer
        self.out_dir = out_dir
        self.timeout = timeout
        self.base_record = dict(base_record or {})
        cases.load_all()
        self.runner = open_runner(device_spec, self.options, timeout)
        self.current_test_id = ""
        self.counts: dict[str, int] = {}
        self._artefacts = 0

    @property
    def inventory(self) -> dict[str, Any]:
        return self.runner.inventory

    def refresh_info(self) -> dict[str, Any]:
        """The device's inventory now (free memory) plus the device process' RSS (``worker_rss_bytes``)."""
        return self.runner.refresh_info()

    def close(self) -> None:
        self.runner.close()

    # ---- one case ------------------------------------------------------------------------------
    def evaluate(self, case: OpCase) -> dict[str, Any]:
        spec = catalogue.get(case.op)
        inputs = [as_stored(x, t.dtype) for x, t in zip(make_inputs(case), case.inputs, strict=True)]
        exact_inputs = catalogue.golden_inputs(case, inputs)  # float64 values (quantized ones dequantized)
        golden = catalogue.evaluate(case, exact_inputs)
        bug = self._known_bug(case)
        timeout = self.timeout
        if bug is not None and bug.corrupts_process:
            timeout = min(timeout, known_bugs.CORRUPTING_CASE_TIMEOUT_S)  # a known heap overrun may hang
        attempt = self.runner.attempt(case, inputs, timeout)
        record: dict[str, Any] = {
            "type": "case",
            **self.base_record,
            "test_id": self.current_test_id,
            "case_id": case.case_id,
            "device": self.device_spec,
            "op": case.op,
            **_describe_case(case),
            "distribution": case.distribution,
            "data_seed": case.data_seed,
            "supported": attempt.supported,
            "duration_s": round(attempt.duration_s, 6),
            "repro": repro_line(case, self.device_spec, self.options),
            "artefact": None,
            "message": attempt.message,
        }
        record["tolerance"] = catalogue.tolerance_of(case).describe()
        if attempt.status != "ok":
            record["outcome"] = attempt.status
            if attempt.crash:
                record["crash"] = attempt.crash
        else:
            result: RunResult = attempt.result  # type: ignore[assignment]
            metrics = self._judge(case, spec, inputs, exact_inputs, golden, result)
            record["metrics"] = metrics.as_dict()
            record["outcome"] = "pass" if metrics.passed else "fail"
            if not metrics.passed:
                record["message"] = metrics.detail
            record["extra"] = {k: v for k, v in result.extra.items()
                               if k not in ("input_bytes_intact", "integrity_failures")}
        if bug is not None and (record["outcome"] in bug.outcomes or record["outcome"] == "pass"):
            # a failure this device and release are known to give, or a pass where one was expected
            # (the report lists the latter as a stale expectation)
            record["expected"] = {"id": bug.id, "reason": bug.reason, "repro": bug.repro,
                                  "outcomes": list(bug.outcomes)}
            if bug.corrupts_process and hasattr(self.runner, "start"):
                self.runner.start()  # the kernel wrote past a buffer: later cases get a clean process
        if record["outcome"] in FAILING:
            record["artefact"] = self._save_artefact(case, inputs, golden, attempt)
        self._record(record)
        return record

    def _known_bug(self, case: OpCase) -> KnownBug | None:
        """The device's known kernel bug covering ``case`` (ggml devices: by device name and release)."""
        release = self.inventory.get("ggml_version")
        name = self.inventory.get("name")
        if not isinstance(release, str) or not isinstance(name, str):
            return None
        return known_bugs.find(case, name, release)

    def _record(self, record: dict[str, Any]) -> None:
        """Count a finished record's outcome and append it to the results file (flushed at once)."""
        self.counts[record["outcome"]] = self.counts.get(record["outcome"], 0) + 1
        if self.writer is not None:
            self.writer.write(record)

    def _judge(
        self, case: OpCase, spec: catalogue.OpSpec, inputs: list[np.ndarray], exact_inputs: list[np.ndarray],
        golden: np.ndarray, result: RunResult,
    ) -> Metrics:
        special = cases.lookup(case.op).judge
        if dtypes.is_quantized(case.out_dtype):
            from conformance.verdict_quant import judge_quantized

            metrics = judge_quantized(case, inputs, golden, result.output)
        elif special is not None:
            metrics = special(case, exact_inputs, golden, result.output)
        else:
            out = result.output
            if case.out_dtype != "i32":
                out = np.asarray(out, dtype=np.float64)
            metrics = compare(case, exact_inputs, golden, out, catalogue.tolerance_of(case))
        failures = result.extra.get("integrity_failures") or []
        if failures:
            metrics.passed = False
            note = "device memory check failed: " + ", ".join(failures)
            metrics.detail = f"{note}; {metrics.detail}" if metrics.detail else note
        # the device must not change its inputs (ops in place by definition excepted)
        if result.inputs_after is not None:
            changed = [
                i for i, (before, after) in enumerate(zip(inputs, result.inputs_after, strict=True))
                if i not in spec.inplace_inputs and not same_values(before, after)
            ]
            intact = result.extra.get("input_bytes_intact")
            if intact is not None:
                changed += [i for i, ok in enumerate(intact) if not ok and i not in spec.inplace_inputs
                            and i not in changed]
            if changed:
                metrics.passed = False
                note = f"the device modified input(s) {', '.join(f'src{i}' for i in sorted(changed))} " \
                       "(or the padding around them), which this op must not write"
                metrics.detail = f"{note}; {metrics.detail}" if metrics.detail else note
        return metrics

    def _save_artefact(self, case: OpCase, inputs: list[np.ndarray], golden: np.ndarray, attempt: Attempt) -> str:
        os.makedirs(os.path.join(self.out_dir, "artefacts"), exist_ok=True)
        self._artefacts += 1
        tag = self.base_record.get("worker", "main")
        name = f"{case.op.lower()}-{tag}-{os.getpid()}-{self._artefacts:05d}.npz"
        arrays: dict[str, np.ndarray] = {f"input_{i}": np.asarray(x) for i, x in enumerate(inputs)}
        arrays["golden"] = np.asarray(golden)
        if attempt.result is not None:
            arrays["device"] = np.asarray(attempt.result.output)
        arrays["case_id"] = np.array(case.case_id)
        np.savez_compressed(os.path.join(self.out_dir, "artefacts", name), **arrays)
        return os.path.join("artefacts", name)

    # ---- set/get round trips through the backend -------------------------------------------------
    def check_transfer(
        self, spec: TensorSpec, raw: np.ndarray, writes: list[tuple[int, int]], reads: list[tuple[int, int]],
        data_seed: int = 0,
    ) -> dict[str, Any]:
        """Upload ``raw`` in ``writes`` chunks, read it back whole and in ``reads`` chunks: every byte must
        come back. On CANN the quantized layout transform sits on this path (real bugs: chunked uploads
        B18, offset reads L1), and the allocation must be the seed's padded size."""
        __tracebackhide__ = True
        from golden import quant

        raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
        case_id = (f"SET_GET(type={spec.dtype},ne=[{','.join(map(str, spec.ne))}],"
                   f"writes={[list(w) for w in writes]},reads={[list(r) for r in reads]},data=bytes:{data_seed})"
                   ).replace(" ", "")
        attempt = self.runner.call("transfer", (spec, raw, writes, reads), self.timeout)
        record: dict[str, Any] = {
            "type": "case", **self.base_record, "test_id": self.current_test_id, "case_id": case_id,
            "device": self.device_spec, "op": "SET_GET", "dtypes": {"src0": spec.dtype, "dst": spec.dtype},
            "shapes": {"src0": list(spec.ne)}, "layout": {"src0": "contiguous"},
            "params": {"writes": [list(w) for w in writes], "reads": [list(r) for r in reads]},
            "distribution": "bytes", "data_seed": data_seed, "supported": attempt.supported,
            "duration_s": round(attempt.duration_s, 6), "artefact": None, "message": attempt.message,
            "repro": f"pytest conformance/test_transfer.py --device {shlex.quote(self.device_spec)} "
                     f"-k {spec.dtype}  # case {case_id}",
            "tolerance": {"reason": "byte-exact: set_tensor then get_tensor must return every byte"},
        }
        if attempt.status != "ok":
            record["outcome"] = attempt.status
            if attempt.crash:
                record["crash"] = attempt.crash
        else:
            got = attempt.result
            problems = []
            if not np.array_equal(got["whole"], raw):
                bad = np.flatnonzero(got["whole"] != raw)
                problems.append(f"whole read differs in {bad.size} bytes, first at {int(bad[0])}")
            for (offset, size), piece in zip(reads, got["pieces"], strict=True):
                if not np.array_equal(piece, raw[offset : offset + size]):
                    problems.append(f"read of {size} bytes at offset {offset} differs")
            if self.device_spec.upper().startswith("GGML:CANN") and dtypes.is_quantized(spec.dtype):
                expected = quant.cann_alloc_size(spec.dtype, spec.ne)
                if got["alloc_size"] != expected:
                    problems.append(f"alloc size {got['alloc_size']} != seed's get_alloc_size {expected}")
            record["metrics"] = {"n": int(raw.size), "n_bad": len(problems), "error_ratio": float(bool(problems)),
                                 "alloc_size": int(got["alloc_size"]), "nbytes": int(got["nbytes"])}
            record["outcome"] = "fail" if problems else "pass"
            if problems:
                record["message"] = "; ".join(problems[:5])
        self._record(record)
        if record["outcome"] in FAILING:
            raise CaseFailed(f"{record['outcome'].upper()} {case_id} on {self.device_spec}: {record['message']}")
        return record

    def check(self, case: OpCase) -> dict[str, Any]:
        __tracebackhide__ = True
        record = self.evaluate(case)
        if record["outcome"] in FAILING and "expected" not in record:
            raise CaseFailed(
                f"{record['outcome'].upper()} {case.case_id} on {self.device_spec}: {record['message']}\n"
                f"  reproduce: {record['repro']}"
            )
        return record


__all__ = ["Harness", "CaseFailed", "DeviceError", "open_runner"]

"""pytest plugin (entry point ``pytest11``): device selection, results file, hypothesis profiles.

Options:
  --device SPEC         device under test (repeatable; default ggml:CPU). Under pytest-xdist each
                        worker is pinned to one device (worker N takes device N mod count);
                        without xdist every test runs on every device.
  --ggml-lib DIR        ggml build directory (default: $GGML_LIB_DIR, else the libggml-python wheel)
  --results PATH        JSON Lines results, one record per case, appended and flushed as measured
  --case-timeout S      seconds before a hung device call becomes a TIMEOUT record (default 120)
  --threads N           CPU backend threads (default 1)
  --op OP               only the tests of these ops, exactly (MUL, not MUL_MAT; repeatable, or MUL,ADD)
  --conform-profile P   hypothesis profile: dev (fast), ci, nightly (same as --hypothesis-profile)
  --hypothesis-db DIR   where hypothesis keeps failing examples, replayed first next run
  --shard K/N           only shard K of N of the selection (conformance/shard.py); the results header
                        records it, and a shard that holds no test of the selection ends as passed

The results footer of each process carries pytest's own failure counts (a failed test may leave no
failing record), the circuit breakers that tripped (see conformance.harness.Breaker) and each
device's memory growth. An interrupted session writes no footer (its file reads as partial); its
JUnit XML holds one more test case, ``conform.interrupted``, counted as an error (CI dashboards count
it), and the property ``conform_partial``. The JUnit file is renamed into place whole, or not at all.
"""

from __future__ import annotations

import os
import shlex
import sys
import uuid
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from conformance.options import COMMAND_ENV
from device.interrupt import stop_on_signals
from device.spec import DeviceSpec
from results.record import FooterRecord, HeaderRecord, SkipRecord

if TYPE_CHECKING:
    from conformance.harness import Harness
    from results.schema import ResultsWriter

_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
             HealthCheck.function_scoped_fixture]
# Hypothesis' explain phase (after shrinking, it replays the failure with each part varied, to say which
# parts do not matter) cost 9x the shrink itself on a 4-step state-machine failure (1,092 replays against
# 352: tests/test_stateful_faulty.py): the dev and ci profiles leave it to the nightly one
SHRINK_NO_EXPLAIN = [phase for phase in Phase if phase is not Phase.explain]
settings.register_profile("dev", max_examples=12, deadline=None, suppress_health_check=_SUPPRESS, print_blob=True,
                          phases=SHRINK_NO_EXPLAIN)
settings.register_profile(
    "ci", max_examples=30, deadline=None, derandomize=True, suppress_health_check=_SUPPRESS, print_blob=True,
    database=None, phases=SHRINK_NO_EXPLAIN,
)
# the ci profile's size with the randomness left on: --hypothesis-seed picks the draw (stability checks)
settings.register_profile("ci-seeded", settings.get_profile("ci"), derandomize=False)
# the ci profile's draws, in the same order, but a failure is reported as found, not shrunk: whether a planted
# fault is caught is settled by the first failing draw (tests/test_planted_faults.py), and shrinking a
# failure took most of such a check's time (benchmarks/bench_ci.py)
_NO_SHRINK = [phase for phase in Phase if phase not in (Phase.shrink, Phase.explain)]
settings.register_profile("ci-detect", settings.get_profile("ci"), phases=_NO_SHRINK)
settings.register_profile("dev-detect", settings.get_profile("dev"), phases=_NO_SHRINK)
settings.register_profile(
    "nightly", max_examples=400, deadline=None, suppress_health_check=_SUPPRESS, print_blob=True,
    phases=list(Phase),
)
if os.environ.get("HYPOTHESIS_PROFILE") in ("dev", "ci", "nightly"):
    settings.load_profile(os.environ["HYPOTHESIS_PROFILE"])
else:
    settings.load_profile("dev")

HARNESS_VERSION = "0.1.0"


def pytest_addoption(parser: pytest.Parser) -> None:
    from conformance.options import RUN_OPTIONS

    group = parser.getgroup("conform", "ggml/CANN conformance")
    for option in RUN_OPTIONS:
        group.addoption(option.pytest_flag, **option.declaration(plugin=True))
    group.addoption("--results", default=None, metavar="PATH",
                    help="JSON Lines results file, one record per case, appended and flushed as measured")


class ConformSession:
    """Per-process state: the devices opened so far and the results writer."""

    def __init__(self, config: pytest.Config) -> None:
        from device.registry import expand_specs

        self.config = config
        # absolute, so a worker restarted after a crash finds the build whatever its working folder
        lib = config.getoption("ggml_lib")
        self.options = {"ggml_lib": os.path.abspath(os.path.expanduser(lib)) if lib else None,
                        "threads": config.getoption("threads")}
        self.timeout = config.getoption("case_timeout")
        self.known_bug_timeout = config.getoption("known_bug_timeout")
        self.stage_memory = config.getoption("stage_memory")
        self.expectations = _expectation_paths(config)
        # an xdist worker takes the device list and run id from the controller (pytest_configure_node):
        # globs are expanded once, and every worker's records carry the same run id. xdist hands on
        # plain values only, so the specs travel as their canonical text.
        workerinput = getattr(config, "workerinput", {})
        raw = config.getoption("device") or [os.environ.get("CONFORM_DEVICE", "ggml:CPU")]
        self.devices: list[DeviceSpec]
        if workerinput.get("conform_devices"):
            self.devices = [DeviceSpec.parse(text) for text in workerinput["conform_devices"]]
        else:
            self.devices = expand_specs(raw, self.options)
        # xdist names its workers in workerinput; PYTEST_XDIST_WORKER is inherited by any pytest a test
        # starts in a subprocess, which would then pin itself to one device as if it were that worker
        self.worker = str(workerinput.get("workerid", "main"))
        self.run_id = workerinput.get("conform_run_id") or os.environ.get("CONFORM_RUN_ID") or uuid.uuid4().hex[:12]
        self.results_path = config.getoption("results")
        self.writer: ResultsWriter | None = None
        self.harnesses: dict[DeviceSpec, Harness] = {}
        # pytest's own verdicts in this process: a test can fail without a failing case record
        self.pytest_failed = 0
        self.pytest_errors = 0
        self.failed_tests: list[dict[str, str]] = []
        # skips seen before this process opened its results file (a skip mark runs before any fixture)
        self.pending_skips: list[SkipRecord] = []
        # xdist's controller sees its workers' reports, and the workers write their own skips
        self.records_skips = hasattr(config, "workerinput") or _xdist_workers(config) == 0

    def pinned_devices(self) -> list[DeviceSpec]:
        """The devices this process serves: under xdist, worker gwN serves device N mod count."""
        if self.worker.startswith("gw") and len(self.devices) > 1:
            index = int(self.worker[2:])
            return [self.devices[index % len(self.devices)]]
        return self.devices

    def check(self) -> None:
        """Raise pytest.UsageError for device specs that cannot work, or too few xdist workers.

        No device library is loaded in the pytest process: each device is opened once in a worker and
        closed again. A device that fails later ends the session through the ``conform`` fixture.
        """
        from device.base import DeviceError
        from device.registry import check_spec
        from device.worker import open_each

        try:
            for spec in self.devices:
                check_spec(spec, self.options, load_libraries=False)
            open_each(self.devices, self.options, self.timeout)  # in workers: one line, not an aborted session
        except DeviceError as exc:
            raise pytest.UsageError(f"conform: {exc}") from None
        workers = _xdist_workers(self.config)
        if 0 < workers < len(self.devices):
            raise pytest.UsageError(
                f"conform: {len(self.devices)} devices need at least {len(self.devices)} xdist workers "
                f"(each worker is pinned to one device); got -n {workers}"
            )

    def harness(self, spec: DeviceSpec) -> Harness:
        from conformance.harness import Harness

        if not self.harnesses:
            # open every device this process serves, then one header describing them all
            out_dir = os.path.dirname(os.path.abspath(self.results_path)) if self.results_path else os.getcwd()
            for name in self.pinned_devices():
                self.harnesses[name] = Harness(
                    name, self.options, writer=None, out_dir=out_dir, timeout=self.timeout,
                    run_id=self.run_id, worker=self.worker, known_bug_timeout=self.known_bug_timeout,
                    expectations=self.expectations, stage_memory_gib=self.stage_memory,
                )
            self._write_header()
            self._write_pending_skips()
            for h in self.harnesses.values():
                h.writer = self.writer
        return self.harnesses[spec]

    def _write_header(self) -> None:
        if not self.results_path:
            return
        from device.inventory import acl_devices
        from results.schema import ResultsWriter

        if self.writer is None:
            self.writer = ResultsWriter(self.results_path)
        # the spec each harness opened (never info()'s own), and a plug-in's import_root: see header_inventory
        inventory = [h.inventory for h in self.harnesses.values()]
        header = HeaderRecord(
            run_id=self.run_id, worker=self.worker, harness_version=HARNESS_VERSION, profile=_profile_name(),
            hypothesis_seed=_hypothesis_seed(self.config), hypothesis_db=_database_in_use(self.config),
            devices=inventory, acl_devices=acl_devices(), argv=sys.argv,
            # what the user typed: conform's command line when conform started pytest, else pytest's
            command=os.environ.get(COMMAND_ENV) or shlex.join(["pytest", *sys.argv[1:]]),
        ).to_json()
        # entries of --expectations / $CONFORM_EXPECTATIONS: the report lists one that matched no case as stale
        header["expectations"] = next((h.loaded_expectations() for h in self.harnesses.values()), [])
        shard = self.config.stash.get(_SHARD_KEY, None)
        if shard is not None:
            header["shard"] = shard
        self.writer.write(header)

    def _write_pending_skips(self) -> None:
        if self.writer is not None:
            for record in self.pending_skips:
                self.writer.write(record.to_json())
            self.pending_skips.clear()

    def note_skip(self, report: pytest.TestReport) -> None:
        """A skip record for a skipped test (not an xfail, which pytest also reports as skipped)."""
        if not self.records_skips or not self.results_path or hasattr(report, "wasxfail"):
            return
        self.pending_skips.append(SkipRecord(run_id=self.run_id, worker=self.worker, test_id=report.nodeid,
                                             when=report.when, reason=_skip_reason(report)))
        self._write_pending_skips()

    def note_report(self, report: pytest.TestReport) -> None:
        """Count pytest's failures (call) and errors (setup, teardown) for the footer; record skips."""
        if report.skipped:
            self.note_skip(report)
        if not report.failed:
            return
        if report.when == "call":
            self.pytest_failed += 1
        else:
            self.pytest_errors += 1
        if len(self.failed_tests) < FAILED_TESTS_LISTED:
            self.failed_tests.append({"test_id": report.nodeid, "when": report.when,
                                      "message": _failure_line(report)})

    def finish(self, exitstatus: int = 0) -> None:
        """Close the devices; write the footer only when the session ended normally.

        An interrupted session (Ctrl-C, ``pytest.exit``) or an internal error gets no footer, so its
        file reads as partial, as a killed one does; failing tests and ``-x`` are a normal end.
        Nothing here may raise: a device that misbehaves at the end is a line in the footer.
        """
        counts: dict[str, int] = {}
        memory: list[dict[str, Any]] = []
        breakers: list[dict[str, Any]] = []
        repeats = 0
        for h in self.harnesses.values():
            for k, v in h.counts.items():
                counts[k] = counts.get(k, 0) + v
            breakers += h.breaker_summary()
            repeats += h.repeats_not_rerun()
            if exitstatus in _NORMAL_END:
                memory.append(_memory_at_end(h))
            try:
                h.close()
            except Exception:
                pass
        if self.writer is None and self.results_path and self.config.stash.get(_SHARD_KEY, None) is not None:
            self._write_header()  # a shard that ran no case still says which shard it was (an empty one)
        if self.writer is None and self.results_path and self.pending_skips:
            self._write_header()  # a run whose every test skipped still says which, and why
        self._write_pending_skips()
        if self.writer is not None:
            if exitstatus in _NORMAL_END:
                self.writer.write(FooterRecord(
                    run_id=self.run_id, worker=self.worker, counts=counts, exitstatus=int(exitstatus),
                    pytest_failed=self.pytest_failed, pytest_errors=self.pytest_errors,
                    pytest_failed_tests=self.failed_tests, breakers=breakers, devices_end=memory,
                    repeats_not_rerun=repeats,
                ).to_json())
            self.writer.close()


FAILED_TESTS_LISTED = 200


def _failure_line(report: pytest.TestReport) -> str:
    """The one line that says why a test failed: its exception's message, first line, shortened."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = getattr(crash, "message", None) or report.longreprtext or ""
    first = next((line.strip() for line in str(text).splitlines() if line.strip()), "")
    return first[:300]


def _skip_reason(report: pytest.TestReport) -> str:
    """pytest's reason for a skip, one line: its longrepr is (path, line, "Skipped: reason")."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr or "")
    text = str(text).removeprefix("Skipped: ")
    return " ".join(text.split())[:300]


def _memory_at_end(harness: Harness) -> dict[str, Any]:
    """The device's free memory now next to the header's figure, and the device process' RSS growth."""
    entry: dict[str, Any] = {"spec": harness.device_spec.text}
    try:
        start = harness.inventory.get("memory_free")
        now = harness.refresh_info()
        end = now.get("memory_free")
        grew = start - end if isinstance(start, int) and isinstance(end, int) else None
        entry |= {"memory_free_start": start, "memory_free_end": end, "memory_used_growth": grew,
                  "worker_rss_bytes": now.get("worker_rss_bytes")}
    except Exception as exc:  # a device that cannot answer any more: say so, keep the footer
        entry["error"] = _one_line(exc)
    try:
        entry |= harness.runner.memory.as_dict()
    except Exception as exc:
        entry.setdefault("error", _one_line(exc))
    return entry


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


_NORMAL_END = (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED)


_SESSION_KEY = pytest.StashKey[ConformSession]()
# this process' shard of the selection, as the results header records it (see _shard_items)
_SHARD_KEY = pytest.StashKey[dict[str, Any]]()


def _xdist_workers(config: pytest.Config) -> int:
    """How many xdist workers this run starts (0 without xdist); valid in the controller."""
    if (config.getoption("dist", "no") or "no") == "no":
        return 0
    return len(config.getoption("tx", None) or [])


def _profile_name() -> str:
    """The loaded hypothesis profile, without the ``+db`` suffix --hypothesis-db adds."""
    return settings.get_current_profile_name().split("+")[0]


def _hypothesis_seed(config: pytest.Config) -> int | str | None:
    seed = config.getoption("hypothesis_seed", None)
    if seed is None:
        return None
    try:
        return int(seed)
    except ValueError:
        return seed


def _database_in_use(config: pytest.Config) -> str | None:
    """Where hypothesis keeps examples in this run: a directory, or None (no database, or a forced seed)."""
    if _hypothesis_seed(config) is not None:
        return None  # hypothesis runs without its database when a seed is forced (core.py: database_key=None)
    db = settings().database  # the loaded profile's
    if db is None:
        return None
    path = getattr(db, "path", None)
    return str(path) if path is not None else repr(db)


def _expectation_paths(config: pytest.Config) -> tuple[str, ...]:
    from device.expectation_file import paths_from_env

    return tuple(config.getoption("expectations") or ()) + tuple(paths_from_env())


def _check_options(config: pytest.Config) -> None:
    """The numbers and op names ``conform run`` checks, checked the same way for plain pytest."""
    from conformance.options import check_run_options

    try:
        check_run_options(lambda option: config.getoption(option.pytest_dest))
    except ValueError as exc:
        raise pytest.UsageError(f"conform: {exc}") from None


def pytest_configure(config: pytest.Config) -> None:
    stop_on_signals()  # SIGINT/SIGTERM end the session as interrupted, even in a background job
    config.pluginmanager.register(_ReportCounter(config), "conform-report-counter")
    if not hasattr(config, "workerinput"):
        _check_options(config)
    profile = config.getoption("conform_profile", None)
    if profile:
        settings.load_profile(profile)
    db = config.getoption("hypothesis_db", None) or os.environ.get("CONFORM_HYPOTHESIS_DB")
    if db:
        current = _profile_name()
        path = os.path.abspath(os.path.expanduser(db))
        settings.register_profile(f"{current}+db", settings(settings.get_profile(current),
                                                            database=DirectoryBasedExampleDatabase(path)))
        settings.load_profile(f"{current}+db")
        if _hypothesis_seed(config) is not None and not hasattr(config, "workerinput"):
            config.issue_config_time_warning(pytest.PytestConfigWarning(
                f"--hypothesis-seed turns hypothesis' example database off: failing examples are neither "
                f"replayed from nor saved to {path}"), stacklevel=2)
    # Devices are checked once, in the process pytest started (not in each xdist worker), and only
    # when chosen explicitly: a bad --device is a usage error, not a collection error per module.
    if not hasattr(config, "workerinput") and (config.getoption("device", None) or os.environ.get("CONFORM_DEVICE")):
        _session(config).check()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist (controller): hand each worker the expanded device list and the run id."""
    session = _session(node.config)
    node.workerinput["conform_devices"] = [spec.text for spec in session.devices]
    node.workerinput["conform_run_id"] = session.run_id


def _session(config: pytest.Config) -> ConformSession:
    if _SESSION_KEY not in config.stash:
        from device.base import DeviceError

        try:
            config.stash[_SESSION_KEY] = ConformSession(config)
        except DeviceError as exc:
            raise pytest.UsageError(f"conform: {exc}") from None
    return config.stash[_SESSION_KEY]


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # last, after the tests' own parametrize marks: the device goes at the end of the id
    # (test_binary[mul-f32_f32-golden]), so -k "[mul-" selects one op with any number of devices
    if "conform" in metafunc.fixturenames:
        devices = _session(metafunc.config).pinned_devices()
        if len(devices) > 1:
            metafunc.parametrize("conform_device", devices, ids=[d.text.replace(":", "_") for d in devices],
                                 scope="session")


@pytest.fixture(scope="session")
def conform_device(request: pytest.FixtureRequest) -> DeviceSpec:
    """The device spec this test runs on (parametrised when several devices are selected)."""
    param: DeviceSpec | None = getattr(request, "param", None)
    return param or _session(request.config).pinned_devices()[0]


@pytest.fixture(scope="session")
def conform(request: pytest.FixtureRequest, conform_device: DeviceSpec) -> Harness:
    """The harness for the selected device: ``conform.check(case)`` runs and judges one case."""
    from device.base import DeviceError

    session = _session(request.config)
    try:
        return session.harness(conform_device)
    except DeviceError as exc:
        pytest.exit(f"conform: {exc}", returncode=2)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    session = item.config.stash.get(_SESSION_KEY, None)
    if session is not None:
        for h in session.harnesses.values():
            h.current_test_id = item.nodeid


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    session = item.config.stash.get(_SESSION_KEY, None)
    if session is not None:
        for h in session.harnesses.values():
            h.current_test_id = item.nodeid
    yield


class _ReportCounter:
    """pytest_runtest_logreport gets no config: this registered object holds it for the footer's counts."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        state = self.config.stash.get(_SESSION_KEY, None)
        if state is not None:
            state.note_report(report)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """--op, then --shard (last, after -k: a shard is a part of the selection)."""
    _select_ops(config, items)
    _shard_items(config, items)


def _select_ops(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--op``: keep the tests of exactly these ops (``test_binary[mul-f32]``, not ``[mul_mat-...]``);
    tests that are not about one op (stateful sequences, transfers) go too."""
    from conformance.options import parse_ops

    try:
        wanted = parse_ops(config.getoption("op", None))
    except ValueError as exc:
        raise pytest.UsageError(f"conform: {exc}") from None
    if not wanted:
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        (keep if _item_op(item) in wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _shard_items(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--shard K/N``: keep this shard's tests, and note the shard for the results header."""
    from conformance.shard import parse_shard, selection_fingerprint, shard_key

    try:
        shard = parse_shard(config.getoption("shard", None))
    except ValueError as exc:
        raise pytest.UsageError(f"conform: {exc}") from None
    if shard is None:
        return
    keys = [shard_key(item.nodeid, getattr(item, "path", None), _device_ids(item)) for item in items]
    keep = [item for item, key in zip(items, keys, strict=True) if shard.holds(key)]
    config.stash[_SHARD_KEY] = {"index": shard.index, "count": shard.count, "tests": len(keep),
                                "selected": len(items), "selection": selection_fingerprint(keys)}
    if len(keep) < len(items):
        kept = {id(item) for item in keep}
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
        items[:] = keep


def _device_ids(item: pytest.Item) -> list[str]:
    """The device parameter's id in this item's node id, where the plug-in added one."""
    spec = getattr(getattr(item, "callspec", None), "params", {}).get("conform_device")
    return [spec.text.replace(":", "_")] if isinstance(spec, DeviceSpec) else []


def _empty_shard(config: pytest.Config) -> dict[str, Any] | None:
    """This process' shard when it holds none of a selection that has tests (its pytest found none)."""
    shard = config.stash.get(_SHARD_KEY, None)
    return shard if shard is not None and shard["tests"] == 0 and shard["selected"] > 0 else None


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist (controller): the workers collected and sharded; the controller keeps their shard for its exit."""
    shard = getattr(node, "workeroutput", {}).get("conform_shard")
    if shard is not None:
        node.config.stash[_SHARD_KEY] = shard


def _item_op(item: pytest.Item) -> str | None:
    """The catalogue op a test item is about: its ``op`` parameter, or its ``case``'s op."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    op = params.get("op")
    if isinstance(op, str):
        return op.upper()
    case = params.get("case")
    return getattr(case, "op", None)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and _empty_shard(session.config) is not None:
        # more shards than the selection fills: an empty shard did its part (a CI matrix job stays green)
        exitstatus = session.exitstatus = pytest.ExitCode.OK
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None and _SHARD_KEY in session.config.stash:
        workeroutput["conform_shard"] = session.config.stash[_SHARD_KEY]
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        _mark_junit_partial(session.config)
    state = session.config.stash.get(_SESSION_KEY, None)
    if state is not None:
        state.finish(exitstatus)


def _mark_junit_partial(config: pytest.Config) -> None:
    """An interrupted session's JUnit XML says so (written after this hook, by pytest's junitxml)."""
    try:
        from _pytest.junitxml import xml_key
    except ImportError:  # a pytest without it: the report's partial banner still says so
        return
    xml = config.stash.get(xml_key, None)
    if xml is not None:
        xml.add_global_property("conform_partial", "interrupted: the results are partial")


INTERRUPTED_REASON = "the run was interrupted before every selected test ended"


@pytest.hookimpl(wrapper=True, trylast=True, specname="pytest_sessionfinish")
def pytest_sessionfinish_junit_whole(session: pytest.Session, exitstatus: int) -> Generator[None, None, None]:
    """pytest's JUnit XML is written under a temporary name and renamed when whole, so a run stopped while
    it writes (a second Ctrl-C) leaves no half file and no earlier run's file; an interrupted session's
    file counts the interruption as an error (conformance.junit). The innermost wrapper: pytest's own
    summary line, printed after, names the real file. (pytest registers only ``pytest_``-named functions;
    ``specname`` names the hook.)"""
    try:
        from _pytest.junitxml import xml_key
    except ImportError:
        return (yield)
    xml = session.config.stash.get(xml_key, None)
    if xml is None:
        return (yield)
    from conformance.junit import is_complete, mark_interrupted

    real = xml.logfile
    writing = os.path.join(os.path.dirname(real), f".{os.path.basename(real)}.writing-{os.getpid()}")
    try:
        os.unlink(real)
    except OSError:
        pass
    xml.logfile = writing
    try:
        result = yield
        if is_complete(writing):
            if exitstatus == pytest.ExitCode.INTERRUPTED:
                mark_interrupted(writing, INTERRUPTED_REASON)
            os.replace(writing, real)
        return result
    finally:
        xml.logfile = real
        try:
            os.unlink(writing)
        except OSError:
            pass


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    shard = config.stash.get(_SHARD_KEY, None)
    if shard is not None:
        terminalreporter.write_line(f"conform: shard {shard['index']}/{shard['count']} holds {shard['tests']} of "
                                    f"the {shard['selected']} selected tests (selection {shard['selection']})")
    state = config.stash.get(_SESSION_KEY, None)
    if state is None:
        return
    tripped = [b for h in state.harnesses.values() for b in h.breaker_summary()]
    if tripped:
        skipped = sum(b["skipped"] for b in tripped)
        terminalreporter.write_line(
            f"conform: circuit breaker stopped {len(tripped)} test(s) after a crash or timeout "
            f"({skipped} example(s) skipped): " + ", ".join(f"{b['test_id']} ({b['outcome']})" for b in tripped[:5])
            + (" ..." if len(tripped) > 5 else ""))

"""Bad input to ``conform`` is one clear line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from device.ggml.lib import DEFAULT_GGML_VERSION, prototypes

ROOT = Path(__file__).parent.parent
GOOD_CASE = "RELU(type=f32,ne=[4,1,1,1],dst=f32,data=uniform:1)"


def conform(*args: str, cwd: Path | None = None, path: tuple[str, ...] = ()) -> tuple[int, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *path, env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, env=env, timeout=120)
    return proc.returncode, proc.stderr


def one_line(code: int, stderr: str) -> str:
    """The error contract: non-zero exit, stderr exactly one non-empty line, no traceback."""
    assert code != 0, stderr
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].strip(), stderr
    return lines[0]


# ---- a ggml build that does not match: stub libraries compiled at test time ---------------------

def _build_stub(where: Path, version: str, symbols: list[str]) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a stub ggml library")
    where.mkdir(parents=True, exist_ok=True)
    base = [f'const char *ggml_version(void) {{ return "{version}"; }}']
    base += [f"void {name}(void) {{}}" for name in symbols if name != "ggml_version"]
    for lib, body in (("libggml-base.so", base), ("libggml.so", ["int conform_stub_registry;"])):
        src = where / (lib + ".c")
        src.write_text("\n".join(body) + "\n")
        subprocess.run([cc, "-shared", "-fPIC", "-o", str(where / lib), str(src)], check=True, capture_output=True)
    return where


@pytest.fixture(scope="module")
def old_ggml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ggml 0.0.1 with none of the symbols the harness binds beyond ggml_version."""
    return _build_stub(tmp_path_factory.mktemp("ggml-old"), "0.0.1", [])


@pytest.fixture(scope="module")
def thin_ggml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default release's version string, but none of the other bound symbols (a stripped or foreign build)."""
    return _build_stub(tmp_path_factory.mktemp("ggml-thin"), DEFAULT_GGML_VERSION, [])


# ---- the cases ----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("args", "expect"),
    [
        pytest.param(["run", "--device", "nope:x"], ["unknown device", "nope:x"], id="run-unknown-device"),
        pytest.param(["run", "--device", "ggml:NOPE"], ["unknown ggml device", "NOPE", "devices: CPU"],
                     id="run-unknown-ggml-device"),
        pytest.param(["run", "--device", "ggml:CPU7"], ["unknown ggml device", "CPU7"], id="run-index-out-of-range"),
        pytest.param(["run", "--device", "ggml:ZZ*"], ["no ggml device matches", "ZZ*"], id="run-glob-matches-none"),
        pytest.param(["run", "--profile", "bogus"], ["--profile", "bogus", "nightly"], id="run-unknown-profile"),
        pytest.param(["run", "--device", "ggml:CPU", "--device", "golden", "--workers", "1"],
                     ["2 devices need at least 2 workers"], id="run-fewer-workers-than-devices"),
        pytest.param(["run", "--case-timeout", "-1"], ["--case-timeout"], id="run-negative-timeout"),
        pytest.param(["repro", "FOO(type=f32,ne=[4,1,1,1],dst=f32,data=uniform:1)"], ["unknown op", "FOO"],
                     id="repro-unknown-op"),
        pytest.param(["repro", "RELU(type=f32"], ["malformed case id"], id="repro-unclosed"),
        pytest.param(["repro", "RELU(ne=[4,1,1,1],dst=f32)"], ["malformed case id", "type"], id="repro-no-type"),
        pytest.param(["repro", "RELU(type=f32,ne=[4,x],dst=f32)"], ["malformed case id"], id="repro-bad-shape"),
        pytest.param(["repro", "RELU(type=f99,ne=[4,1,1,1],dst=f32)"], ["malformed case id", "f99"],
                     id="repro-unknown-dtype"),
        pytest.param(["repro", "just words"], ["malformed case id"], id="repro-not-a-case-id"),
        pytest.param(["repro", GOOD_CASE, "--device", "nope:x"], ["unknown device", "nope:x"],
                     id="repro-unknown-device"),
        pytest.param(["repro", GOOD_CASE, "--device", "ggml:CPU7"], ["CPU7"], id="repro-index-out-of-range"),
        pytest.param(["frobnicate"], ["invalid choice", "frobnicate"], id="unknown-command"),
        pytest.param(["repro", "RELU(type=f32,ne=[100000000000,1,1,1],dst=f32,data=uniform:1)"],
                     ["100,000,000,000 elements", "at most"], id="repro-too-big-to-allocate"),
        pytest.param(["repro", "RELU(type=f32,ne=[4,1,1,1],dst=f32,data=dense:-1)"], ["data seed", "-1"],
                     id="repro-negative-seed"),
        pytest.param(["repro", "SCALE(type=f32,ne=[4,1,1,1],dst=f32,s=abc,bias=0.0,data=dense:1)"],
                     ["parameter s='abc' should be float"], id="repro-bad-param-value"),
        pytest.param(["repro", "RELU(type=f32,ne=[4,1,1,1],dst=f32,foo=1,data=dense:1)"],
                     ["unknown parameter(s) foo"], id="repro-unknown-param"),
        pytest.param(["repro", "SCALE(type=f32,ne=[4,1,1,1],dst=f32,data=dense:1)"], ["missing parameter(s) s"],
                     id="repro-missing-param"),
        pytest.param(["repro", "RELU(type=f32,ne=[4,1,1,1],lay=perm[0,0,1,2],dst=f32,data=dense:1)"],
                     ["not a permutation"], id="repro-bad-layout"),
        pytest.param(["repro", GOOD_CASE, "--case-timeout", "inf"], ["--case-timeout", "inf"], id="repro-inf-timeout"),
        pytest.param(["run", "--case-timeout", "inf"], ["--case-timeout", "inf"], id="run-inf-timeout"),
        pytest.param(["run", "--case-timeout", "nan"], ["--case-timeout", "nan"], id="run-nan-timeout"),
        pytest.param(["repro", GOOD_CASE, "--stage-memory", "0"], ["--stage-memory must be", "(got 0)"],
                     id="repro-zero-stage-memory"),
        pytest.param(["run", "--stage-memory", "nan"], ["--stage-memory must be", "nan"], id="run-nan-stage-memory"),
        pytest.param(["run", "--threads", "0"], ["--threads must be between 1 and"], id="run-zero-threads"),
        pytest.param(["run", "--threads", "100000"], ["--threads must be between 1 and", "100000"],
                     id="run-too-many-threads"),
        pytest.param(["run", "-k", "((("], ["-k '(((' is not a valid selection"], id="run-bad-k"),
        pytest.param(["run", "-k", "no_such_op_anywhere"], ["no test matches the selection", "no_such_op_anywhere"],
                     id="run-k-matches-nothing"),
        pytest.param(["run", "--op", "MUL,FOO"], ["unknown op(s) FOO"], id="run-unknown-op"),
    ],
)
def test_bad_input_is_one_line(tmp_path: Path, args: list[str], expect: list[str]) -> None:
    if args[0] == "run":
        args = [*args, "--out", str(tmp_path / "out")]  # the report step must not raise either
    code, stderr = conform(*args)
    assert code == 2, stderr
    line = one_line(code, stderr)
    for word in expect:
        assert word in line, line
    if args[0] == "run":
        assert not (tmp_path / "out" / "results.jsonl").exists()  # nothing ran


def test_plugin_factory_that_raises(tmp_path: Path) -> None:
    """A device that cannot be opened (here: a factory that raises) is one line before pytest starts,
    naming the device."""
    (tmp_path / "broken_plugin.py").write_text("def factory(options):\n    raise RuntimeError('no such board')\n")
    out = str(tmp_path / "o")
    code, stderr = conform("run", "--device", "broken_plugin:factory", "--no-report", "--out", out,
                           path=(str(tmp_path),))
    line = one_line(code, stderr)
    assert code == 2
    assert "'broken_plugin:factory' failed to open: RuntimeError: no such board" in line


def test_acl_device_without_a_cann_runtime(tmp_path: Path) -> None:
    from device.inventory import acl_devices

    if acl_devices():
        pytest.skip("this host has ACL devices")
    line = one_line(*conform("run", "--device", "acl:0", "--no-report", "--out", str(tmp_path / "o")))
    assert "acl" in line.lower() or "CANN" in line


@pytest.mark.parametrize("command", ["run", "devices", "repro"])
def test_library_path_without_ggml(tmp_path: Path, command: str) -> None:
    extra = {"run": ["--no-report", "--out", str(tmp_path / "out")], "devices": [], "repro": [GOOD_CASE]}[command]
    line = one_line(*conform(command, "--ggml-lib", str(tmp_path), *extra))
    assert str(tmp_path) in line and "libggml-base.so" in line


@pytest.mark.parametrize("command", ["run", "devices"])
def test_ggml_of_another_version(old_ggml: Path, tmp_path: Path, command: str) -> None:
    extra = ["--no-report", "--out", str(tmp_path / "out")] if command == "run" else []
    line = one_line(*conform(command, "--ggml-lib", str(old_ggml), *extra))
    assert "ggml 0.0.1" in line
    n = sum(p.core for p in prototypes().values()) - 1  # all core symbols but ggml_version
    assert f"lacks {n} core symbol(s)" in line


def test_ggml_missing_symbols(thin_ggml: Path) -> None:
    line = one_line(*conform("devices", "--ggml-lib", str(thin_ggml)))
    assert "lacks" in line and "symbol(s) this harness binds: ggml_commit" in line
    assert f"ggml {DEFAULT_GGML_VERSION}" in line  # the version is known; the symbols are what is wrong


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "-k", "relu",
         "--results", str(tmp_path / "r.jsonl"), *args],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
    )


@pytest.mark.parametrize(("args", "expect"), [
    (["--device", "nope:x"], "unknown device 'nope:x'"),
    (["--device", "ggml:ZZ*"], "no ggml device matches 'ZZ*'"),
    (["--case-timeout", "-1"], "--case-timeout must be a number of seconds above 0"),
    (["--case-timeout", "inf"], "--case-timeout must be a number of seconds above 0"),
    (["--threads", "0"], "--threads must be between 1 and"),
    (["--threads", "100000"], "--threads must be between 1 and"),
    (["--stage-memory", "-1"], "--stage-memory must be a number of GiB"),
    (["--op", "NOPE"], "--op: unknown op(s) NOPE"),
])
def test_pytest_itself_reports_bad_options_as_a_usage_error(tmp_path: Path, args: list[str], expect: str) -> None:
    """Through pytest directly: one ``ERROR:`` line (pytest's own usage error), not a collection error;
    the same checks as conform run."""
    proc = _pytest(tmp_path, *args)
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR
    assert "Traceback" not in proc.stdout + proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert errors == [errors[0]] and errors[0].startswith(f"ERROR: conform: {expect}")


@pytest.mark.parametrize("name", ["CPU7", "NOPE"])
def test_pytest_itself_stops_when_a_device_does_not_open(tmp_path: Path, name: str) -> None:
    """A ggml name the library lacks is found when the device is opened once before collection: pytest's
    one usage-error line on stderr, nothing on stdout (no ``! _pytest.outcomes.Exit``, no "deselected")."""
    proc = _pytest(tmp_path, "--device", f"ggml:{name}")
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR
    assert "Traceback" not in proc.stdout + proc.stderr and not proc.stdout.strip(), proc.stdout
    errors = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1 and errors[0].startswith(f"ERROR: conform: unknown ggml device '{name}'"), errors
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize(("factory", "expect"), [("info_list", "info() returned list, not a dict"),
                                                 ("info_object", "info()['handle'] holds a object")])
def test_a_device_whose_info_breaks_the_contract(tmp_path: Path, factory: str, expect: str) -> None:
    """conform run: one line naming the device, before pytest starts; pytest itself: the session ends
    with that line (no internal error)."""
    spec = f"tests.plugins.contract_breakers:{factory}"
    code, stderr = conform("run", "--device", spec, "--no-report", "--out", str(tmp_path / "o"))
    line = one_line(code, stderr)
    assert code == 2 and spec in line and expect in line
    proc = _pytest(tmp_path, "--device", spec)
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR
    assert "INTERNALERROR" not in proc.stdout + proc.stderr and "Traceback" not in proc.stdout + proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1 and spec in errors[0] and expect in errors[0], errors


# ---- conform report and repro: the user's own arguments --------------------------------------------

def _one_run(tmp_path: Path) -> Path:
    """A results file of a few golden RELU cases."""
    out = tmp_path / "run"
    code, stderr = conform("run", "--device", "golden", "--op", "RELU", "--no-report", "--out", str(out))
    assert code == 0, stderr
    return out / "results.jsonl"


def test_report_into_a_directory_names_the_users_argument(tmp_path: Path) -> None:
    results = _one_run(tmp_path)
    folder = tmp_path / "somedir"
    folder.mkdir()
    for given in (str(folder), str(folder) + "/"):
        line = one_line(*conform("report", str(results), "-o", given))
        assert f"-o {given}: is a directory" in line and ".tmp" not in line, line
    assert list(folder.iterdir()) == []


def test_report_baseline_takes_one_file_so_the_results_follow(tmp_path: Path) -> None:
    """``--baseline old.jsonl new.jsonl``: the baseline is old.jsonl, and new.jsonl is the run reported
    (it used to swallow both and ask for RESULTS)."""
    old = _one_run(tmp_path / "old")
    new = _one_run(tmp_path / "new")
    code, stderr = conform("report", "--baseline", str(old), str(new), "-o", str(tmp_path / "r.html"))
    assert code == 0, stderr
    html = (tmp_path / "r.html").read_text()
    assert "since baseline" in html.lower()


def test_repro_writes_no_artefacts_unless_asked(tmp_path: Path) -> None:
    """A failing case: nothing in the current directory by default; with --out DIR, DIR/artefacts/*.npz."""
    failing = "GELU_QUICK(type=f32,ne=[4,1,1,1],dst=f32,data=uniform:1)"
    device = "tests.plugins.faulty:erf_gelu_quick"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "conformance.cli", "repro", failing, "--device", device],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 1 and proc.stdout.startswith("FAIL"), proc.stdout + proc.stderr
    assert list(tmp_path.iterdir()) == [] and "artefact" not in proc.stdout
    code = subprocess.run([sys.executable, "-m", "conformance.cli", "repro", failing, "--device", device,
                           "--out", str(tmp_path / "kept")], capture_output=True, cwd=tmp_path, env=env,
                          timeout=120).returncode
    assert code == 1 and len(list((tmp_path / "kept" / "artefacts").glob("*.npz"))) == 1


# ---- plug-ins load as the README shows, without PYTHONPATH -------------------------------------------

def _installed_script(name: str) -> Path:
    script = Path(sys.executable).parent / name
    if not script.exists():
        pytest.skip(f"no {name} script beside {sys.executable} (the project is not installed in this environment)")
    return script


def test_plugin_from_the_checkout_root_through_the_conform_script() -> None:
    """README: ``conform run --device tests.plugins.faulty:erf_gelu_quick`` from the repository root."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([str(_installed_script("conform")), "repro", GOOD_CASE, "--device",
                           "tests.plugins.faulty:erf_gelu_quick"], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("PASS"), proc.stdout + proc.stderr


def test_plugin_from_an_installed_package(tmp_path: Path) -> None:
    """A vendor's package installed into an environment (here: copied into a fresh venv's site-packages,
    which sees this project's environment through a .pth file), used from an unrelated folder."""
    import site
    import sysconfig

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    ours = [str(ROOT), sysconfig.get_path("purelib"), *site.getsitepackages()]
    (Path(purelib) / "conform_env.pth").write_text("\n".join(dict.fromkeys(ours)) + "\n")
    package = Path(purelib) / "vendor_board"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from device.golden_device import GoldenDevice\n\n\ndef factory(options):\n    return GoldenDevice()\n")
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([str(python), "-c", "import sys; from conformance.cli import main; sys.exit(main())",
                           "repro", GOOD_CASE, "--device", "vendor_board:factory"],
                          capture_output=True, text=True, cwd=work, env=env, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("PASS"), proc.stdout + proc.stderr
    assert list(work.iterdir()) == []

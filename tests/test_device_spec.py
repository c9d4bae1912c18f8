"""DeviceSpec: the --device text parsed once, with one canonical text form across processes."""

from __future__ import annotations

import pickle

import pytest

from device.base import DeviceError
from device.registry import expand_specs, runs_in_process
from device.spec import DeviceKind, DeviceSpec


@pytest.mark.parametrize(("text", "kind", "fields"), [
    ("golden", DeviceKind.GOLDEN, {}),
    ("ggml:CPU", DeviceKind.GGML, {"ggml_name": "CPU"}),
    ("ggml:CANN*", DeviceKind.GGML, {"ggml_name": "CANN*"}),
    ("acl:3", DeviceKind.ACL, {"acl_index": 3}),
    ("tests.plugins.faulty:erf_gelu_quick", DeviceKind.PLUGIN,
     {"module": "tests.plugins.faulty", "factory": "erf_gelu_quick"}),
])
def test_parse_and_canonical_text(text: str, kind: DeviceKind, fields: dict[str, object]) -> None:
    spec = DeviceSpec.parse(text)
    assert spec.kind is kind and all(getattr(spec, k) == v for k, v in fields.items())
    assert spec.text == str(spec) == text and DeviceSpec.parse(spec.text) == spec
    assert pickle.loads(pickle.dumps(spec)) == spec and hash(DeviceSpec.parse(text)) == hash(spec)
    assert DeviceSpec.of(spec) is spec and DeviceSpec.of(text) == spec


def test_only_ggml_names_with_glob_characters_are_patterns() -> None:
    assert DeviceSpec.parse("ggml:CANN*").is_pattern and DeviceSpec.parse("ggml:CUDA[01]").is_pattern
    assert not DeviceSpec.parse("ggml:CPU").is_pattern and not DeviceSpec.parse("golden").is_pattern


@pytest.mark.parametrize(("text", "message"), [
    ("ggml:", "needs a device name"),
    ("acl:x", "needs an index"),
    ("acl:", "needs an index"),
    ("gold", "unknown device 'gold'"),
    ("some module:factory", "unknown device"),
    ("mod:fac:tory", "unknown device"),
    (":factory", "unknown device"),
])
def test_bad_forms_are_one_line(text: str, message: str) -> None:
    with pytest.raises(DeviceError, match=message) as info:
        DeviceSpec.parse(text)
    assert "\n" not in str(info.value)


def test_expand_specs_parses_expands_and_drops_duplicates() -> None:
    got = expand_specs(["ggml:C*", "golden", DeviceSpec.ggml("CPU"), "golden"])
    assert got == [DeviceSpec.ggml("CPU"), DeviceSpec.golden()]


def test_in_process_is_declared_by_the_golden_device_only() -> None:
    assert runs_in_process(DeviceSpec.golden())
    assert not runs_in_process(DeviceSpec.ggml("CPU"))
    # a plug-in that subclasses the golden device still runs in a worker: its own code may abort
    assert not runs_in_process(DeviceSpec.parse("tests.plugins.faulty:aborts_on_odd_rows"))

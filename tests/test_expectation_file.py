"""The TOML vocabulary of known-bug entries: each predicate kind, negation, any/all, release ranges, named bounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from device.expectation_file import ExpectationFileError, compile_predicate, load
from golden.case import parse_case_id

PERMUTED = parse_case_id("ADD(type0=f32,ne0=[8,3,2,1],lay0=perm[1,0,2,3],type1=f32,ne1=[8,3,2,1],dst=f32,data=dense:1)")
ROW_KEEPING = parse_case_id("ADD(type0=f32,ne0=[8,3,2,1],lay0=perm[0,2,1,3],type1=f32,ne1=[8,3,2,1],dst=f32,"
                            "data=dense:1)")
OFFSET_4 = parse_case_id("ADD(type0=f32,ne0=[8,3,1,1],lay0=offs[1],type1=f16,ne1=[8,3,1,1],dst=f32,data=wide:1)")
OFFSET_16 = parse_case_id("ADD(type0=f32,ne0=[8,3,1,1],lay0=offs[4],type1=f16,ne1=[8,3,1,1],dst=f32,data=wide:1)")
PADDED = parse_case_id("ADD(type0=f32,ne0=[8,3,1,1],lay0=pad[2,0,0,0],type1=f32,ne1=[8,3,1,1],dst=f32,data=dense:1)")
PLAIN = parse_case_id("ADD(type0=f32,ne0=[8,3,1,1],type1=f32,ne1=[8,3,1,1],dst=f32,data=dense:1)")
CONV = parse_case_id("CONV_TRANSPOSE_1D(type0=f32,ne0=[3,2,2,1],type1=f32,ne1=[5,2,1,1],dst=f32,s0=3,data=uniform:1)")


@pytest.mark.parametrize(("table", "yes", "no"), [
    ({"input": 0, "layout": "rows_strided"}, [PERMUTED], [ROW_KEEPING, PLAIN]),
    ({"input": 0, "layout": "permuted"}, [PERMUTED, ROW_KEEPING], [PLAIN, PADDED]),
    ({"input": 0, "layout": ["padded", "offset"]}, [PADDED, OFFSET_4], [PLAIN, PERMUTED]),
    ({"input": 0, "layout": "rows_gapped"}, [PADDED], [PLAIN, OFFSET_4]),
    ({"input": 0, "layout": "contiguous"}, [PLAIN, OFFSET_4], [PADDED, PERMUTED]),
    ({"input": 0, "offset_misaligned": 16}, [OFFSET_4], [OFFSET_16, PLAIN]),
    ({"input": 0, "offset_mod": 16, "remainder": 4}, [OFFSET_4], [OFFSET_16]),
    ({"input": "any", "dtype": "f16"}, [OFFSET_4], [PLAIN]),
    ({"input": 0, "dim": 2, "min": 2}, [PERMUTED], [PLAIN]),
    ({"input": 0, "dim": 0, "max": 7}, [], [PLAIN]),
    ({"param": "s0", "equals": 3}, [CONV], []),
    ({"param": "s0", "min": 4}, [], [CONV]),
    ({"param": "s0", "in": [1, 3]}, [CONV], []),
    ({"dst": ["f32"]}, [PLAIN], []),
    ({"distribution": "wide"}, [OFFSET_4], [PLAIN]),
    ({"input": 0, "layout": "view", "not": True}, [PLAIN], [PADDED]),
    ({"python": "golden.geometry:ggml_contiguous", "not": True}, [], []),
])
def test_each_predicate_kind(table: dict, yes: list, no: list) -> None:
    test = compile_predicate(table, "test")
    assert all(test(case) for case in yes)
    assert not any(test(case) for case in no)


def test_a_python_predicate_is_called_with_the_case() -> None:
    test = compile_predicate({"python": "device.ggml.known_bugs_vulkan:_window_before_the_input"}, "test")
    window = parse_case_id("POOL_2D(type=f32,ne=[1,1,1,1],dst=f32,op=0,k0=1,k1=1,s0=1,s1=1,p0=0.0,p1=2.0,data=wide:0)")
    assert test(window)


def _write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "e.toml"
    path.write_text('[[bug]]\nid = "x"\ndevices = "Vulkan*"\nop = "ADD"\nreason = "r"\n'
                    'repro = "ADD(type0=f32,ne0=[8,3,1,1],type1=f32,ne1=[8,3,1,1],dst=f32,data=dense:1)"\n' + body)
    return path


def test_match_any_and_release_range(tmp_path: Path) -> None:
    (bug,) = load([_write(tmp_path, 'match = "any"\nrelease_min = "0.20.0"\nrelease_max = "0.25.1"\n'
                                    '[[bug.when]]\ninput = 0\nlayout = "padded"\n'
                                    '[[bug.when]]\ninput = 0\noffset_misaligned = 16\n')])
    assert bug.matches(PADDED, "Vulkan0", "0.25.1") and bug.matches(OFFSET_4, "Vulkan1", "0.20.0")
    assert not bug.matches(PLAIN, "Vulkan0", "0.25.1")
    assert not bug.matches(PADDED, "Vulkan0", "0.26.0") and not bug.matches(PADDED, "Vulkan0", "0.17.0")
    assert not bug.matches(PADDED, "CPU", "0.25.1")
    assert bug.source == str(tmp_path / "e.toml")


def test_build_min_holds_from_that_build_on_and_never_for_an_unknown_build(tmp_path: Path) -> None:
    (bug,) = load([_write(tmp_path, 'build_min = "b8179"\n')])
    assert bug.matches(PLAIN, "Vulkan0", "0.9.7", "b8179") and bug.matches(PLAIN, "Vulkan0", "0.9.7", "b8390")
    assert bug.matches(PLAIN, "Vulkan0", "0.25.1", "v0.5.0")  # node-llama-cpp's vX.Y.Z tags came after bNNNN
    assert not bug.matches(PLAIN, "Vulkan0", "0.9.7", "b8121") and not bug.matches(PLAIN, "Vulkan0", "0.9.7", "b999")
    assert not bug.matches(PLAIN, "Vulkan0", "0.9.7", None) and not bug.matches(PLAIN, "Vulkan0", "0.9.7")


def test_a_build_range_and_exact_builds_and_releases_all_hold(tmp_path: Path) -> None:
    (ranged,) = load([_write(tmp_path, 'releases = ["0.9.7"]\nbuild_min = "b8121"\nbuild_max = "b8179"\n')])
    assert [ranged.matches(PLAIN, "Vulkan0", "0.9.7", b) for b in ("b8095", "b8121", "b8179", "b8390")] == [
        False, True, True, False]
    assert not ranged.matches(PLAIN, "Vulkan0", "0.25.1", "b8121")  # the release must hold too
    (upto,) = load([_write(tmp_path, 'build_max = "b10361"\n')])
    assert upto.matches(PLAIN, "Vulkan0", "0.19.0", "b10361") and not upto.matches(PLAIN, "Vulkan0", "0.23.0", "v0.4.0")
    (exact,) = load([_write(tmp_path, 'builds = ["b8121", "v0.5.0"]\n')])
    assert exact.matches(PLAIN, "Vulkan0", "0.25.1", "v0.5.0") and not exact.matches(PLAIN, "Vulkan0", "0.9.7", "b8179")
    (plain,) = load([_write(tmp_path, "")])  # no build condition: every build, known or not
    assert plain.matches(PLAIN, "Vulkan0", "0.9.7", None) and plain.matches(PLAIN, "Vulkan0", "0.9.7", "b8121")


@pytest.mark.parametrize(("body", "message"), [
    ('build_min = "8179"\n', "not a llama.cpp build tag"),
    ('builds = ["b8179", "latest"]\n', "not a llama.cpp build tag"),
    ('build_min = "b8390"\nbuild_max = "b8179"\n', "comes after build_max"),
    ('build_min = ""\n', "both empty"),
])
def test_bad_build_conditions_are_refused(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(ExpectationFileError, match=message):
        load([_write(tmp_path, body)])


def test_a_graph_entry_takes_the_build_keys(tmp_path: Path) -> None:
    from device.expectation_file import load_graph

    path = tmp_path / "g.toml"
    path.write_text('[[graph_bug]]\nid = "g"\ndevices = "Vulkan*"\nreason = "r"\nrepro = "p"\nbuild_max = "b8121"\n')
    (bug,) = load_graph([path])
    assert bug.build_range == ("", "b8121") and bug.names_builds


def test_a_deviation_carries_its_bound_by_name(tmp_path: Path) -> None:
    from device.ggml.known_bugs_vulkan import NAMED_BOUNDS

    (bug,) = load([_write(tmp_path, 'deviation = "vulkan_softplus_f32"\n')])
    assert bug.tolerance is NAMED_BOUNDS["vulkan_softplus_f32"]
    with pytest.raises(ExpectationFileError, match="no documented bound named"):
        load([_write(tmp_path, 'deviation = "vulkan_nonesuch"\n')])


@pytest.mark.parametrize(("body", "says"), [
    ('[[bug.when]]\ninput = 0\n', "needs layout"),
    ('[[bug.when]]\nparam = "s0"\n', "needs equals"),
    ('[[bug.when]]\ninput = -1\nlayout = "padded"\n', "input must be"),
    ('[[bug.when]]\npython = "nomodule:nothing"\n', "cannot import"),
    ('outcomes = ["exploded"]\n', "outcomes must be"),
    ('match = "some"\n', "match must be"),
    ('after_history = true\n', "must name crash"),
    ('after_history = "yes"\n', "after_history must be true or false"),
])
def test_entries_outside_the_vocabulary_are_refused_with_where(tmp_path: Path, body: str, says: str) -> None:
    with pytest.raises(ExpectationFileError, match=says) as caught:
        load([_write(tmp_path, body)])
    assert "entry 'x'" in str(caught.value)


def test_every_op_is_for_after_history_entries_only(tmp_path: Path) -> None:
    """op = "*" would cover every case of the device; only a crash left by earlier cases is that broad,
    and such an entry matches no case by itself (only a crash the case alone does not give)."""
    path = _write(tmp_path, 'outcomes = ["crash"]\n')
    path.write_text(path.read_text().replace('op = "ADD"', 'op = "*"'))
    with pytest.raises(ExpectationFileError, match="after_history entries only"):
        load([path])
    path.write_text(path.read_text() + "after_history = true\n")
    (bug,) = load([path])
    case = parse_case_id("MUL(type0=f32,ne0=[8,3,1,1],type1=f32,ne1=[8,3,1,1],dst=f32,data=dense:1)")
    assert not bug.matches(case, "Vulkan0", "0.25.1") and bug.matches_after_history(case, "Vulkan0", "0.25.1")


def test_one_entry_names_several_ops_each_with_its_own_repro(tmp_path: Path) -> None:
    path = tmp_path / "multi.toml"
    path.write_text('[[bug]]\nid = "npu-unary-row-stride"\ndevices = "NPU*"\nops = ["SQRT", "LOG"]\n'
                    'outcomes = ["crash"]\nreason = "rows read as packed"\n'
                    'repro = ["LOG(type=f32,ne=[4,3,2,1],lay=perm[1,0,2,3],dst=f32,data=uniform:1)",'
                    ' "SQRT(type=f32,ne=[4,3,2,1],lay=perm[1,0,2,3],dst=f32,data=uniform:1)"]\n'
                    '[[bug.when]]\ninput = 0\nlayout = "rows_strided"\n')
    bugs = load([path])
    assert [(b.id, b.op) for b in bugs] == [("npu-unary-row-stride", "SQRT"), ("npu-unary-row-stride", "LOG")]
    for bug in bugs:
        repro = parse_case_id(bug.repro)
        assert repro.op == bug.op and bug.matches(repro, "NPU0", "1.0")
    path.write_text(path.read_text().replace('"SQRT", "LOG"', '"SQRT", "LOG", "SIN"'))
    with pytest.raises(ExpectationFileError, match="no repro of SIN"):
        load([path])


def test_an_entry_takes_an_earlier_entrys_reason(tmp_path: Path) -> None:
    first = _write(tmp_path, "").read_text()
    second = first.replace('id = "x"', 'id = "y"').replace('reason = "r"', 'same_reason_as = "x"')
    path = tmp_path / "e.toml"
    path.write_text(first + second)
    assert [(b.id, b.reason) for b in load([path])] == [("x", "r"), ("y", "r")]
    path.write_text(second + first)  # only an earlier entry's
    with pytest.raises(ExpectationFileError, match="names no earlier entry"):
        load([path])
    path.write_text(first + second.replace("same_reason_as", 'reason = "s"\nsame_reason_as'))
    with pytest.raises(ExpectationFileError, match="not both"):
        load([path])


def test_graph_entries_say_pattern_node_op_and_feeds(tmp_path: Path) -> None:
    from device.expectation_file import load_graph
    from tests.graph_examples import example

    (tmp_path / "g.toml").write_text(
        '[[graph_bug]]\nid = "g-feeds"\ndevices = "X*"\nreleases = ["1.0"]\nreason = "r"\nrepro = "c.c"\n'
        'corrupts_process = true\n[[graph_bug.when]]\nfeeds = ["RMS_NORM", "MUL"]\n'
        '[[graph_bug]]\nid = "g-not-rms"\ndevices = "X*"\nreason = "r"\nrepro = "c.c"\nisolated = true\n'
        'outcomes = []\n[[graph_bug.when]]\npattern = "rms_norm_mul_add"\nnot = true\n'
        '[[graph_bug]]\nid = "g-argsort"\ndevices = "X*"\nreason = "r"\nrepro = "c.c"\n'
        '[[graph_bug.when]]\nnode_op = ["ARGSORT"]\n')
    feeds, not_rms, argsort = load_graph([tmp_path])
    rms, moe = example("rms_norm_mul_add/full_wx_decode"), example("topk_moe/sigmoid_bias_decode")
    assert feeds.matches(rms, "X0", "1.0") and not feeds.matches(rms, "X0", "2.0")
    assert not feeds.matches(moe, "X0", "1.0")
    assert feeds.corrupts_process and not_rms.isolated and not_rms.outcomes == ()
    assert not not_rms.matches(rms, "X0", "9") and not_rms.matches(moe, "X0", "9")
    assert argsort.matches(moe, "X0", "9") and not argsort.matches(rms, "X0", "9")
    assert load(["/dev/null"]) == [] and load([tmp_path]) == []  # [[bug]] readers leave graph entries alone


@pytest.mark.parametrize(("body", "says"), [
    ('[[graph_bug]]\nid = "g"\ndevices = "X"\nreason = "r"\nrepro = "c"\n[[graph_bug.when]]\nnode = "ADD"\n',
     "unknown key(s) ['node']"),
    ('[[graph_bug]]\nid = "g"\ndevices = "X"\nreason = "r"\nrepro = "c"\n[[graph_bug.when]]\nfeeds = ["ADD"]\n',
     "feeds must be [producer op, consumer op]"),
    ('[[graph_bug]]\nid = "g"\ndevices = "X"\nreason = "r"\nrepro = "c"\nop = "ADD"\n', "unknown key(s) ['op']"),
])
def test_graph_entries_outside_the_vocabulary_are_refused(tmp_path: Path, body: str, says: str) -> None:
    from device.expectation_file import load_graph

    (tmp_path / "g.toml").write_text(body)
    with pytest.raises(ExpectationFileError, match=r"g\.toml: graph entry 'g'") as caught:
        load_graph([tmp_path])
    assert says in str(caught.value)


def test_a_backend_file_says_the_devices_once(tmp_path: Path) -> None:
    entry = f'[[bug]]\nid = "x"\nop = "ADD"\nreason = "r"\nrepro = "{PLAIN.case_id}"\n'
    path = tmp_path / "known_bugs_npu.toml"
    path.write_text('[backend]\nname = "npu"\ndevices = ["NPU*"]\n' + entry)
    (bug,) = load([path])
    assert bug.devices == "NPU*" and bug.matches(PLAIN, "NPU1", "1.0") and not bug.matches(PLAIN, "CPU", "1.0")
    path.write_text('[backend]\nname = "npu"\ndevices = ["NPU*"]\n' + entry + 'devices = "Vulkan*"\n')
    with pytest.raises(ExpectationFileError, match="not a device of backend 'npu'"):
        load([path])
    path.write_text('[backend]\nname = "npu"\ndevices = ["NPU*", "XPU*"]\n' + entry)
    with pytest.raises(ExpectationFileError, match="devices is required"):
        load([path])

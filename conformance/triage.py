"""``conform triage``: characterise each unexpected failure cluster of a run automatically.

For each cluster (device × op × outcome × dtype signature) of the results' unexpected failures, start
from its smallest case and:

1. replay it in a fresh device process, twice (reproducible, or history-dependent / flaky);
2. run it on ``ggml:CPU`` of the same library folder and on the golden model;
3. for a wrong result within a small factor of its bound, try the backend's documented deviations
   (``NAMED_BOUNDS``): a bound that covers it is proposed instead of a defect;
4. otherwise vary one feature at a time, keeping the rest, and find each boundary: each input's
   layout (contiguous, no permutation, no padding, no offset, dim 0 permuted away, offsets of
   4/8/16/32/64/128/256 bytes), each param over the values the suite draws, the data distribution,
   the dtype signature, and last (the costliest variants) each dim's size around 1, 32, 512 and 1024
   (inputs that share the size change together).

Per cluster it writes the deciding features, a proposed TOML entry (``device/expectation_file.py``),
a paragraph for an upstream issue, a standalone C program against ggml's public API with its build
line, and the test-backend-ops line where that tool can express the case. The run is bounded by
``--budget`` seconds; what it could not decide is said. Listed defects are not applied while triaging;
the device's documented deviations are (a variant within its own documented bound is not a failure, as in
the suite); every other variant is judged by the catalogue's rows.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import functools
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from device.build_tag import is_build_tag
from golden import catalogue, dtypes
from golden.case import Layout, OpCase, TensorSpec, parse_case_id
from golden.geometry import pack, rows_unit_stride, storage_of

FAILING = ("fail", "crash", "timeout", "error")
DISTRIBUTIONS = ("uniform", "dense", "wide", "special")
OFFSET_BYTES = (4, 8, 16, 32, 64, 128, 256)
OFFSET_MODULI = (256, 64, 16, 4)  # the strongest claim first
DIM_SIZES = (1, 2, 31, 32, 33, 511, 512, 513, 1023, 1024, 1025, 2048)
MAX_VARIANT_ELEMENTS = 1 << 22  # a dim variant bigger than this is not tried (lavapipe: minutes a case)
DEVIATION_RATIO = 100.0  # a wrong result within this factor of its bound may be a documented deviation
PARAM_DRAWS = 150  # cases drawn per signature to learn the values a param takes
# a size changes the values drawn from a fixed data seed: a size boundary is kept only where it holds for
# this many fresh seeds on each side (a value-dependent fault once read as "src0 ne[2] >= 3 and ne[3] >= 3")
REDRAW_SEEDS = 3


@dataclass(frozen=True)
class Trial:
    feature: str  # "src0 layout", "src0 dim 0", "param s0", "dtype", "distribution"
    value: str  # what it was set to
    case_id: str
    outcome: str
    keeps_failure: bool  # the same outcome as the cluster's
    detail: str = ""
    passed: bool = False  # a pass (another failure, unsupported or an error tells nothing: ignored)
    explained: bool = False  # a pass only because an already decided predicate no longer holds


@dataclass
class Decision:
    feature: str
    predicate: dict[str, Any] | None  # a [[bug.when]] table; None: the feature matters but the vocabulary
    summary: str  # cannot say how (the summary does)


@dataclass
class Cluster:
    device: str
    op: str
    outcome: str
    signature: str
    case_ids: list[str]  # distinct cases
    worst_ratio: float | None = None
    records: int = 0  # the failing records behind them (a case replayed or drawn twice counts each time)

    def counted(self) -> str:
        """What the cluster counts: distinct cases, and the records the report counts."""
        cases = f"{len(self.case_ids)} distinct case{'' if len(self.case_ids) == 1 else 's'}"
        return f"{cases} ({self.records} record{'' if self.records == 1 else 's'})"


@dataclass
class Finding:
    cluster: Cluster
    smallest: str
    replay: dict[str, str] = field(default_factory=dict)
    trials: list[Trial] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    undecided: list[str] = field(default_factory=list)
    deviation: str | None = None
    entry: dict[str, Any] = field(default_factory=dict)
    when: list[dict[str, Any]] = field(default_factory=list)
    paragraph: str = ""
    c_program: str | None = None
    build_line: str | None = None
    test_backend_ops: str | None = None
    message: str = ""

    @property
    def accepted(self) -> bool:
        """A proposal a person may take as it stands: some feature decided it, or a documented bound covers it."""
        return self.deviation is not None or any(d.predicate is not None for d in self.decisions)

    def entry_toml(self) -> str:
        from device.expectation_file import to_toml

        return to_toml(self.entry, self.when)


# ---- clusters ----------------------------------------------------------------------------------------
def clusters_of(records: Iterable[dict[str, Any]]) -> list[Cluster]:
    """Unexpected failures (no known bug attached), one cluster per device × op × outcome × dtypes."""
    found: dict[tuple[str, str, str, str], Cluster] = {}
    for record in records:
        if record.get("outcome") not in FAILING or record.get("expected"):
            continue
        signature = ",".join(f"{k}={v}" for k, v in sorted((record.get("dtypes") or {}).items()))
        key = (record["device"], record["op"], record["outcome"], signature)
        cluster = found.setdefault(key, Cluster(*key, case_ids=[]))
        cluster.records += 1
        if record["case_id"] not in cluster.case_ids:
            cluster.case_ids.append(record["case_id"])
        ratio = (record.get("metrics") or {}).get("error_ratio")
        if isinstance(ratio, (int, float)) and math.isfinite(ratio):
            cluster.worst_ratio = max(cluster.worst_ratio or 0.0, float(ratio))
    return list(found.values())


def size_of(case_id: str) -> int:
    try:
        return sum(t.nelements for t in parse_case_id(case_id).inputs)
    except Exception:
        return 1 << 62


# ---- running variants ----------------------------------------------------------------------------------
class Bench:
    """A device to run cases on, without its listed defects: every case is judged by the catalogue's rows,
    or by a documented deviation of the device that covers it (the suite judges it so too: a variant within
    the device's own documented bound is not a failure; seen on Vulkan's FA sink rows, whose uniform-data
    variants fail the f32 row but lie within the F16-intermediates deviation)."""

    def __init__(self, spec: str, options: dict[str, Any], timeout: float) -> None:
        from conformance.harness import Harness
        from device import known_bugs

        self.harness = Harness(spec, options, timeout=timeout, keep_artefacts=False)
        self.harness.use_known_bugs([b for b in known_bugs.all_known_bugs() if b.tolerance is not None])
        self.runs = 0

    def run(self, case: OpCase) -> Any:
        self.runs += 1
        return self.harness.evaluate(case)

    def close(self) -> None:
        self.harness.close()


def _replace_input(case: OpCase, index: int, spec: TensorSpec) -> OpCase:
    inputs = list(case.inputs)
    inputs[index] = spec
    return dataclasses.replace(case, inputs=tuple(inputs))


def _with_layout(case: OpCase, index: int, layout: Layout) -> OpCase:
    return _replace_input(case, index, dataclasses.replace(case.inputs[index], layout=layout))


def layout_variants(case: OpCase, index: int) -> list[tuple[str, OpCase]]:
    spec = case.inputs[index]
    lay = spec.layout
    out: list[tuple[str, OpCase]] = []
    if not lay.is_contiguous:
        out.append(("contiguous", _with_layout(case, index, Layout())))
    if lay.offset:
        out.append(("no offset", _with_layout(case, index, dataclasses.replace(lay, offset=0))))
    if lay.pad != (0, 0, 0, 0):
        out.append(("no padding", _with_layout(case, index, dataclasses.replace(lay, pad=(0, 0, 0, 0)))))
    if lay.perm != (0, 1, 2, 3):
        out.append(("no permutation", _with_layout(case, index, dataclasses.replace(lay, perm=(0, 1, 2, 3)))))
        if not rows_unit_stride(spec):
            out.append(("row-keeping permutation",
                        _with_layout(case, index, dataclasses.replace(lay, perm=(0, 2, 1, 3)))))
    if not dtypes.is_quantized(spec.dtype):
        size = dtypes.type_size(spec.dtype)
        for nbytes in OFFSET_BYTES:
            if nbytes % size == 0 and nbytes // size != lay.offset:
                out.append((f"offset {nbytes} bytes",
                            _with_layout(case, index, dataclasses.replace(lay, offset=nbytes // size))))
    return out


def with_dim(case: OpCase, index: int, dim: int, value: int) -> OpCase:
    """ne[dim] of input ``index`` set to ``value``, and of every input that had the same size there; the
    inputs a param implies (a mask, sinks) follow the sizes they are made from."""
    size = case.inputs[index].ne[dim]
    inputs = tuple(
        dataclasses.replace(t, ne=tuple(value if d == dim else n for d, n in enumerate(t.ne)))  # type: ignore[arg-type]
        if t.ne[dim] == size else t for t in case.inputs)
    return refit_implied_inputs(dataclasses.replace(case, inputs=inputs))


def dim_variants(case: OpCase, index: int, dim: int) -> list[tuple[int, OpCase]]:
    """ne[dim] of input ``index`` set to each of DIM_SIZES, and of every input that had the same size there."""
    size = case.inputs[index].ne[dim]
    out = []
    for value in DIM_SIZES:
        if value == size:
            continue
        variant = with_dim(case, index, dim, value)
        if sum(math.prod(t.ne) for t in variant.inputs) > MAX_VARIANT_ELEMENTS:
            continue
        out.append((value, variant))
    return out


def fresh_seeds(case: OpCase, count: int = REDRAW_SEEDS) -> list[int]:
    """Data seeds other than the case's, for re-drawing its values (a fixed stride: reruns draw the same)."""
    return [(case.data_seed + 7919 * (k + 1)) % (1 << 31) for k in range(count)]


def param_domain(case: OpCase, draws: int = PARAM_DRAWS) -> dict[str, list[Any]]:
    """The values the suite's strategy draws for each of the case's params (same op and dtypes)."""
    from hypothesis import HealthCheck, Phase, given, settings

    from conformance import cases

    srcs = tuple(t.dtype for t in case.inputs)
    # the exact signature, else the longest whose sources begin the case's: an optional input that a param
    # adds (FLASH_ATTN_EXT's sinks, SOFT_MAX's) is not part of the catalogue's signatures
    candidates = [s for s in catalogue.get(case.op).all_signatures
                  if s.dst == case.dst and tuple(s.srcs) == srcs[:len(s.srcs)]]
    if not candidates:
        return {}
    signature = max(candidates, key=lambda s: len(s.srcs))
    seen: dict[str, list[Any]] = {name: [] for name, _ in case.params}

    @settings(max_examples=draws, derandomize=True, phases=[Phase.generate], database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(cases.strategy_for(case.op, signature))
    def collect(drawn: OpCase) -> None:
        for name, value in drawn.params:
            if name in seen and value not in seen[name] and len(seen[name]) < 64:
                seen[name].append(value)

    collect()
    return seen


def signature_variants(case: OpCase) -> list[tuple[str, OpCase]]:
    out = []
    for signature in catalogue.get(case.op).all_signatures:
        if len(signature.srcs) != len(case.inputs):
            continue
        if tuple(signature.srcs) == tuple(t.dtype for t in case.inputs) and signature.dst == case.dst:
            continue
        quantized = any(dtypes.is_quantized(t.dtype) for t in case.inputs)
        if any(dtypes.is_quantized(d) for d in signature.srcs) != quantized:
            continue  # quantized layouts keep whole blocks: not the same shapes
        inputs = tuple(dataclasses.replace(t, dtype=d) for t, d in zip(case.inputs, signature.srcs, strict=True))
        out.append((signature.label(), dataclasses.replace(case, inputs=inputs, dst=signature.dst)))
    return out


# ---- deciding ----------------------------------------------------------------------------------------
def offset_modulus(failing: list[int], passing: list[int]) -> int | None:
    """The largest N of 256/64/16/4 such that every failing byte offset is not a multiple of N and every
    passing one is."""
    for n in OFFSET_MODULI:
        if all(b % n for b in failing) and all(b % n == 0 for b in passing):
            return n
    return None


def decide_range(failing: list[float], passing: list[float]) -> dict[str, float] | None:
    if not passing:
        return None
    if max(passing) < min(failing):
        return {"min": max(passing) + 1 if all(float(v).is_integer() for v in failing + passing) else min(failing)}
    if min(passing) > max(failing):
        return {"max": min(passing) - 1 if all(float(v).is_integer() for v in failing + passing) else max(failing)}
    return None


def _num(value: Any) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


class Triage:
    def __init__(self, bench: Bench, outcome: str, budget_s: float) -> None:
        self.bench = bench
        self.outcome = outcome
        self.deadline = time.monotonic() + budget_s

    @property
    def out_of_time(self) -> bool:
        return time.monotonic() > self.deadline

    def trial(self, feature: str, value: str, case: OpCase) -> Trial | None:
        """Run one variant; None when it is not a valid case (the golden or the input maker refused it)."""
        try:
            catalogue.get(case.op).check_params(case)
            case = parse_case_id(case.case_id)
        except Exception:
            return None
        record = self.bench.run(case)
        outcome = record.outcome.value
        if outcome == "error" and "harness error" in record.message:
            return None
        detail = record.message[:200]
        if outcome == "fail" and record.expected is not None:  # within the device's documented deviation
            outcome, detail = "pass", f"within the documented deviation {record.expected.id}"
        return Trial(feature, value, case.case_id, outcome, outcome == self.outcome, detail,
                     passed=outcome == "pass")


def characterise(case: OpCase, triage: Triage, finding: Finding) -> None:
    """Vary one feature at a time and decide each feature's boundary (appends to ``finding``)."""
    # the few-variant features first, sizes last: a size variant can cost minutes on a slow backend, and
    # a budget spent on sizes never reached the param and the data that decided Vulkan's FA sink rows
    steps: list[tuple[str, Callable[[], None]]] = []
    for index in range(len(case.inputs)):
        steps.append((f"src{index} layout", functools.partial(_layout_step, case, index, triage, finding)))
    steps.append(("params", functools.partial(_param_step, case, triage, finding)))
    steps.append(("distribution", functools.partial(_distribution_step, case, triage, finding)))
    steps.append(("dtype", functools.partial(_dtype_step, case, triage, finding)))
    for index in range(len(case.inputs)):
        for dim in range(4):
            steps.append((f"src{index} dim {dim}", functools.partial(_dim_step, case, index, dim, triage, finding)))
    for name, step in steps:
        if triage.out_of_time:
            finding.undecided.append(f"{name}: not tried (time budget spent)")
            continue
        step()
    _weigh_distribution(finding)


def _run_all(triage: Triage, feature: str, variants: Iterable[tuple[Any, OpCase]],
             finding: Finding) -> list[Trial] | None:
    """The variants' trials; None when the budget ran out before all ran (nothing is decided from part)."""
    done: list[Trial] = []
    for value, variant in variants:
        if triage.out_of_time:
            finding.undecided.append(f"{feature}: stopped at the time budget after {len(done)} variant(s); "
                                     "not decided")
            return None
        trial = triage.trial(feature, str(value), variant)
        if trial is not None and trial.passed and _explained(finding, parse_case_id(trial.case_id)):
            trial = dataclasses.replace(trial, passed=False, explained=True)
        if trial is not None:
            done.append(trial)
            finding.trials.append(trial)
    return done


def _explained(finding: Finding, case: OpCase) -> bool:
    """Whether a decided predicate no longer holds for ``case`` (a dim of 1 can undo a permutation)."""
    from device.expectation_file import compile_predicate

    return any(d.predicate is not None and not compile_predicate(d.predicate, d.feature)(case)
               for d in finding.decisions)


def _layout_step(case: OpCase, index: int, triage: Triage, finding: Finding) -> None:
    spec = case.inputs[index]
    feature = f"src{index} layout"
    ran = _run_all(triage, feature, layout_variants(case, index), finding)
    if ran is None:
        return
    trials = {t.value: t for t in ran}
    passed = {v for v, t in trials.items() if t.passed}
    if not passed:
        return
    storage = storage_of(spec)
    offsets = {int(v.split()[1]): t.keeps_failure for v, t in trials.items()
               if v.startswith("offset ") and (t.passed or t.keeps_failure)}
    offsets[storage.offset_bytes] = True
    no_offset = trials.get("no offset")
    if no_offset is not None and (no_offset.passed or no_offset.keeps_failure):
        offsets[0] = no_offset.keeps_failure
    if not all(offsets.values()):  # some offset passes: the offset decides
        failing = [b for b, keeps in offsets.items() if keeps]
        passing = [b for b, keeps in offsets.items() if not keeps]
        modulus = offset_modulus(failing, passing)
        if modulus is not None:
            finding.decisions.append(Decision(feature, {"input": index, "offset_misaligned": modulus},
                                              f"src{index} at a byte offset not a multiple of {modulus} "
                                              f"(failing offsets {sorted(failing)}, passing {sorted(passing)})"))
        else:
            finding.decisions.append(Decision(feature, {"input": index, "layout": "offset"},
                                              f"src{index} as a view at an offset (byte offsets failing "
                                              f"{sorted(failing)}, passing {sorted(passing)}: no modulus decides)"))
    if "no permutation" in passed:
        row_keeping = trials.get("row-keeping permutation")
        if not rows_unit_stride(spec) and row_keeping is not None and row_keeping.passed:
            finding.decisions.append(Decision(feature, {"input": index, "layout": "rows_strided"},
                                              f"src{index} with dim 0 permuted away (a row-keeping permutation "
                                              "and no permutation pass)"))
        else:
            finding.decisions.append(Decision(feature, {"input": index, "layout": "permuted"},
                                              f"src{index} permuted (no permutation passes)"))
    if "no padding" in passed:
        gapped = spec.ne[1] > 1 and spec.layout.pad[0] > 0
        kind = "rows_gapped" if gapped else "padded"
        finding.decisions.append(Decision(feature, {"input": index, "layout": kind},
                                          f"src{index} with padded strides ({kind}; no padding passes)"))
    if passed == {"contiguous"}:
        finding.decisions.append(Decision(feature, {"input": index, "layout": "view"},
                                          f"src{index} not a plain tensor (only the contiguous layout passes; no "
                                          "single part of the layout decides)"))


def _dim_step(case: OpCase, index: int, dim: int, triage: Triage, finding: Finding) -> None:
    if any(case.inputs[j].ne[dim] == case.inputs[index].ne[dim] for j in range(index)):
        return  # already varied with an earlier input of the same size
    feature = f"src{index} dim {dim}"
    trials = _run_all(triage, feature, dim_variants(case, index, dim), finding)
    if not trials:  # none valid, or cut by the budget
        return
    failing = [case.inputs[index].ne[dim]] + [int(t.value) for t in trials if t.keeps_failure]
    passing = [int(t.value) for t in trials if t.passed]
    if not passing:
        return
    bounds = decide_range([float(v) for v in failing], [float(v) for v in passing])
    if bounds is None:
        finding.undecided.append(f"{feature}: no single boundary (failing at {sorted(failing)}, passing at "
                                 f"{sorted(passing)})")
        return
    limits = {k: int(v) for k, v in bounds.items()}
    text = " and ".join(f"{'≥' if k == 'min' else '≤'} {v}" for k, v in limits.items())
    seen = f"src{index} ne[{dim}] {text} (failing at {sorted(failing)}, passing at {sorted(passing)})"
    # the nearest sizes on each side of the boundary, and the case's own, each with fresh data
    near_failing, near_passing = (min(failing), max(passing)) if "min" in limits else (max(failing), min(passing))
    sides = [(size, True) for size in dict.fromkeys((case.inputs[index].ne[dim], near_failing))]
    sides.append((near_passing, False))
    variants = [((size, seed, fails), dataclasses.replace(with_dim(case, index, dim, size), data_seed=seed))
                for size, fails in sides for seed in fresh_seeds(case)]
    redrawn = _run_all(triage, f"{feature} re-drawn", [(f"ne[{dim}]={v[0]}, data seed {v[1]}", c)
                                                       for v, c in variants], finding)
    if redrawn is None:  # the budget ran out: a boundary not re-drawn is not kept
        finding.undecided.append(f"{feature}: {seen} was not re-drawn with fresh data (time budget spent); "
                                 "no size boundary proposed")
        return
    by_value = {t.value: t for t in redrawn}
    broken = []
    for (size, seed, fails), _ in variants:
        trial = by_value.get(f"ne[{dim}]={size}, data seed {seed}")
        held = trial is not None and (trial.keeps_failure if fails else trial.passed)
        if not held:
            got = "no valid case" if trial is None else trial.outcome
            broken.append(f"ne[{dim}]={size} {'should fail' if fails else 'should pass'}, gave {got} "
                          f"with data seed {seed}")
    if broken:
        finding.undecided.append(
            f"{feature}: {seen} with data seed {case.data_seed}, but it did not hold when the data was re-drawn "
            f"({'; '.join(broken)}): the values drawn, not the size, decide it; no size boundary proposed")
        return
    finding.decisions.append(Decision(feature, {"input": index, "dim": dim, **limits},
                                      f"{seen}; it held with {REDRAW_SEEDS} fresh data seeds on each side "
                                      f"(ne[{dim}] = {', '.join(str(v) for v, _ in sides)})"))


# params that say whether an optional input is there (golden/attention.py, golden/softmax.py): turning one on
# or off adds or drops that input, else the variant is no valid case (or, for SOFT_MAX, a mask read as sinks)
def _fa_mask(case: OpCase) -> TensorSpec:
    q, k = case.inputs[0], case.inputs[1]
    return TensorSpec("f16", (k.ne[1], q.ne[1], 1, 1))  # [n_kv, n_q]: ggml_flash_attn_ext's smallest mask


def _fa_sinks(case: OpCase) -> TensorSpec:
    return TensorSpec("f32", (case.inputs[0].ne[2], 1, 1, 1))  # one logit per head


def _soft_max_mask(case: OpCase) -> TensorSpec:
    a = case.inputs[0]
    return TensorSpec("f32", (a.ne[0], a.ne[1], 1, 1))


def _soft_max_sinks(case: OpCase) -> TensorSpec:
    return TensorSpec("f32", (case.inputs[0].ne[2], 1, 1, 1))


# (op, param): the input's index (-1: last) and its spec when the param turns it on
IMPLIED_INPUTS: dict[tuple[str, str], tuple[int, Callable[[OpCase], TensorSpec]]] = {
    ("FLASH_ATTN_EXT", "mask"): (3, _fa_mask), ("FLASH_ATTN_EXT", "sinks"): (-1, _fa_sinks),
    ("SOFT_MAX", "mask"): (1, _soft_max_mask), ("SOFT_MAX", "sinks"): (-1, _soft_max_sinks),
}


def refit_implied_inputs(case: OpCase) -> OpCase:
    """The implied inputs resized to what they are made from (sinks: one per head; a mask: n_kv or the row
    length by at least the rows), keeping their dtype and layout; other inputs as they are."""
    inputs = list(case.inputs)
    for (op, name), (index, make) in IMPLIED_INPUTS.items():
        if op != case.op or not case.param(name, False):
            continue
        at = len(inputs) - 1 if index < 0 else index
        wanted: tuple[int, ...] = make(case).ne
        old = inputs[at].ne
        if name == "mask":  # a taller mask and broadcast planes stay where they still divide
            q = case.inputs[0]
            planes = tuple(m if n % m == 0 else 1 for m, n in zip(old[2:], q.ne[2:], strict=True))
            wanted = (wanted[0], max(wanted[1], old[1]), *planes)
        inputs[at] = dataclasses.replace(inputs[at], ne=wanted)  # type: ignore[arg-type]
    return dataclasses.replace(case, inputs=tuple(inputs))


def param_variant(case: OpCase, name: str, value: Any) -> OpCase:
    """``case`` with param ``name`` set to ``value``, adding or dropping the input the param implies (a mask
    dropped takes ALiBi's max_bias to 0, which needs one)."""
    params = tuple((k, value if k == name else w) for k, w in case.params)
    variant = dataclasses.replace(case, params=params)
    implied = IMPLIED_INPUTS.get((case.op, name))
    if implied is None or bool(value) == bool(case.param(name)):
        return variant
    index, make = implied
    inputs = list(case.inputs)
    if value:
        inputs.insert(len(inputs) if index < 0 else index, make(case))
    else:
        inputs.pop(index)
        if name == "mask":
            params = tuple((k, 0.0 if k == "max_bias" else w) for k, w in params)
    return dataclasses.replace(variant, inputs=tuple(inputs), params=params)


def _param_step(case: OpCase, triage: Triage, finding: Finding) -> None:
    if not case.params:
        return
    domain = param_domain(case)
    for name, value in case.params:
        others = [v for v in domain.get(name, []) if v != value]
        if not others:
            continue
        others = _spread(others, 8)
        variants = [(v, param_variant(case, name, v)) for v in others]
        feature = f"param {name}"
        trials = _run_all(triage, feature, variants, finding)
        if trials is None:
            return
        values = {str(v): v for v in others}
        failing = [value] + [values[t.value] for t in trials if t.keeps_failure]
        passing = [values[t.value] for t in trials if t.passed]
        if not passing:
            continue
        predicate: dict[str, Any]
        if len(failing) == 1:
            predicate = {"param": name, "equals": _plain(value)}
            text = f"{name} = {value!r} only (passing at {_sorted(passing)})"
        else:
            numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in failing + passing)
            bounds = decide_range([float(v) for v in failing], [float(v) for v in passing]) if numeric else None
            if bounds is not None:
                predicate = {"param": name, **{k: _num(v) for k, v in bounds.items()}}
                text = f"{name} {bounds} (failing at {failing}, passing at {passing})"
            else:
                predicate = {"param": name, "in": [_plain(v) for v in failing]}
                text = f"{name} in {failing} (passing at {passing})"
        finding.decisions.append(Decision(feature, predicate, text))


def _sorted(values: list[Any]) -> list[Any]:
    try:
        return sorted(values)
    except TypeError:
        return values


def _spread(values: list[Any], most: int) -> list[Any]:
    if len(values) <= most:
        return values
    try:
        ordered = sorted(values)
    except TypeError:
        ordered = values
    step = (len(ordered) - 1) / (most - 1)
    return [ordered[round(i * step)] for i in range(most)]


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _dtype_step(case: OpCase, triage: Triage, finding: Finding) -> None:
    trials = _run_all(triage, "dtype", signature_variants(case), finding)
    if trials is None:
        return
    passing = [t for t in trials if t.passed]
    if not passing:
        return
    failing_cases = [case] + [parse_case_id(t.case_id) for t in trials if t.keeps_failure]
    passing_cases = [parse_case_id(t.case_id) for t in passing]
    slots: list[tuple[str, Callable[[OpCase], str], Callable[[list[str]], dict[str, Any]]]] = [
        ("dst", lambda c: c.dst, lambda names: {"dst": names})]
    for i in range(len(case.inputs)):
        slots.append((f"src{i}", functools.partial(_input_dtype, i), functools.partial(_dtype_table, i)))
    for slot, read, table in slots:
        bad = sorted({read(c) for c in failing_cases})
        good = {read(c) for c in passing_cases}
        if not good & set(bad):
            finding.decisions.append(Decision("dtype", table(bad), f"{slot} dtype in {bad} (passing: {sorted(good)})"))
            return
    finding.undecided.append("dtype: the passing signatures differ from the failing ones in no single slot")


def _input_dtype(index: int, case: OpCase) -> str:
    return case.inputs[index].dtype


def _dtype_table(index: int, names: list[str]) -> dict[str, Any]:
    return {"input": index, "dtype": names}


def _distribution_step(case: OpCase, triage: Triage, finding: Finding) -> None:
    variants = [(d, dataclasses.replace(case, distribution=d)) for d in DISTRIBUTIONS if d != case.distribution]
    trials = _run_all(triage, "distribution", variants, finding)
    if trials is None:
        return
    passing = [t.value for t in trials if t.passed]
    if passing:
        failing = [case.distribution] + [t.value for t in trials if t.keeps_failure]
        text = f"data {failing} (passing: {passing})"
        finding.decisions.append(Decision("distribution", {"distribution": failing}, text))


def _weigh_distribution(finding: Finding) -> None:
    """Special data (NaN, inf) can hide a wrong kernel: where only special data passes, beside another decided
    feature, the distribution is a weak one, left out of the entry (it is varied early, being cheap, and
    weighed once all are in)."""
    data = [d for d in finding.decisions if d.feature == "distribution"]
    passing = {t.value for t in finding.trials if t.feature == "distribution" and t.passed}
    only_special_passes = passing == {"special"}
    if only_special_passes and any(d.predicate is not None for d in finding.decisions if d.feature != "distribution"):
        finding.decisions.remove(data[0])
        finding.undecided.append(f"distribution: {data[0].summary}; left out of the entry, as other features "
                                 "decide it")


# ---- documented deviations ----------------------------------------------------------------------------------
def deviation_bounds(device_name: str, op: str) -> list[tuple[str, Any]]:
    """The named bounds of the device's backend that belong to ``op`` (``vulkan_softplus_f32`` for SOFTPLUS)."""
    from device.expectation_file import backends

    found = next((b for b in backends() if b.covers(device_name)), None)
    if found is None:
        return []
    named = found.named_bounds()
    backend = found.name
    stem = f"{backend}_{op.lower()}"
    return [(name, bound) for name, bound in named.items() if name == stem or name.startswith(stem + "_")]


def within_deviation(bench: Bench, case: OpCase, name: str, bound: Any) -> bool:
    """Whether the device's answer to ``case`` is within the documented bound (a probe known bug carries it)."""
    from device.known_bug import KnownBug

    probe = KnownBug(id=f"triage-{name}", devices="*", op=case.op, applies=lambda c: True, reason="triage probe",
                     repro=case.case_id, tolerance=bound)
    bench.harness.use_known_bugs([probe])
    try:
        record = bench.run(case)
    finally:
        bench.harness.use_known_bugs([])
    return record.expected is not None and record.outcome.value == "fail"


# ---- upstream material ------------------------------------------------------------------------------------
GGML_TYPE = {"f32": "GGML_TYPE_F32", "f16": "GGML_TYPE_F16", "bf16": "GGML_TYPE_BF16", "i32": "GGML_TYPE_I32",
             "q4_0": "GGML_TYPE_Q4_0", "q8_0": "GGML_TYPE_Q8_0"}


def c_constructor(case: OpCase) -> str | None:
    """The ggml call that builds the op from tensors s0, s1, ...; None where no template exists."""
    from device.ggml.ops_elementwise import UNARY_OPS

    if case.form:
        return None
    p = case.params_dict
    if case.op in UNARY_OPS:
        return f"ggml_unary(ctx, s0, (enum ggml_unary_op) {UNARY_OPS[case.op]})"
    simple = {"ADD": "ggml_add(ctx, s0, s1)", "SUB": "ggml_sub(ctx, s0, s1)", "MUL": "ggml_mul(ctx, s0, s1)",
              "DIV": "ggml_div(ctx, s0, s1)", "SQR": "ggml_sqr(ctx, s0)", "SQRT": "ggml_sqrt(ctx, s0)",
              "LOG": "ggml_log(ctx, s0)", "SIN": "ggml_sin(ctx, s0)", "COS": "ggml_cos(ctx, s0)",
              "SUM_ROWS": "ggml_sum_rows(ctx, s0)", "SSM_CONV": "ggml_ssm_conv(ctx, s0, s1)",
              "MUL_MAT": "ggml_mul_mat(ctx, s0, s1)"}
    if case.op in simple:
        return simple[case.op]
    if case.op == "CONV_TRANSPOSE_1D":
        return f"ggml_conv_transpose_1d(ctx, s0, s1, {int(p['s0'])}, 0, 1)"
    if case.op == "SCALE" and float(p.get("bias", 0.0)) == 0.0:
        return f"ggml_scale(ctx, s0, {float(p['s'])!r}f)"
    return None


def c_program(case: OpCase, device_name: str, inputs: list[np.ndarray], golden: np.ndarray,
              allowed: np.ndarray) -> str | None:
    """A standalone C program that builds the case on ``device_name`` and prints wrong values next to right ones."""
    build = c_constructor(case)
    if build is None or case.dst not in ("f32", "f16") or any(t.dtype not in GGML_TYPE for t in case.inputs):
        return None
    lines = ["// " + case.case_id, "// generated by conform triage: builds the case on one ggml device and prints",
             "// each element whose error exceeds the allowance, the device's value next to the exact one.",
             "#include <math.h>", "#include <stdio.h>", "#include <stdlib.h>", "#include <string.h>",
             '#include "ggml.h"', '#include "ggml-alloc.h"', '#include "ggml-backend.h"', ""]
    for i, (spec, values) in enumerate(zip(case.inputs, inputs, strict=True)):
        raw = pack(values, spec)
        lines.append(f"static const unsigned char base{i}[{raw.size}] = {{" + ",".join(map(str, raw.tolist())) + "};")
    exact = np.asarray(golden, np.float64).ravel()
    bound = np.broadcast_to(np.asarray(allowed, np.float64), np.shape(golden)).ravel()
    lines.append(f"static const double expected[{exact.size}] = {{" + ",".join(_c_double(v) for v in exact) + "};")
    lines.append(f"static const double allowed[{bound.size}] = {{" + ",".join(_c_double(v) for v in bound) + "};")
    lines += ["", "int main(int argc, char ** argv) {",
              '    const char * lib = argc > 1 ? argv[1] : ".";',
              '    setenv("GGML_VK_VISIBLE_DEVICES", "0", 0);  // lavapipe is listed only when named',
              "    ggml_backend_load_all_from_path(lib);",
              f'    ggml_backend_dev_t dev = ggml_backend_dev_by_name("{device_name}");',
              f'    if (!dev) {{ fprintf(stderr, "no device {device_name}\\n"); return 2; }}',
              "    ggml_backend_t backend = ggml_backend_dev_init(dev, NULL);",
              "    struct ggml_init_params ip = { 64 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true };",
              "    struct ggml_context * ctx = ggml_init(ip);"]
    for i, spec in enumerate(case.inputs):
        st = storage_of(spec)
        n_elems = st.base_nbytes // dtypes.type_size(spec.dtype) * dtypes.block_size(spec.dtype)
        lines.append(f"    struct ggml_tensor * b{i} = ggml_new_tensor_1d(ctx, {GGML_TYPE[spec.dtype]}, {n_elems});")
        view = (f"ggml_view_4d(ctx, b{i}, {', '.join(map(str, st.view_ne))}, "
                f"{', '.join(map(str, st.view_nb[1:]))}, {st.offset_bytes})")
        if st.perm != (0, 1, 2, 3):
            view = f"ggml_permute(ctx, {view}, {', '.join(map(str, st.perm))})"
        lines.append(f"    struct ggml_tensor * s{i} = {view};")
    lines += [f"    struct ggml_tensor * out = {build};",
              "    struct ggml_cgraph * gf = ggml_new_graph(ctx);",
              "    ggml_build_forward_expand(gf, out);",
              "    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, backend);",
              "    if (!buf) { fprintf(stderr, \"allocation failed\\n\"); return 2; }"]
    lines += [f"    ggml_backend_tensor_set(b{i}, base{i}, 0, sizeof(base{i}));" for i in range(len(case.inputs))]
    lines += ["    if (ggml_backend_graph_compute(backend, gf) != GGML_STATUS_SUCCESS) { fprintf(stderr, \"compute "
              "failed\\n\"); return 2; }",
              "    const int64_t n = ggml_nelements(out);",
              "    float * got = malloc(n * sizeof(float));",
              "    if (out->type == GGML_TYPE_F16) {",
              "        ggml_fp16_t * h = malloc(n * sizeof(ggml_fp16_t));",
              "        ggml_backend_tensor_get(out, h, 0, n * sizeof(ggml_fp16_t));",
              "        for (int64_t i = 0; i < n; i++) got[i] = ggml_fp16_to_fp32(h[i]);",
              "        free(h);",
              "    } else {",
              "        ggml_backend_tensor_get(out, got, 0, n * sizeof(float));",
              "    }",
              "    int64_t bad = 0;",
              "    for (int64_t i = 0; i < n; i++) {",
              "        double err = fabs((double) got[i] - expected[i]);",
              "        int same_nan = isnan(got[i]) && isnan(expected[i]);",
              "        int same_inf = isinf(got[i]) && got[i] == expected[i];",
              "        if (!same_nan && !same_inf && !(err <= allowed[i])) {",
              "            if (bad < 10)",
              "                printf(\"out[%lld] = %.9g, but should be %.9g (|diff| %.3g, allowed %.3g)\\n\",",
              "                       (long long) i, got[i], expected[i], err, allowed[i]);",
              "            bad++;",
              "        }",
              "    }",
              f'    printf("%lld of %lld elements wrong on {device_name}\\n", (long long) bad, (long long) n);',
              "    free(got); ggml_backend_buffer_free(buf); ggml_free(ctx); ggml_backend_free(backend);",
              "    return bad ? 1 : 0;", "}", ""]
    return "\n".join(lines)


def _c_double(value: float) -> str:
    if math.isnan(value):
        return "NAN"
    if math.isinf(value):
        return "INFINITY" if value > 0 else "-INFINITY"
    return float(value).hex()


def build_line(lib_dir: str, include_dir: str, source: str) -> str:
    libs = sorted(Path(lib_dir).glob("libggml.*so")) + sorted(Path(lib_dir).glob("libggml.so"))
    libggml = str(libs[0]) if libs else f"{lib_dir}/libggml.so"
    return (f"cc -O1 -o {Path(source).with_suffix('')} {source} -I{include_dir} {libggml} {lib_dir}/libggml-base.so "
            f"-Wl,-rpath,{lib_dir} -lm")


def test_backend_ops_line(case: OpCase) -> str | None:
    """The line that adds the case to test-backend-ops, where that tool can express it (plain layouts)."""
    from device.ggml.ops_elementwise import UNARY_OPS

    if any(not t.layout.is_contiguous for t in case.inputs) or case.form:
        # test-backend-ops permutes or views inputs only in a few tests, not at these strides/offsets
        return None
    t0 = case.inputs[0]
    ne = "{" + ", ".join(map(str, t0.ne)) + "}"
    if case.op in UNARY_OPS:
        return f"test_cases.emplace_back(new test_unary(GGML_UNARY_OP_{case.op}, {GGML_TYPE[t0.dtype]}, {ne}, 0));"
    if case.op == "SSM_CONV":
        ne1 = "{" + ", ".join(map(str, case.inputs[1].ne)) + "}"
        return f"test_cases.emplace_back(new test_ssm_conv(GGML_TYPE_F32, {ne}, {ne1}));"
    if case.op == "CONV_TRANSPOSE_1D":
        ne1 = "{" + ", ".join(map(str, case.inputs[1].ne)) + "}"
        return f"test_cases.emplace_back(new test_conv_transpose_1d({ne1}, {ne}, {int(case.param('s0'))}, 0, 1));"
    return None


# ---- one cluster -----------------------------------------------------------------------------------------
def triage_cluster(cluster: Cluster, options: dict[str, Any], timeout: float, budget_s: float,
                   out_dir: Path, include_dir: str | None, index: int,
                   progress: Callable[[str], None] = lambda line: None) -> Finding:
    from device.spec import DeviceSpec

    smallest = min(cluster.case_ids, key=size_of)
    finding = Finding(cluster, smallest)
    case = parse_case_id(smallest)
    bench = Bench(cluster.device, options, timeout)
    try:
        inventory = bench.harness.inventory
        release = str(inventory.get("ggml_version") or "")
        # a plug-in is matched by its spec (conformance/harness.py), a ggml device by its name and release
        device_name = str(inventory.get("name")) if release and inventory.get("name") else cluster.device
        is_ggml = bool(release)
        where = device_words(inventory, cluster.device)
        first = bench.run(case)
        second = bench.run(case)
        finding.message = first.message
        finding.replay["alone, fresh process"] = first.outcome.value
        finding.replay["again, same process"] = second.outcome.value
        reproducible = first.outcome.value == cluster.outcome
        progress(f"  replay: {first.outcome.value} alone, {second.outcome.value} again")
        spec = DeviceSpec.of(cluster.device)
        if is_ggml and spec.text.startswith("ggml:") and device_name != "CPU":
            cpu = Bench("ggml:CPU", options, timeout)
            try:
                finding.replay["ggml:CPU, same library folder"] = cpu.run(case).outcome.value
            finally:
                cpu.close()
        gold = Bench("golden", {}, timeout)
        try:
            finding.replay["golden"] = gold.run(case).outcome.value
        finally:
            gold.close()
        if not reproducible:
            finding.undecided.append("history-dependent or flaky: the smallest case does not fail alone in a fresh "
                                     "process (replay its process' history: conform repro --history)")
        else:
            ratio = (first.metrics or {}).get("error_ratio")
            if cluster.outcome == "fail" and isinstance(ratio, (int, float)) and ratio <= DEVIATION_RATIO:
                for name, bound in deviation_bounds(device_name, case.op):
                    if case.dst in name.rsplit("_", 1)[-1] or not name.endswith(("_f32", "_f16")):
                        if within_deviation(bench, case, name, bound):
                            finding.deviation = name
                            break
            if finding.deviation is None:
                characterise(case, Triage(bench, cluster.outcome, budget_s), finding)
        build = inventory.get("llama_build")
        _propose(finding, case, device_name, release, first, where, build if isinstance(build, str) else None)
        if is_ggml:
            _upstream(finding, case, device_name, release, options, out_dir, include_dir, index)
    finally:
        bench.close()
    return finding


def _backend_of(name: str) -> tuple[str, str]:
    """The backend's name and the devices pattern an entry for device ``name`` takes: those of the backend
    whose ``[backend]`` table covers it (device.expectation_file.backends(): ``vulkan``, ``Vulkan*``); for a
    device no backend covers, its name without the number (``Acme0``: ``acme``, ``Acme*``); a plug-in's spec as
    it is (``plugin``)."""
    from device.expectation_file import backends

    if ":" in name:
        return "plugin", name
    found = next((b for b in backends() if b.covers(name)), None)
    if found is not None:
        return found.name, next(p for p in found.devices if fnmatch.fnmatchcase(name, p))
    return re.sub(r"\d+$", "", name).lower(), re.sub(r"(?<=[A-Za-z])\d+$", "*", name)


def signature_slug(case: OpCase) -> str:
    """The cluster's dtypes for an entry id: each distinct one in input order, then dst (``f16-f32``)."""
    names: list[str] = []
    for name in [t.dtype for t in case.inputs] + [case.dst]:
        if name not in names:
            names.append(name)
    return "-".join(names)


def signature_tables(case: OpCase) -> list[dict[str, Any]]:
    """``[[bug.when]]`` tables that hold for the case's dtype signature only (each input's dtype and dst):
    an entry of one cluster covers that cluster, not its neighbour of another dtype."""
    return [{"input": i, "dtype": t.dtype} for i, t in enumerate(case.inputs)] + [{"dst": case.dst}]


def device_words(inventory: dict[str, Any], spec: str) -> str:
    """Where it ran, from the device's inventory (as the results header records it): ``ggml 0.25.1 (commit
    0ad4a86) Vulkan0 (llvmpipe ...)`` for a ggml device, the spec for a plug-in; never a placeholder."""
    release, name = inventory.get("ggml_version"), inventory.get("name")
    if not (isinstance(release, str) and release and isinstance(name, str) and name):
        return f"the device {spec}"
    commit, build = inventory.get("ggml_commit"), inventory.get("llama_build")
    described = inventory.get("description")
    said = [f"commit {commit}" if isinstance(commit, str) and commit else "",
            f"llama.cpp {build}" if isinstance(build, str) and build else ""]
    return (f"ggml {release}" + (f" ({', '.join(s for s in said if s)})" if any(said) else "") + f" {name}"
            + (f" ({described})" if isinstance(described, str) and described else ""))


def _propose(finding: Finding, case: OpCase, device_name: str, release: str, record: Any,
             where: str = "", build: str | None = None) -> None:
    """The entry a person may add for the finding. Where the device's llama.cpp build is known (the inventory's
    ``llama_build``, as the results header records it: b8121), the entry is keyed on that build alone
    (``build_min`` = ``build_max``): one ggml version spans several builds (0.9.7: b8095 ... b8390), and only the
    build that ran is measured; ``conform bisect`` says how far the range may be widened."""
    cluster = finding.cluster
    where = where or f"the device {device_name}"
    features = [d for d in finding.decisions if d.predicate is not None]
    slug = "-".join(re.sub(r"[^a-z0-9]+", "-", d.feature.lower()).strip("-") for d in features[:2]) or "defect"
    backend, devices = _backend_of(device_name)
    op_slug = case.op.lower().replace("_", "-")
    dtype_slug = signature_slug(case)
    outcome_slug = "" if cluster.outcome == "fail" else f"-{cluster.outcome}"
    entry: dict[str, Any] = {"id": f"{backend}-{op_slug}-{dtype_slug}{outcome_slug}-{slug}" if finding.deviation is None
                             else f"{backend}-{op_slug}-{case.dst}-builtin-precision",
                             "devices": devices, "op": case.op}
    if release:
        entry["releases"] = [release]
    if build and is_build_tag(build):
        entry["build_min"] = entry["build_max"] = build
    if cluster.outcome != "fail":
        entry["outcomes"] = [cluster.outcome]
    if finding.deviation is not None:
        entry["deviation"] = finding.deviation
        finding.when = [{"dst": case.dst}]
        why = f"within the documented deviation {finding.deviation}"
    else:
        finding.when = [d.predicate for d in features if d.predicate is not None]
        if not any(d.feature == "dtype" for d in features):  # the cluster's own dtypes, as it was formed
            finding.when += signature_tables(case)
        why = "; ".join(d.summary for d in features) or (
            "no feature decided it (a plain signature entry: the cluster's dtypes only)")
    ratio = (record.metrics or {}).get("error_ratio")
    measured = f"worst ratio {ratio:.3g}× the bound" if isinstance(ratio, (int, float)) else record.outcome.value
    entry["reason"] = (f"proposed by conform triage: {case.op} {cluster.outcome} on {where} "
                       f"when {why}; {measured}; {cluster.counted()} in the cluster; replay: "
                       + ", ".join(f"{k} {v}" for k, v in finding.replay.items())
                       + (f"; measured on llama.cpp {build} only (conform bisect to widen build_min/build_max)"
                          if "build_min" in entry else ""))
    entry["repro"] = case.case_id
    finding.entry = entry
    cpu = finding.replay.get("ggml:CPU, same library folder")
    golden = finding.replay.get("golden")
    finding.paragraph = (
        f"On {where}, {case.op} ({cluster.signature}) gives a {cluster.outcome} "
        f"({finding.message.strip()[:300]}) in {cluster.counted()}. Minimal case: `{case.case_id}`. It "
        f"{'reproduces' if finding.replay.get('alone, fresh process') == cluster.outcome else 'does not reproduce'} "
        f"alone in a fresh process"
        + (f"; ggml:CPU of the same build gives {cpu}" if cpu else "")
        + (f"; the exact (float64) reference is {golden}" if golden else "") + ". "
        + (f"The result is within the backend's documented {finding.deviation} bound. " if finding.deviation else
           ("It fails exactly when " + "; ".join(d.summary for d in features) + ". " if features else
            "No single feature varied made it pass. "))
        + (f"Not decided: {'; '.join(finding.undecided)}." if finding.undecided else ""))


def _upstream(finding: Finding, case: OpCase, device_name: str, release: str, options: dict[str, Any],
              out_dir: Path, include_dir: str | None, index: int) -> None:
    from conformance.data import as_stored
    from conformance.inputs import make_inputs

    finding.test_backend_ops = test_backend_ops_line(case)
    try:
        inputs = [as_stored(x, t.dtype) for x, t in zip(make_inputs(case), case.inputs, strict=True)]
        exact = catalogue.golden_inputs(case, inputs)
        golden = catalogue.evaluate(case, exact)
        allowed = catalogue.tolerance_of(case).allowed(case, exact, golden, case.dst)
        source = c_program(case, device_name, inputs, golden, allowed)
    except Exception:
        source = None
    if source is None:
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"repro_{index}_{case.op.lower()}.c"
    path.write_text(source)
    finding.c_program = str(path)
    lib_dir = str(options.get("ggml_lib") or os.environ.get("GGML_LIB_DIR") or "<ggml build>/bin")
    finding.build_line = build_line(os.path.abspath(lib_dir), include_dir or "<ggml>/include", str(path)) + \
        f" && {path.with_suffix('')} {os.path.abspath(lib_dir)}"


# ---- the command ---------------------------------------------------------------------------------------------
def render(finding: Finding) -> str:
    c = finding.cluster
    lines = [f"## {c.op} {c.outcome} on {c.device} ({c.signature}): {c.counted()}",
             f"smallest: {finding.smallest}",
             "replay: " + ", ".join(f"{k}: {v}" for k, v in finding.replay.items())]
    if finding.deviation:
        lines.append(f"documented deviation: within {finding.deviation}")
    lines.append("deciding features:" if finding.decisions else "deciding features: none found")
    lines += [f"  - {d.summary}" for d in finding.decisions]
    if finding.undecided:
        lines.append("not decided:")
        lines += [f"  - {u}" for u in finding.undecided]
    lines.append(f"experiments: {len(finding.trials)} variants, "
                 f"{sum(t.passed for t in finding.trials)} of them passed, "
                 f"{sum(t.explained for t in finding.trials)} passed only where a decided feature no longer held, "
                 f"{sum(not t.passed and not t.keeps_failure and not t.explained for t in finding.trials)} "
                 "ended otherwise (another failure, unsupported: ignored)")
    lines += ["proposed entry:" + ("" if finding.accepted else " (not accepted: nothing decided it)"), "",
              finding.entry_toml(), "finding:", finding.paragraph, ""]
    if finding.c_program:
        lines += [f"C program: {finding.c_program}", f"build and run: {finding.build_line}"]
    else:
        lines.append("C program: no template for this op or dtype")
    lines.append(f"test-backend-ops: {finding.test_backend_ops or 'not expressible (layout or op)'}")
    return "\n".join(lines) + "\n"


def add_parser(sub: Any, formatter: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("triage", formatter_class=formatter,
                       help="characterise each unexpected failure cluster of a run: boundaries, entry, repro",
                       description="For each cluster of unexpected failures in RESULTS (or the cases given with "
                                   "--case), replay its smallest case alone, on ggml:CPU and on the golden model, "
                                   "vary one feature at a time to find each boundary, and propose an expectations "
                                   "entry (TOML), a finding paragraph, a standalone C program and the "
                                   "test-backend-ops line.")
    p.add_argument("results", nargs="*", help="results.jsonl files")
    p.add_argument("--case", action="append", default=[], metavar="ID", help="triage this case id (with --device)")
    p.add_argument("--device", default=None, metavar="SPEC", help="the device for --case (default ggml:CPU)")
    p.add_argument("--ggml-lib", default=None, metavar="DIR", help="ggml build directory")
    p.add_argument("--case-timeout", type=float, default=600.0, metavar="S", help="seconds per device call")
    p.add_argument("--budget", type=float, default=600.0, metavar="S",
                   help="seconds of experiments per cluster; what is left undecided is said")
    p.add_argument("--out", default="conform-triage", metavar="DIR", help="folder for triage.md and the C programs")
    p.add_argument("--include", default=None, metavar="DIR",
                   help="ggml's include/ for the C programs' build line (default: the libggml-python wheel's)")
    p.add_argument("--write", default=None, metavar="FILE",
                   help="append the accepted entries to this TOML file (new, or one that parses as TOML; never a "
                        "results file it reads)")
    p.add_argument("--json", action="store_true", help="also write triage.json")
    return p


def cmd_triage(args: argparse.Namespace, usage_error: type[Exception]) -> int:
    from conformance.options import check_case_timeout
    from results.load import ResultsError, load_results

    try:
        check_case_timeout(args.case_timeout)
    except ValueError as exc:
        raise usage_error(str(exc)) from None
    if not (math.isfinite(args.budget) and args.budget > 0):
        raise usage_error(f"--budget must be a number of seconds above 0 (got {args.budget:g})")
    records: list[dict[str, Any]] = []
    for path in args.results:
        try:
            records += load_results(path).cases
        except (OSError, ResultsError) as exc:
            raise usage_error(f"cannot read {path!r}: {exc}") from None
    for case_id in args.case:
        try:
            case = parse_case_id(case_id)
            catalogue.get(case.op).check_params(case)
        except Exception as exc:
            raise usage_error(f"--case {case_id!r}: {exc}") from None
        records.append({"device": args.device or "ggml:CPU", "op": case.op, "outcome": "?", "case_id": case_id,
                        "dtypes": {f"src{i}": t.dtype for i, t in enumerate(case.inputs)} | {"dst": case.dst}})
    if not records:
        raise usage_error("nothing to triage: give RESULTS files or --case ids")
    # absolute: a worker restarted later must find the folder whatever its working directory
    options = {"ggml_lib": os.path.abspath(args.ggml_lib) if args.ggml_lib else None, "threads": 1}
    out = Path(args.out)
    include = args.include or _wheel_include()
    if any(r["outcome"] == "?" for r in records):  # --case: the outcome is what the device gives now
        _classify_cases(records, options, args.case_timeout)
    clusters = clusters_of(records)
    cases, n_records = sum(len(c.case_ids) for c in clusters), sum(c.records for c in clusters)
    print(f"conform triage: {len(clusters)} cluster(s) of unexpected failures: {cases} distinct case(s) "
          f"({n_records} record{'' if n_records == 1 else 's'}; the report counts records)", flush=True)
    findings = []
    taken = _listed_ids(args.write)
    for n, cluster in enumerate(clusters, 1):
        print(f"[{n}/{len(clusters)}] {cluster.op} {cluster.outcome} on {cluster.device}", flush=True)
        finding = triage_cluster(cluster, options, args.case_timeout, args.budget, out, include, n,
                                 progress=lambda line: print(line, flush=True))
        # each cluster its own entry, under an id no other entry has (two dtypes can end in the same features)
        finding.entry["id"] = _unique_id(finding.entry["id"], taken)
        findings.append(finding)
        print(render(finding), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "triage.md").write_text("# conform triage\n\n" + "\n".join(render(f) for f in findings))
    if args.json:
        (out / "triage.json").write_text(json.dumps([_as_json(f) for f in findings], indent=1))
    if args.write:
        accepted = [f for f in findings if f.accepted]
        with open(args.write, "a", encoding="utf-8") as handle:
            for finding in accepted:
                handle.write("\n" + finding.entry_toml())
        print(f"conform triage: appended {len(accepted)} accepted entr{'y' if len(accepted) == 1 else 'ies'} "
              f"to {args.write}")
    print(f"conform triage: {out / 'triage.md'}")
    return 0


def _listed_ids(path: str | None) -> set[str]:
    """The ids already listed: the known bugs, and the entries of the file the accepted ones are appended to."""
    from device import known_bugs
    from device.expectation_file import ExpectationFileError, load

    taken = {b.id for b in known_bugs.all_known_bugs()}
    if path and os.path.exists(path):
        try:
            taken |= {b.id for b in load([path])}
        except (ExpectationFileError, OSError):
            pass  # an unreadable file: its ids cannot be known here; the loader will say so when it reads it
    return taken


def _unique_id(wanted: str, taken: set[str]) -> str:
    """``wanted``, or ``wanted-2``, ``-3``... the first no entry has yet (then taken)."""
    chosen, n = wanted, 1
    while chosen in taken:
        n += 1
        chosen = f"{wanted}-{n}"
    taken.add(chosen)
    return chosen


def _classify_cases(records: list[dict[str, Any]], options: dict[str, Any], timeout: float) -> None:
    by_device: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        if record["outcome"] == "?":
            by_device.setdefault(record["device"], []).append(record)
    for device, pending in by_device.items():
        bench = Bench(device, options, timeout)
        try:
            for record in pending:
                done = bench.run(parse_case_id(record["case_id"]))
                record["outcome"] = done.outcome.value
                record["metrics"] = done.metrics
        finally:
            bench.close()


def _wheel_include() -> str | None:
    try:
        import libggml
    except ImportError:
        return None
    path = Path(libggml.__file__).parent / "include"
    return str(path) if path.is_dir() else None


def _as_json(finding: Finding) -> dict[str, Any]:
    return {"cluster": dataclasses.asdict(finding.cluster), "smallest": finding.smallest, "replay": finding.replay,
            "deviation": finding.deviation, "decisions": [dataclasses.asdict(d) for d in finding.decisions],
            "undecided": finding.undecided, "trials": [dataclasses.asdict(t) for t in finding.trials],
            "entry": finding.entry, "when": finding.when, "accepted": finding.accepted,
            "paragraph": finding.paragraph, "c_program": finding.c_program, "build_line": finding.build_line,
            "test_backend_ops": finding.test_backend_ops}

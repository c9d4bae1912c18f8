"""A failure shrinks to the smallest case: few elements, contiguous layouts, plain data.

Hypothesis shrinks a failing example by simplifying the choices it recorded; a strategy whose
choices depend on earlier values (a branch that draws more, bounds set by an earlier size) leaves it
stuck at a big case (GELU_QUICK's erf fault used to read ``ne=[1023,3,6,1]`` in pytest's output
although ``[1,1,1,1]`` fails too). See the note in ``conformance/strategies.py``.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance import cases
from conformance.strategies import DISTRIBUTION_ORDER
from golden import catalogue
from golden.case import OpCase

ROOT = Path(__file__).resolve().parents[1]


def _elements(case: OpCase) -> int:
    return sum(math.prod(t.ne) for t in case.inputs)


def _strategies() -> list[object]:
    found = []
    for spec in catalogue.OPS.values():
        plain = [s for s in spec.all_signatures if not s.quantized][:1]
        quantized = [s for s in spec.all_signatures if s.quantized][:1]
        found += [pytest.param(spec.name, s, id=f"{spec.name.lower()}-{s.label()}") for s in plain + quantized]
    return found


def shrunk_from_a_random_case(op: str, signature: object) -> tuple[OpCase, OpCase, int]:
    """Hypothesis' simplest case of the strategy, and what a test failing on every case but that one
    shrinks to (from the random case that fails first), and the number of cases run."""
    strategy = cases.strategy_for(op, signature)  # type: ignore[arg-type]
    seen: list[OpCase] = []
    failed: list[OpCase] = []

    @settings(database=None, max_examples=30, derandomize=True, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def fails_after_the_first(data: st.DataObject) -> None:
        case = data.draw(strategy, label="case")
        seen.append(case)
        if len(seen) > 1:  # the first example Hypothesis runs is its simplest: let it pass
            failed.append(case)
            raise AssertionError(case.case_id)

    # the simplest case passed once and may fail when reached again by other choices: Hypothesis then
    # calls the test flaky (an exception group); the last failing case is still the shrunk one
    with pytest.raises(BaseException):  # noqa: B017, PT011
        fails_after_the_first()
    assert failed, "no case failed"
    return seen[0], failed[-1], len(seen)


@pytest.mark.parametrize(("op", "signature"), _strategies())
def test_every_strategy_shrinks_next_to_its_simplest_case(op: str, signature: object) -> None:
    """The shrunk case is at most one step from the simplest (the simplest itself passed): as few
    elements within a factor 2 (one dim 1 -> 2), contiguous layouts, the first or second distribution."""
    simplest, shrunk, runs = shrunk_from_a_random_case(op, signature)
    assert _elements(shrunk) <= 2 * max(1, _elements(simplest)), (simplest.case_id, shrunk.case_id, runs)
    assert all(t.layout == simplest.inputs[i].layout for i, t in enumerate(shrunk.inputs)), shrunk.case_id
    assert shrunk.distribution in DISTRIBUTION_ORDER[:2], shrunk.case_id


# faulty plug-ins whose fault shows on a one-element tensor, and the tests that catch them
MINIMAL_FAULTS = {
    "tests.plugins.faulty:erf_gelu_quick": "gelu_quick",
    "tests.plugins.faulty:aborts_on_odd_rows": "[relu-",
    "tests.plugins.faulty_unary:sub_swapped": "[sub-",
    "tests.plugins.faulty_reduction:cumsum_exclusive": "cumsum",
}
REPRO = re.compile(r"reproduce: conform repro '([^']+)' --device (\S+)")


@pytest.mark.slow
@pytest.mark.parametrize(("device", "select"), list(MINIMAL_FAULTS.items()),
                         ids=[d.rsplit(":", 1)[-1] for d in MINIMAL_FAULTS])
def test_faulty_plugins_fail_at_their_minimal_case_in_pytests_output(device: str, select: str, tmp_path: Path) -> None:
    """pytest's falsifying example (its ``reproduce:`` line) is a one-element case with contiguous
    inputs and no special form, for each plug-in, in the ci profile (each plug-in on its own tests
    only: the others' tests pass on it and decide nothing here). conformance/test_regimes.py's tests are left
    out: they shrink within their regime (past the grid limit, say), never to one element."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "--device", device,
         "-k", f"({select}) and not test_regime", "--conform-profile", "ci", "--results", str(tmp_path / "r.jsonl"),
         "-W", "ignore::DeprecationWarning"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1, proc.stdout[-3000:]
    found = [case_id for case_id, on in REPRO.findall(proc.stdout) if on == device]
    assert found, f"{device} failed no test selected by {select!r}:\n{proc.stdout[-3000:]}"
    for case_id in found:
        shapes = re.findall(r"ne\d*=\[([\d,]+)\]", case_id)
        assert shapes and all(s == "1,1,1,1" for s in shapes), case_id
        assert "lay" not in case_id and "form=" not in case_id, case_id

"""Model-shaped op cases: the distinct node signatures of a captured model run seed the op tier.

``conform run --from-model RUN`` (pytest ``--from-model RUN``) reads the node cases of a ``conform model``
run (its output folder, its ``model.json`` or its ``node-cases.txt``) and keeps one case per signature: op,
dtypes, shapes, layouts, weight names, params and destination, the data left out. Each signature becomes a
test (``test_from_model[mul_mat-3]``) that judges the signature as the model ran it first, then cases near
it: other data seeds and distributions, and neighbouring sizes (one size of the signature moved to a
neighbour wherever it occurs, so the sizes that must agree, such as a matrix product's shared dimension or
the heads a broadcast repeats, move together).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, replace
from pathlib import Path

from hypothesis import strategies as st

from conformance.data import DISTRIBUTIONS
from conformance.strategies import data_seeds, distributions
from golden.case import OpCase, TensorSpec
from golden.case_check import CaseIdError, check_case_id

NODE_CASES_FILE = "node-cases.txt"
MODEL_FILE = "model.json"
# what a size may move to: one element either way (odd sizes, off-by-one tails), one quantization block
# or warp either way (32), half and double (another model size of the same family)
NEIGHBOURS = ("-1", "+1", "-32", "+32", "/2", "*2")


@dataclass(frozen=True)
class ModelSignature:
    """One distinct node signature of a model run: the case as the model ran it (its data as captured)."""

    index: int  # order of first appearance in the run
    case: OpCase

    @property
    def test_id(self) -> str:
        return f"{self.case.op.lower()}-{self.index}"


def _case_ids_of(path: Path) -> list[str]:
    """The node case ids a run left: node-cases.txt (one per line) or model.json's per-node table."""
    if path.is_dir():
        for name in (NODE_CASES_FILE, MODEL_FILE):
            if (path / name).is_file():
                return _case_ids_of(path / name)
        raise ValueError(f"--from-model {path}: no {NODE_CASES_FILE} or {MODEL_FILE} in this folder "
                         "(give a conform model output folder)")
    if not path.is_file():
        raise ValueError(f"--from-model {path}: no such file or folder")
    text = path.read_text(errors="replace")
    if path.suffix == ".json":
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--from-model {path}: not JSON ({exc.msg} at line {exc.lineno})") from None
        nodes = record.get("nodes") if isinstance(record, dict) else None
        if not isinstance(nodes, list):
            raise ValueError(f"--from-model {path}: not a conform model result (no per-node table)")
        return [n["case_id"] for n in nodes if isinstance(n, dict) and n.get("case_id")]
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def signature_of(case: OpCase) -> OpCase:
    """The case without its data: what makes two nodes the same signature."""
    return replace(case, data_seed=0, distribution="uniform")


def load_signatures(run: str | Path) -> list[ModelSignature]:
    """The distinct signatures of a model run, in the run's order; ValueError (one line) for a path that
    holds none, or a case id the op tier cannot build."""
    path = Path(run)
    ids = _case_ids_of(path)
    seen: dict[OpCase, ModelSignature] = {}
    for case_id in ids:
        try:
            case = check_case_id(case_id, DISTRIBUTIONS)
        except CaseIdError as exc:
            raise ValueError(f"--from-model {path}: {exc}") from None
        key = signature_of(case)
        if key not in seen:
            seen[key] = ModelSignature(len(seen), case)
    if not seen:
        raise ValueError(f"--from-model {path}: the run names no judged node case")
    return list(seen.values())


def check_from_model(value: str | None) -> object:
    """The option table's check: the run must name at least one buildable case."""
    return load_signatures(value) if value else None


# ---- the cases near a signature ------------------------------------------------------------------

def _moved(size: int, how: str) -> int:
    step = {"-1": size - 1, "+1": size + 1, "-32": size - 32, "+32": size + 32, "/2": size // 2, "*2": size * 2}
    return step[how]


def sizes_of(case: OpCase) -> tuple[int, ...]:
    """The distinct sizes above 1 in the case's shapes (1 stays: it is what broadcasts)."""
    return tuple(sorted({n for t in case.inputs for n in t.ne if n > 1}))


def with_size(case: OpCase, old: int, new: int) -> OpCase | None:
    """``case`` with every dim of size ``old`` made ``new``, in its shapes and in shape-like params (CONT's and
    RESHAPE's target ``ne``); None where the op's own rules refuse it."""
    if new < 1 or new == old:
        return None

    def move(ne: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(new if n == old else n for n in ne)

    inputs = tuple(TensorSpec(t.dtype, move(t.ne), t.layout, t.name) for t in case.inputs)  # type: ignore[arg-type]
    params = tuple((k, move(v) if isinstance(v, tuple) and all(type(n) is int for n in v) else v)
                   for k, v in case.params)
    if not _keeps_broadcasts(case.inputs, inputs):
        return None
    moved = replace(case, inputs=inputs, params=params)
    try:
        return check_case_id(moved.case_id, DISTRIBUTIONS)
    except CaseIdError:
        return None


def _keeps_broadcasts(before: tuple[TensorSpec, ...], after: tuple[TensorSpec, ...]) -> bool:
    """Where one input's size in a dim divided another's (a broadcast: the heads GQA repeats, a row that tiles
    a matrix), it still does: not every op's validator checks this (MUL_MAT takes ne0[2]=3 against
    ne1[2]=4), and a case the golden cannot broadcast is the harness's error, not the device's."""
    for d in range(4):
        for a, a2 in zip(before, after, strict=True):
            for b, b2 in zip(before, after, strict=True):
                if a.ne[d] % b.ne[d] == 0 and a2.ne[d] % b2.ne[d] != 0:
                    return False
    return True


@functools.lru_cache(maxsize=4096)
def neighbours(case: OpCase) -> tuple[OpCase, ...]:
    """Every buildable case one size move away from ``case`` (its data unchanged)."""
    found: dict[OpCase, None] = {}
    for size in sizes_of(case):
        for how in NEIGHBOURS:
            moved = with_size(case, size, _moved(size, how))
            if moved is not None:
                found.setdefault(moved)
    return tuple(found)


@st.composite
def _near(draw: st.DrawFn, signature: OpCase, moves: tuple[OpCase, ...]) -> OpCase:
    # every choice is drawn whatever the earlier ones (see conformance/strategies.py on shrinking); the
    # simplest choices (0) give the signature exactly as the model ran it, data included
    shape_choice = draw(st.integers(0, len(moves)))
    new_data = draw(st.booleans())
    distribution, seed = draw(distributions), draw(data_seeds)
    case = moves[shape_choice - 1] if shape_choice else signature
    if new_data:
        case = replace(case, distribution=distribution, data_seed=seed)
    else:
        case = replace(case, distribution=signature.distribution, data_seed=signature.data_seed)
    return case


def near(signature: OpCase) -> st.SearchStrategy[OpCase]:
    """Cases around a model's signature: the signature itself (the simplest draw), then other data seeds and
    distributions, and neighbouring sizes."""
    return _near(signature, neighbours(signature))

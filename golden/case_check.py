"""Checking a case id before anything is built: next to the case format (``golden/case.py``).

:func:`check_case_id` parses an id and says, in one line, why it does not name a case the harness
can build and judge: malformed text, an op without a golden model, a signature the op does not take,
params its validator refuses, or inputs too big to allocate.
"""

from __future__ import annotations

from collections.abc import Collection

from golden import catalogue, dtypes
from golden.case import OpCase, parse_case_id
from golden.geometry import check_aliases, storage_of
from golden.spec import OpSpec

# The largest case conform repro builds: its inputs' elements, padding included. Inputs are held as
# stored, as float64 for the golden, and again in the device process, so this is a few GiB.
MAX_CASE_ELEMENTS = 2**27


class CaseIdError(ValueError):
    """A case id that names no buildable case; the message is the one line for the user."""


def check_case_id(case_id: str, distributions: Collection[str]) -> OpCase:
    """The case ``case_id`` names; :class:`CaseIdError` otherwise. ``distributions``: the data
    distributions the caller can make."""

    def bad(reason: str) -> CaseIdError:
        return CaseIdError(f"malformed case id {case_id!r}: {reason}")

    try:
        case = parse_case_id(case_id)
    except KeyError as exc:
        raise bad(f"an input lacks its {exc.args[0]} field") from None
    except (ValueError, TypeError, IndexError) as exc:
        raise bad(str(exc)) from None
    try:
        spec = catalogue.get(case.op)
    except KeyError:
        raise CaseIdError(f"unknown op {case.op!r} in case id (see conform ops)") from None
    if not spec.implemented:
        raise CaseIdError(f"op {case.op} has no golden model yet, so its cases cannot be judged (see conform ops)")
    try:
        _check_tensors(case, spec)
        _check_data(case, distributions)
        # parameters and shapes, before any device work (data-dependent checks come with the data)
        spec.check_params(case)  # unknown, missing or mistyped params
        if spec.validate is not None:
            spec.validate(case, [])
        _check_size(case)
    except (ValueError, IndexError, TypeError) as exc:  # a validator's complaint about the case, one line
        raise bad(str(exc)) from None
    return case


def _check_tensors(case: OpCase, spec: OpSpec) -> None:
    if not case.inputs and all(s.srcs for s in spec.all_signatures):  # ARANGE takes none
        raise ValueError("no input tensors (type=...,ne=[...])")
    for i, t in enumerate(case.inputs):
        if t.dtype not in dtypes.ALL_TYPES:
            raise ValueError(f"input {i} has unknown dtype {t.dtype!r} (known: {', '.join(dtypes.ALL_TYPES)})")
        if len(t.ne) != 4 or any(n < 1 for n in t.ne):
            raise ValueError(f"input {i} shape ne={list(t.ne)} is not 4 positive sizes")
    if case.dst not in dtypes.ALL_TYPES:
        raise ValueError(f"unknown destination dtype {case.dst!r}")
    check_aliases(case.inputs)
    srcs = tuple(t.dtype for t in case.inputs)
    # a signature names the leading inputs; optional ones (sinks) may follow, the validator counts them
    accepted = spec.all_signatures
    if accepted and not any(srcs[: len(s.srcs)] == s.srcs and s.dst == case.dst for s in accepted):
        raise ValueError(f"{case.op} does not take {','.join(srcs)} -> {case.dst} "
                         f"(accepted: {' '.join(s.label() for s in accepted)})")


def _check_data(case: OpCase, distributions: Collection[str]) -> None:
    if case.distribution not in distributions:
        raise ValueError(f"unknown data distribution {case.distribution!r} (known: {', '.join(distributions)})")
    if not 0 <= case.data_seed < 2**63:
        raise ValueError(f"the data seed must be an integer from 0 to 2**63-1 (got {case.data_seed})")


def _check_size(case: OpCase) -> None:
    """Refuse a case too big to build before anything is allocated (``ne=[100000000000,1,1,1]``)."""
    total = 0
    for i, t in enumerate(case.inputs):
        try:
            base = storage_of(t)
        except ValueError as exc:
            raise ValueError(f"input {i}: {exc}") from None
        elements = 1
        for n in base.base_ne:
            elements *= n
        total += elements
    if total > MAX_CASE_ELEMENTS:
        gib = total * 8 / 2**30
        raise ValueError(f"the inputs hold {total:,} elements (about {gib:,.0f} GiB as float64); conform repro "
                         f"builds cases of at most {MAX_CASE_ELEMENTS:,} elements")

"""Input makers for numerics ops whose inputs have structure: ROPE positions and freq factors,
SOFT_MAX masks (−inf blocks) and sinks, TIMESTEP_EMBEDDING timesteps.

Everything is drawn from the case's seed, and the case's distribution picks the regime, so the
case id alone reproduces the bytes. Floats come back rounded to their dtype; I32 stays int.
"""

from __future__ import annotations

import numpy as np

from conformance.data import floats, register_maker
from golden import catalogue, dtypes
from golden.case import OpCase

# ROPE positions per distribution: a prompt at a small offset, anywhere in a 4k context, anywhere
# up to 64k (long-context models), and the edges mixed in
POSITION_RANGES = {"uniform": 64, "dense": 4096, "wide": 65536, "special": 65536}


def _main_input(case: OpCase, rng: np.random.Generator) -> np.ndarray:
    spec = case.inputs[0]
    op = catalogue.get(case.op)
    return floats(rng, spec, case.distribution, op.specials, op.max_abs_input)


@register_maker("ROPE")
def rope_inputs(case: OpCase, rng: np.random.Generator) -> list[np.ndarray]:
    x = _main_input(case, rng)
    n_tokens = case.inputs[1].ne[0]
    top = POSITION_RANGES[case.distribution]
    start = int(rng.integers(0, top))
    if case.distribution == "uniform":
        pos = start + np.arange(n_tokens)  # consecutive prompt positions
    else:
        pos = rng.integers(0, top, size=n_tokens)
    if case.distribution == "special":
        edges = np.array([0, 1, 4095, 4096, 32767, 65535])
        where = rng.random(n_tokens) < 0.3
        pos = np.where(where, rng.choice(edges, size=n_tokens), pos)
    out = [x, pos.astype(np.int32).reshape(case.inputs[1].np_shape)]
    if len(case.inputs) > 2:  # freq factors: llama-3 style divisors between 1 and 8 (and some below 1)
        ff = rng.uniform(0.5, 8.0, size=case.inputs[2].np_shape)
        out.append(dtypes.round_to(ff, case.inputs[2].dtype))
    return out


def _mask(rng: np.random.Generator, np_shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Additive mask: values in [−1, 1] (test-backend-ops' range) with −inf blocks: causal with an
    offset, random columns, and now and then a fully masked row."""
    m = rng.uniform(-1.0, 1.0, size=np_shape)
    kind = rng.integers(0, 4)
    rows, cols = np_shape[-2], np_shape[-1]
    if kind == 1:  # causal: column j > row i + offset is masked
        offset = int(rng.integers(0, max(1, cols)))
        m = np.where(np.arange(cols)[None, :] > np.arange(rows)[:, None] + offset, -np.inf, m)
    elif kind == 2:  # random −inf blocks
        m = np.where(rng.random(np_shape) < 0.3, -np.inf, m)
    elif kind == 3:  # causal plus some fully masked rows
        m = np.where(np.arange(cols)[None, :] > np.arange(rows)[:, None], -np.inf, m)
        full = rng.random(np_shape[:-1]) < 0.2
        m = np.where(full[..., None], -np.inf, m)
    return dtypes.round_to(m, dtype)


@register_maker("SOFT_MAX")
def soft_max_inputs(case: OpCase, rng: np.random.Generator) -> list[np.ndarray]:
    out = [_main_input(case, rng)]
    if case.param("mask"):
        spec = case.inputs[1]
        out.append(_mask(rng, spec.np_shape, spec.dtype))
    if case.param("sinks"):
        spec = case.inputs[-1]
        out.append(dtypes.round_to(rng.uniform(-4.0, 4.0, size=spec.np_shape), spec.dtype))
    return out


TIMESTEP_RANGES = {"uniform": (0.0, 1000.0), "dense": (0.0, 1.0), "wide": (-1000.0, 1000.0), "special": (0.0, 1000.0)}


@register_maker("TIMESTEP_EMBEDDING")
def timestep_inputs(case: OpCase, rng: np.random.Generator) -> list[np.ndarray]:
    spec = case.inputs[0]
    lo, hi = TIMESTEP_RANGES[case.distribution]
    t = rng.uniform(lo, hi, size=spec.np_shape)
    if case.distribution == "uniform":
        t = np.floor(t)  # diffusion schedulers' integer steps
    if case.distribution == "special":
        where = rng.random(t.shape) < 0.2
        t = np.where(where, rng.choice(np.array([0.0, -0.0, 1.0, 999.0]), size=t.shape), t)
    return [dtypes.round_to(t, spec.dtype)]

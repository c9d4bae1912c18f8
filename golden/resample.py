"""UPSCALE, nearest neighbour (ggml_upscale with an integer factor, ggml_interpolate to any size).

ggml's CPU picks the source index in each of the four dims as ``(int64)((float)i / sf)`` with the
f32 scale ``sf = (float)ne_out / (float)ne_in``: an f32 division truncated toward zero. For integer
factors that is ``i // k``; for other ratios it can differ from ``floor(i·in/out)`` (in 14, out 16,
i 8 gives 6, not 7), so the rule is modelled in f32 exactly as written.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from golden import movement_checks as checks
from golden.case import OpCase
from golden.spec import OpList, OpSpec, P, sig
from golden.tolerance import Tolerance

SPECS = OpList()


def nearest_index(n_in: int, n_out: int) -> np.ndarray:
    """Source index of each of ``n_out`` outputs along one dim, by ggml's f32 rule."""
    sf = np.float32(n_out) / np.float32(n_in)
    return (np.arange(n_out, dtype=np.float32) / sf).astype(np.int64)


def upscale_nearest(x: np.ndarray, ne_out: Sequence[int]) -> np.ndarray:
    """Nearest-neighbour resize of ``x`` (numpy order) to ggml shape ``ne_out``."""
    ne_in = tuple(reversed(x.shape))
    i0, i1, i2, i3 = (nearest_index(ne_in[d], ne_out[d]) for d in range(4))
    return np.array(x[np.ix_(i3, i2, i1, i0)], dtype=np.float64)


def _upscale(xs: list[np.ndarray], c: OpCase) -> np.ndarray:
    if c.variant == "interpolate":
        return upscale_nearest(xs[0], c.param("ne"))
    ne = c.inputs[0].ne
    return upscale_nearest(xs[0], (ne[0] * c.param("sf"), ne[1] * c.param("sf"), *ne[2:]))


SPECS.add(OpSpec(
    name="UPSCALE", family="resample", golden=_upscale, signatures=(sig("f32"),),
    tolerance={"f32": Tolerance("bit-exact values: nearest-neighbour copies; the source index follows ggml's f32 "
                                "scale rule (trunc(f32(i)/f32(out/in))), which the golden models exactly")},
    params={"sf": P("integer factor on dims 0 and 1 (ggml_upscale)", int, optional=True),
            "ne": P("form=interpolate: target shape", tuple, optional=True)},
    validate=checks.upscale_shape,
    notes="nearest mode only; form=interpolate resizes all four dims to arbitrary sizes"))

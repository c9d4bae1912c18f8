"""Shared pytest setup for the harness's own tests.

Hypothesis profiles, chosen with ``HYPOTHESIS_PROFILE`` (default ``default``):

* ``quick``: 20 examples per property, for edit-test loops.
* ``default``: 100 examples per property.
* ``ci``: 300 examples, no deadline (shared CI runners have noisy timings).
* ``thorough``: 3000 examples, for an occasional long soak.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("quick", max_examples=20, deadline=None)
settings.register_profile("default", max_examples=100, deadline=None)
settings.register_profile("ci", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "thorough", max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

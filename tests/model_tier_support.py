"""What the model-tier test files share: the libllama they run (0.25.1's, from scripts/setup-vulkan.sh), the
skip when it is absent, and a subprocess environment that imports this checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
LIB = ROOT / ".backends" / "ggml-0.25.1-vulkan"
needs_libllama = pytest.mark.skipif(
    not any(LIB.glob("libllama*.so")),
    reason="no libllama in .backends/ggml-0.25.1-vulkan (scripts/setup-vulkan.sh puts it there)")


def subprocess_env() -> dict[str, str]:
    """This environment with the checkout first on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def conform_model(*args: str) -> subprocess.CompletedProcess[str]:
    """``conform model ARGS --ggml-lib LIB`` in a subprocess."""
    return subprocess.run([sys.executable, "-m", "conformance.cli", "model", *args, "--ggml-lib", str(LIB)],
                          capture_output=True, text=True, cwd=ROOT, env=subprocess_env(), timeout=300)

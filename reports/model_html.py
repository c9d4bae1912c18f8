"""The model section: one HTML page for ``conform model`` results (``model.json``), one block per model and
device: the verdict, the logits figures, and the per-node table with the first failing node highlighted.

Text from results goes through jinja2 autoescaping, as in the release report.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2

TEMPLATE_DIR = Path(__file__).parent


def render_model_section(results: list[dict[str, Any]]) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    return env.get_template("model.html.j2").render(models=results)


def build_model_report(model_json: list[Path], out: Path) -> Path:
    """Render the model.json files of ``conform model`` runs into one page."""
    results = [json.loads(p.read_text()) for p in model_json]
    out.write_text(render_model_section(results))
    return out

"""The model section: one HTML page for ``conform model`` results (``model.json``), one block per model and
device: the verdict, the logits figures, and the per-node table with the first failing node highlighted.

Text from results goes through jinja2 autoescaping, as in the release report.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2

from results.load import ReportInputError

MODEL_FILE = "model.json"

TEMPLATE_DIR = Path(__file__).parent


def _template() -> jinja2.Template:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    return env.get_template("model.html.j2")


def render_model_section(results: list[dict[str, Any]]) -> str:
    return _template().render(models=results)


def is_model_input(path: str | os.PathLike[str]) -> bool:
    """A ``conform report`` input that is a model run (a folder, a model.json, or a .json file that opens as
    one: its first key is ``device_spec``) rather than results (JSON Lines, whatever their suffix)."""
    p = Path(path)
    if p.is_dir() or p.name == MODEL_FILE:
        return True
    if p.suffix != ".json" or not p.is_file():
        return False
    with p.open("rb") as f:
        head = f.read(256).lstrip()
    return head.startswith(b"{") and head[1:].lstrip().startswith(b'"device_spec"')


def model_files(path: str | os.PathLike[str]) -> list[Path]:
    """The model.json files of a ``conform model`` output: the file itself, the folder's, or one per device
    subfolder (a run on several devices)."""
    p = Path(path)
    if not p.is_dir():
        return [p]
    if (p / MODEL_FILE).is_file():
        return [p / MODEL_FILE]
    found = sorted(p.glob(f"*/{MODEL_FILE}"))
    if not found:
        raise ReportInputError(f"{path}: a folder without {MODEL_FILE} (give a conform model output folder, or "
                               "results .jsonl files)")
    return found


def _shared_texts() -> Any:
    """A json object hook that makes equal string values one object: a run's nodes repeat their names, ops,
    shapes and case ids in every layer and step (a --decode 256 run's 12,850 nodes held 36.5 MiB loaded,
    most of it copies of the same texts)."""
    texts: dict[str, str] = {}

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        return {k: texts.setdefault(v, v) if isinstance(v, str) else v for k, v in pairs}
    return hook


def load_model_results(paths: Sequence[str | os.PathLike[str]]) -> list[dict[str, Any]]:
    """The model.json records of ``conform model`` runs; ReportInputError (one line) for one that is not."""
    out = []
    for file in (f for path in paths for f in model_files(path)):
        try:
            with file.open(encoding="utf-8") as f:
                record = json.load(f, object_pairs_hook=_shared_texts())
        except FileNotFoundError:
            raise ReportInputError(f"{file}: no such file") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ReportInputError(f"{file}: not a conform model result ({exc})") from None
        if not isinstance(record, dict) or not {"verdict", "nodes", "logits", "device_spec"} <= record.keys():
            raise ReportInputError(f"{file}: not a conform model result (no verdict, per-node table and logits)")
        out.append(record)
    return out


def build_model_report(model_json: list[Path], out: Path) -> Path:
    """Render the model.json files of ``conform model`` runs into one page."""
    results = load_model_results(model_json)
    with out.open("w", encoding="utf-8") as f:  # written as it renders: the page is a row per node
        f.writelines(_template().generate(models=results))
    return out

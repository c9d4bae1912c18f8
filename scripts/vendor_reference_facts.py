"""Extract the project facts coverage tests need from the reference folder beside the project
(``../shared``) into ``tests/data/reference_facts.json``, so those tests run in a fresh clone.

Facts, not copies: the op names ggml-cann's ``ggml_backend_cann_supports_op`` has cases for in the
seed (``shared/seed/ggml-cann.cpp``), the 81 ops ggml-cann 0.20.2's accepts as indexed by
``shared/reference/cann-0.20.2-ops.md``, and the C prototypes and status codes that
``shared/reference/acl-facts.md`` quotes from the ACL headers (each declaration on one line). Each
entry records its source file and that file's sha256.

    python scripts/vendor_reference_facts.py [--shared ../shared] [--check]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "reference_facts.json"


def _source(shared: Path, relative: str) -> tuple[str, dict[str, str]]:
    path = shared / relative
    data = path.read_bytes()
    return data.decode("utf-8"), {"file": f"shared/{relative}", "sha256": hashlib.sha256(data).hexdigest()}


def seed_supports_op(shared: Path) -> dict[str, object]:
    """The ``case GGML_OP_*`` and ``case GGML_UNARY_OP_*`` labels of the seed's supports_op."""
    text, source = _source(shared, "seed/ggml-cann.cpp")
    body = text[text.index("static bool ggml_backend_cann_supports_op"):]
    body = body[: body.index("GGML_UNUSED(backend)")]
    return {"source": source | {"function": "ggml_backend_cann_supports_op"},
            "ops": sorted(set(re.findall(r"case GGML_OP_(\w+):", body))),
            "unary_ops": sorted(set(re.findall(r"case GGML_UNARY_OP_(\w+):", body)))}


def cann_0_20_2_ops(shared: Path) -> dict[str, object]:
    """The index's "Seed ops" and "New since the seed" lists (parenthesised conditions dropped)."""
    text, source = _source(shared, "reference/cann-0.20.2-ops.md")
    seed = re.search(r"Seed ops \(41\): (.*)", text)
    if seed is None:
        raise SystemExit(f"{source['file']}: no 'Seed ops (41):' line")
    new: set[str] = set()
    for line in text.split("New since the seed (40):")[1].split("## Conditions")[0].splitlines():
        if ":" in line:
            new |= set(re.sub(r"\([^)]*\)", "", line.split(":", 1)[1]).split())
    return {"source": source, "seed_ops": sorted(seed.group(1).split()), "new_ops": sorted(new)}


# A declaration in acl-facts.md's code blocks: optional return type, an acl* name, params, ';'.
_DECLARATION = re.compile(
    r"(?:(?P<restype>(?:const[ \t]+)?[A-Za-z_]\w*[ \t]*\**)[ \t]*)?"
    r"\b(?P<name>acl\w+)\s*\((?P<params>[^()]*)\)\s*;"
)


def acl_facts(shared: Path) -> dict[str, object]:
    """Every C declaration in the doc's code blocks (comments stripped, the generic "<op args...>"
    line left out), and the (code, name) pairs of its error-code section as the doc spells them."""
    text, source = _source(shared, "reference/acl-facts.md")
    blocks = re.findall(r"```c?\n(.*?)```", text, re.S)
    code = "\n".join(re.sub(r"//[^\n]*", "", block) for block in blocks)
    declarations = []
    for match in _DECLARATION.finditer(code):
        if "<" in match["params"] or "..." in match["params"]:
            continue
        params = " ".join(match["params"].split())
        declarations.append(f"{' '.join((match['restype'] or '').split())} {match['name']}({params})".strip())
    section = text.split("## 2. Error codes")[1].split("\n## ")[0]
    codes = [[int(c), name] for block in re.findall(r"```\n(.*?)```", section, re.S)
             for c, name in re.findall(r"\b(\d+)\s+([A-Z]\w*)", block)]
    return {"source": source, "declarations": declarations, "error_codes": codes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared", help="the reference folder")
    parser.add_argument("--check", action="store_true", help="exit 1 if the vendored file differs")
    args = parser.parse_args(argv)
    facts = {"ggml_cann_seed_supports_op": seed_supports_op(args.shared),
             "ggml_cann_0_20_2_ops": cann_0_20_2_ops(args.shared),
             "acl_facts": acl_facts(args.shared)}
    text = json.dumps(facts, indent=1) + "\n"
    if args.check:
        current = OUT.read_text(encoding="utf-8") if OUT.exists() else ""
        if current != text:
            print(f"{OUT.relative_to(ROOT)} is stale: run python scripts/vendor_reference_facts.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

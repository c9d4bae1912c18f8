"""``conform devices`` and ``conform ops``: what is there to test, and how each op is judged."""

from __future__ import annotations

import argparse
import json
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

from conformance.cli.common import add_parser, common


def cmd_devices(args: argparse.Namespace) -> int:
    from device.ggml.device import list_ggml_devices
    from device.inventory import acl_devices

    devices = list_ggml_devices(args.ggml_lib)
    acl = acl_devices()
    if args.json:
        print(json.dumps({"ggml": devices, "acl": acl}, indent=2))
        return 0
    first = devices[0] if devices else {}
    print(f"ggml {first.get('ggml_version', '?')} from {first.get('library_path', '?')}")
    print(f"{'device':<14} {'backend':<8} {'type':<6} {'free MiB':>10} {'total MiB':>10}  description")
    for d in devices:
        print(f"{d['spec']:<14} {d['backend']:<8} {d['type']:<6} {d['memory_free'] // 2**20:>10} "
              f"{d['memory_total'] // 2**20:>10}  {d['description']}")
    if acl:
        print("\nACL devices (CANN runtime)")
        for a in acl:
            hbm = f"{a.get('hbm_free', 0) // 2**20}/{a.get('hbm_total', 0) // 2**20} MiB"
            print(f"  acl:{a.get('index')}  {a.get('soc_name', '?')}  HBM free/total {hbm}  "
                  f"CANN {a.get('cann_version', '?')}")
    else:
        print("\nACL devices: none (no CANN runtime libascendcl found)")
    return 0


def cmd_ops(args: argparse.Namespace) -> int:
    from golden import catalogue

    rows: list[dict[str, Any]] = []
    for spec in catalogue.OPS.values():
        rows.append({
            "op": spec.name, "family": spec.family, "implemented": spec.implemented,
            "signatures": [s.label() for s in spec.signatures],
            "quantized_signatures": [s.label() for s in spec.quantized_signatures],
            "tolerance": {k: v.describe() for k, v in spec.tolerance.items()},
            "notes": spec.notes,
        })
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return 0
    done = sum(r["implemented"] for r in rows)
    print(f"{done}/{len(rows)} ops of the CANN seed's supports_op have a golden model; under each op, its "
          "tolerance rows (destination dtype: bounds, and why)\n")
    op_width = max(len("OP"), *(len(r["op"]) for r in rows)) + 1
    family_width = max(len("FAMILY"), *(len(r["family"]) for r in rows)) + 1
    print(f"{'OP':<{op_width}} {'FAMILY':<{family_width}} {'GOLDEN':<16} SIGNATURES (sources→destination)")
    for r in rows:
        mark = "yes" if r["implemented"] else "NOT IMPLEMENTED"
        print(f"{r['op']:<{op_width}} {r['family']:<{family_width}} {mark:<16} {' '.join(r['signatures'])}")
        for dst, row in r["tolerance"].items():
            bounds = " ".join(f"{k}={readable_bound(v)}" for k, v in row.items() if k != "reason")
            print(f"    {dst:<6} {bounds}  ({row.get('reason', 'no reason given')})")
    print("\nQUANTIZED TYPE  OPS DRAWN WITH IT (test_quantized; the signatures that hold the type)")
    for qtype, ops in quantized_type_ops(catalogue.OPS.values()).items():
        print(f"{qtype:<15} {', '.join(ops) if ops else undrawn_reason(qtype)}")
    return 0


def readable_bound(value: object) -> str:
    """A tolerance figure as the reasons write it: ``2^-150``, ``3·2^-24`` where the float is exactly a
    small odd multiple of a power of two too small or large for plain digits, else a short ``%g``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    number = float(value)
    if not math.isfinite(number) or number == 0 or 1e-4 <= abs(number) < 1e6:
        return f"{number:g}"
    mantissa, exponent = math.frexp(abs(number))  # |number| = mantissa · 2^exponent, 0.5 <= mantissa < 1
    for bits in range(1, 5):  # an odd multiple m·2^k with m < 16
        multiple = mantissa * 2**bits
        if multiple == int(multiple) and int(multiple) % 2 == 1:
            sign = "-" if number < 0 else ""
            power = f"2^{exponent - bits}"
            return f"{sign}{power}" if multiple == 1 else f"{sign}{int(multiple)}·{power}"
    return f"{number:.4g}"


def undrawn_reason(qtype: str) -> str:
    from golden import formats

    if qtype in formats.TYPES and not formats.get(qtype).has_to_float:
        return "none: an activation format (ggml has no to_float for it), judged inside the products that use it"
    return "none: read only where a model or a test file holds it"


def quantized_type_ops(specs: Any) -> dict[str, list[str]]:
    """Every quantized type of golden.dtypes, with the ops whose quantized signatures draw it."""
    from golden import dtypes

    found: dict[str, list[str]] = {q: [] for q in dtypes.QUANT_TYPES}
    for spec in specs:
        for signature in spec.quantized_signatures:
            for qtype in dict.fromkeys(t for t in (*signature.srcs, signature.dst) if t in found):
                if spec.name not in found[qtype]:
                    found[qtype].append(spec.name)
    return found


def declare_parser(sub: Any) -> None:
    """This subcommand's arguments on ``conform``'s parser."""
    dev = add_parser(sub, "devices", help="list devices",
                     description="List ggml devices (and ACL devices where CANN is "
                                 "installed) with their free and total memory.")
    common(dev)
    dev.add_argument("--json", action="store_true", help="print JSON instead of a table")

    ops = add_parser(sub, "ops", help="list the op catalogue",
              description="List the op catalogue: family, golden model, dtype signatures and each tolerance row "
                          "with its error-model reason.")
    ops.add_argument("--json", action="store_true", help="print JSON instead of a table")

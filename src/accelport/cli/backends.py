"""`accelport backends [VENDOR]`: the vendor profiles accelport knows (device type, backend, variables, resources)."""

from __future__ import annotations

import argparse
import json

from accelport import knowledge
from accelport.cli._output import emit
from accelport.report.table import text_table

ORDER = 80


def _detail(profile: knowledge.VendorProfile) -> str:
    data = profile.to_dict()
    lines = [f"{profile.name} ({profile.key})"]
    for key, value in data.items():
        if key in ("key", "name"):
            continue
        if isinstance(value, list):
            value = ", ".join(str(v) for v in value) or "-"
        elif isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
        elif value in ("", None):
            value = "-"
        lines.append(f"  {key:26} {value}")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    profiles = knowledge.vendors()
    if args.vendor:
        profile = knowledge.vendor(args.vendor)
        emit(json.dumps(profile.to_dict(), indent=2) + "\n" if args.format == "json" else _detail(profile), args.output)
        return 0
    if args.format == "json":
        emit(json.dumps({k: p.to_dict() for k, p in profiles.items()}, indent=2) + "\n", args.output)
        return 0
    rows = [
        (
            p.key,
            p.name,
            p.torch_device,
            p.adapter_package or "(built in)",
            p.distributed_backend,
            p.visible_devices_var or "-",
            ", ".join(p.k8s_resources[:1]) or "-",
        )
        for p in profiles.values()
    ]
    emit(text_table(["vendor", "name", "device", "adapter", "backend", "visible devices", "k8s resource"], rows), args.output)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("backends", help="list vendor profiles, or show one", description=__doc__)
    parser.add_argument("vendor", nargs="?", help="vendor key (cuda, rocm, npu, xpu, musa, mlu, ...)")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    parser.set_defaults(handler=run)

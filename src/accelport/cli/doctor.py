"""`accelport doctor`: what this machine offers (torch, accelerators, vendor adapters, distributed backends)."""

from __future__ import annotations

import argparse
import json

from accelport.cli._output import emit
from accelport.runtime.environment import describe_machine

ORDER = 85


def run(args: argparse.Namespace) -> int:
    info = describe_machine()
    if args.format == "json":
        emit(json.dumps(info, indent=2) + "\n", args.output)
        return 0
    lines = [
        f"python        {info['python']}  ({info['platform']})",
        f"accelport     {info['accelport']}",
        f"torch         {info['torch']['version'] or 'not installed'}",
    ]
    torch_info = info["torch"]
    if torch_info["version"]:
        accel = torch_info["accelerator"] or "none (CPU only)"
        lines.append(f"accelerator   {accel}  devices={torch_info['device_count']}")
        lines.append(f"built with    cuda={torch_info['cuda_version'] or '-'}  hip={torch_info['hip_version'] or '-'}")
        lines.append(f"distributed   {', '.join(torch_info['distributed_backends']) or 'unavailable'}")
        lines.append(f"default dist  {torch_info['default_backend'] or '-'}")
    adapters = info["adapters"]
    lines.append("adapters      " + (", ".join(f"{name} {ver}" for name, ver in adapters.items()) or "none installed"))
    lines.append(f"triton        {info['triton'] or 'not installed'}")
    if info["visible_devices"]:
        lines.append("visible       " + ", ".join(f"{k}={v}" for k, v in info["visible_devices"].items()))
    emit("\n".join(lines) + "\n", args.output)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("doctor", help="describe this machine: torch, accelerators, adapters, backends", description=__doc__)
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    parser.set_defaults(handler=run)

"""Launch a program under the torch.cuda redirect shim and collect its dynamic inventory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelport import __version__
from accelport.errors import InvalidValue, UserError
from accelport.runtime import redirect

INVENTORY_SCHEMA = "accelport-run-1"
BOOT = Path(__file__).resolve().parent / "boot"


@dataclass
class RunResult:
    """What happened: the program's exit code and what each of its processes had redirected."""

    command: list[str]
    exit_code: int
    device: str | None
    records: list[dict[str, Any]] = field(default_factory=list)

    def inventory(self) -> dict[str, Any]:
        """Every redirected API over all processes: rule, what it became, calls per call site."""
        merged: dict[str, dict[str, Any]] = {}
        for record in self.records:
            for api in record["apis"]:
                entry = merged.setdefault(
                    api["api"],
                    {"api": api["api"], "rule_id": redirect.rule_for(api["api"]), "to": api["to"], "calls": 0, "sites": defaultdict(int)},
                )
                entry["calls"] += api["calls"]
                for site in api["sites"]:
                    entry["sites"][(_shown(site["path"]), site["line"])] += site["calls"]
        apis = []
        for entry in sorted(merged.values(), key=lambda e: e["api"]):
            sites = [{"path": p, "line": line, "calls": n} for (p, line), n in sorted(entry.pop("sites").items())]
            apis.append({**entry, "sites": sites})
        devices = sorted({r["device"] for r in self.records})
        return {
            "schema": INVENTORY_SCHEMA,
            "tool": {"name": "accelport", "version": __version__},
            "command": self.command,
            "requested_device": self.device,
            "devices": devices,
            "exit_code": self.exit_code,
            "processes": len(self.records),
            "summary": {"apis": len(apis), "calls": sum(a["calls"] for a in apis)},
            "apis": apis,
        }


def _shown(path: str) -> str:
    if path.startswith("<"):
        return path
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def environment(device: str | None, record_dir: str, quiet: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BOOT), env.get("PYTHONPATH", "")) if p)
    env[redirect.ENV_DEVICE] = device or ""
    env[redirect.ENV_RECORD_DIR] = record_dir
    env["ACCELPORT_RUN_PATH"] = str(Path(__file__).resolve().parents[2])
    if quiet:
        env[redirect.ENV_QUIET] = "1"
    if device and "CUDA_VISIBLE_DEVICES" in env:
        # The program restricts devices the CUDA way; say the same to the target's runtime.
        from accelport import knowledge

        vendor = knowledge.vendor_for_device(device.split(":")[0])
        variable = vendor.visible_devices_var if vendor is not None else None
        if variable and variable not in env:
            env[variable] = env["CUDA_VISIBLE_DEVICES"]
    return env


def device_types() -> list[str]:
    """The device types `--device` accepts: the CPU and every vendor profile's torch device type.

    A backend of one's own (a renamed PrivateUse1 device) is added with a vendor profile in a
    site knowledge file.
    """
    from accelport import knowledge

    return sorted({"cpu", *(profile.torch_device for profile in knowledge.vendors().values() if profile.torch_device)})


def check_device(device: str) -> None:
    """UserError unless `device` is TYPE or TYPE:INDEX with a known TYPE (checked before anything starts)."""
    kind, colon, index = device.partition(":")
    known = device_types()
    if kind not in known:
        raise InvalidValue("device", device, f"not a device type; use one of {', '.join(known)} (optionally TYPE:INDEX)")
    if colon and not (index.isdigit() and index.isascii()):
        raise InvalidValue("device", device, f"the index after ':' must be a number, as in {kind}:0")


def run_program(command: list[str], device: str | None = None, quiet: bool = False) -> RunResult:
    """Run `command` with torch.cuda redirected to `device` (default: the current accelerator or the CPU)."""
    if not command:
        raise UserError("no command given; use `accelport run -- python script.py ...`")
    with tempfile.TemporaryDirectory(prefix="accelport-run-") as record_dir:
        try:
            process = subprocess.Popen(command, env=environment(device, record_dir, quiet))
        except FileNotFoundError:
            raise UserError(f"{command[0]}: command not found; check the command after `--`") from None
        except PermissionError:
            raise UserError(f"{command[0]}: not executable; check the command after `--`") from None
        while True:
            try:
                code = process.wait()
                break
            except KeyboardInterrupt:
                process.send_signal(signal.SIGINT)  # the program decides how to stop; we keep waiting
        if code < 0:
            code = 128 - code
        records = []
        for path in sorted(Path(record_dir).glob("*.json")):
            try:
                records.append(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, json.JSONDecodeError):
                continue  # a process that died while writing; the others still count
    return RunResult(command=list(command), exit_code=code, device=device, records=records)

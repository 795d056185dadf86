"""Load signals for the router: squeue/sinfo, Kueue ClusterQueue status, Volcano Queue status.

A probe names the commands it runs and parses their output; running them is a separate
step with a dry-run mode, so routing decisions can be tested without a cluster and a user
can see exactly what would be asked of the cluster.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from accelport.pools.model import Pool
from accelport.pools.router import Load

log = logging.getLogger(__name__)

# One command's output by argv; a probe asks through this so tests and dry runs can stand in.
Runner = Callable[[list[str]], str]


@dataclass(frozen=True)
class ProbeCommand:
    pool: str
    argv: tuple[str, ...]


def _gres_count(text: str, name: str, gres_type: str) -> int:
    """Devices of GRES `name[:type]` in a sinfo/squeue GRES string ('gpu:h100:2,npu:910b:2(IDX:0-1)')."""
    total = 0
    for item in re.split(r",(?![^()]*\))", text):
        item = re.sub(r"\(.*\)$", "", item.strip())
        item = re.sub(r"^(gres[:/])", "", item)
        parts = item.split(":")
        if not parts or parts[0] != name:
            continue
        if gres_type and len(parts) == 3 and parts[1] != gres_type:
            continue
        if parts[-1].isdigit() and len(parts) >= 2:
            total += int(parts[-1])
    return total


def slurm_commands(pool: Pool) -> list[list[str]]:
    assert pool.slurm is not None
    partition = pool.slurm.partition
    return [
        ["sinfo", "--noheader", "--Node", f"--partition={partition}", "--Format=NodeList:|,Gres:|,GresUsed:|,StateLong:|"],
        ["squeue", "--noheader", f"--partition={partition}", "--states=PENDING", "--format=%T|%D|%b"],
    ]


def parse_slurm(pool: Pool, sinfo: str, squeue: str) -> Load:
    """Devices total/used from `sinfo -N -O Gres,GresUsed`; waiting jobs and devices from `squeue`."""
    assert pool.slurm is not None
    name, gres_type = pool.slurm.gres, pool.slurm.gres_type
    total = used = 0
    for line in sinfo.splitlines():
        fields = line.split("|")
        if len(fields) < 4 or not fields[0].strip():
            continue
        state = fields[3].strip().lower()
        if any(word in state for word in ("down", "drain", "fail", "maint")):
            continue  # devices on a node that cannot run jobs are not capacity
        total += _gres_count(fields[1], name, gres_type)
        used += _gres_count(fields[2], name, gres_type)
    pending_jobs = pending_devices = 0
    for line in squeue.splitlines():
        fields = line.split("|")
        if len(fields) < 3 or fields[0].strip() != "PENDING":
            continue
        pending_jobs += 1
        nodes = int(fields[1]) if fields[1].strip().isdigit() else 1
        pending_devices += nodes * _gres_count(fields[2], name, gres_type)
    return Load(total=total, used=used, pending_jobs=pending_jobs, pending_devices=pending_devices, source="squeue/sinfo")


def kueue_commands(pool: Pool) -> list[list[str]]:
    assert pool.kubernetes is not None and pool.kubernetes.kueue is not None
    return [["kubectl", "get", "clusterqueues.kueue.x-k8s.io", pool.kubernetes.kueue.cluster_queue, "--output=json"]]


def _quantity_int(value: Any) -> int:
    if isinstance(value, int):
        return value
    text = str(value)
    return int(text) if text.isdigit() else 0


def parse_kueue(pool: Pool, output: str) -> Load:
    """Nominal quota, usage and pending workloads of the pool's ClusterQueue (`kubectl get -o json`)."""
    assert pool.kubernetes is not None
    resource = pool.kubernetes.resource
    data = json.loads(output)
    total = 0
    for group in data.get("spec", {}).get("resourceGroups", []):
        for flavor in group.get("flavors", []):
            for res in flavor.get("resources", []):
                if res.get("name") == resource:
                    total += _quantity_int(res.get("nominalQuota", 0))
    status = data.get("status", {})
    used = sum(
        _quantity_int(res.get("total", 0))
        for flavor in status.get("flavorsUsage", [])
        for res in flavor.get("resources", [])
        if res.get("name") == resource
    )
    return Load(total=total, used=used, pending_jobs=int(status.get("pendingWorkloads", 0)), source="kueue ClusterQueue status")


def volcano_commands(pool: Pool) -> list[list[str]]:
    assert pool.kubernetes is not None
    return [["kubectl", "get", "queues.scheduling.volcano.sh", pool.kubernetes.queue, "--output=json"]]


def parse_volcano(pool: Pool, output: str) -> Load:
    """Capability, allocation and pending PodGroups of the pool's Volcano Queue."""
    assert pool.kubernetes is not None
    resource = pool.kubernetes.resource
    data = json.loads(output)
    capability = data.get("spec", {}).get("capability", {})
    total = _quantity_int(capability[resource]) if resource in capability else (pool.devices or None)
    status = data.get("status", {})
    used = _quantity_int(status.get("allocated", {}).get(resource, 0))
    return Load(total=total, used=used, pending_jobs=int(status.get("pending", 0)), source="volcano Queue status")


def probe_commands(pool: Pool) -> list[list[str]]:
    """The read-only commands that measure this pool's load (empty when it has no probe)."""
    if pool.engine == "slurm":
        return slurm_commands(pool)
    kube = pool.kubernetes
    if kube is not None and kube.scheduler == "kueue" and kube.kueue is not None:
        return kueue_commands(pool)
    if kube is not None and kube.scheduler == "volcano":
        return volcano_commands(pool)
    return []


def parse(pool: Pool, outputs: list[str]) -> Load:
    if pool.engine == "slurm":
        return parse_slurm(pool, outputs[0], outputs[1])
    if pool.kubernetes is not None and pool.kubernetes.scheduler == "kueue":
        return parse_kueue(pool, outputs[0])
    return parse_volcano(pool, outputs[0])


def run_command(argv: list[str], timeout: float = 30.0) -> str:
    """Run one read-only probe command; its failure is an OSError/CalledProcessError for the caller."""
    if shutil.which(argv[0]) is None:
        raise FileNotFoundError(f"{argv[0]} not found on PATH")
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=timeout)
    return done.stdout


@dataclass
class ProbeReport:
    loads: dict[str, Load]
    commands: list[ProbeCommand]
    failures: dict[str, str]


def probe_pools(pools: list[Pool], *, dry_run: bool = False, runner: Runner = run_command) -> ProbeReport:
    """Measure every pool that has a probe; with `dry_run` only list the commands.

    A pool whose probe fails is routed without its load, and the failure is reported.
    """
    loads: dict[str, Load] = {}
    commands: list[ProbeCommand] = []
    failures: dict[str, str] = {}
    for pool in pools:
        argvs = probe_commands(pool)
        commands += [ProbeCommand(pool.name, tuple(a)) for a in argvs]
        if dry_run or not argvs:
            continue
        try:
            loads[pool.name] = parse(pool, [runner(a) for a in argvs])
        except (OSError, subprocess.SubprocessError, ValueError, KeyError) as exc:
            detail = getattr(exc, "stderr", "") or str(exc)
            failures[pool.name] = f"{' '.join(argvs[0][:2])}: {str(detail).strip()}"
            log.warning("probe for pool %s failed: %s", pool.name, failures[pool.name])
    return ProbeReport(loads, commands, failures)


def loads_from_json(data: Any, origin: str) -> dict[str, Load]:
    """Signals given by the user as JSON: {"pool": {"total": 64, "used": 60, "pending_jobs": 3}}."""
    from accelport.errors import UserError

    if not isinstance(data, dict):
        raise UserError(f"{origin}: must be a JSON object keyed by pool name")
    loads = {}
    allowed = {"total", "used", "pending_jobs", "pending_devices"}
    for name, entry in data.items():
        if not isinstance(entry, dict) or set(entry) - allowed:
            raise UserError(f"{origin}: {name!r} must be an object with keys from {', '.join(sorted(allowed))}")
        for key, value in entry.items():
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise UserError(f"{origin}: {name}.{key} must be a non-negative integer, got {value!r}")
        loads[name] = Load(
            total=entry.get("total"),
            used=entry.get("used"),
            pending_jobs=entry.get("pending_jobs", 0) or 0,
            pending_devices=entry.get("pending_devices"),
            source=origin,
        )
    return loads

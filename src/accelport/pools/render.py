"""Everything accelport renders for a job and its pools, as named files ready to write or submit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from accelport.errors import MissingDependency
from accelport.pools.kubernetes import (
    render_http_route,
    render_kubernetes,
    render_kueue,
    render_volcano_queues,
)
from accelport.pools.model import JobSpec, Pool
from accelport.pools.router import http_route_weights
from accelport.pools.slurm import gres_conf, render_sbatch, slurm_conf


@dataclass(frozen=True)
class Artefact:
    """One rendered file: a batch script, a manifest (with its objects), or a config snippet."""

    filename: str
    kind: str  # sbatch | manifest | slurm-conf
    text: str
    pool: str = ""
    engine: str = ""
    objects: tuple[dict[str, Any], ...] = field(default_factory=tuple)


def to_yaml(objects: list[dict[str, Any]] | tuple[dict[str, Any], ...]) -> str:
    try:
        import yaml
    except ModuleNotFoundError:
        raise MissingDependency("pyyaml", "pools", "writing Kubernetes manifests") from None
    class _Dumper(yaml.SafeDumper):
        # The same labels dict appears at several places: write it out each time, no &anchors.
        def ignore_aliases(self, data: Any) -> bool:
            return True

    return yaml.dump_all(list(objects), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000)


def render_for_pool(job: JobSpec, pool: Pool) -> Artefact:
    """The job on one pool: `<job>-<pool>.sbatch` for Slurm, `<job>-<pool>.yaml` for Kubernetes."""
    if pool.engine == "slurm":
        return Artefact(f"{job.name}-{pool.name}.sbatch", "sbatch", render_sbatch(job, pool), pool.name, "slurm")
    objects = tuple(render_kubernetes(job, pool))
    return Artefact(f"{job.name}-{pool.name}.yaml", "manifest", to_yaml(objects), pool.name, "kubernetes", objects)


def render_admin(pools: list[Pool], job: JobSpec | None = None) -> list[Artefact]:
    """The artefacts an administrator applies once per set of pools (only those that apply)."""
    artefacts = []
    kueue = render_kueue(pools)
    if kueue:
        artefacts.append(Artefact("kueue-queues.yaml", "manifest", to_yaml(kueue), objects=tuple(kueue)))
    volcano = render_volcano_queues(pools)
    if volcano:
        artefacts.append(Artefact("volcano-queues.yaml", "manifest", to_yaml(volcano), objects=tuple(volcano)))
    slurm_pools = [p for p in pools if p.slurm is not None]
    if slurm_pools:
        artefacts.append(Artefact("gres.conf", "slurm-conf", gres_conf(slurm_pools)))
        artefacts.append(Artefact("slurm.conf", "slurm-conf", slurm_conf(slurm_pools)))
    if job is not None and job.service is not None:
        kube_pools = [p for p in pools if p.engine == "kubernetes"]
        route = render_http_route(job, kube_pools, http_route_weights(kube_pools))
        artefacts.append(Artefact(f"{job.name}-httproute.yaml", "manifest", to_yaml([route]), objects=(route,)))
    return artefacts

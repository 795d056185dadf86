"""What every engine's rendering shares: the environment accelport injects and the launch line."""

from __future__ import annotations

from functools import cache
from typing import Any

from accelport import knowledge
from accelport.pools.model import JobSpec, Pool


@cache
def scheduler_facts() -> dict[str, Any]:
    """knowledge/schedulers.toml: Slurm GRES env, extended-resource rules, Kueue/Volcano names."""
    return knowledge.read_toml("schedulers.toml")


def injected_env(job: JobSpec, pool: Pool) -> dict[str, str]:
    """The variables a job gets on this pool: device type and collective backend, then the job's own.

    The training script reads these instead of hard-coding "cuda" and "nccl". The job's
    own variables come last and win, so a site can override any of them.
    """
    env = {
        "ACCELPORT_POOL": pool.name,
        "ACCELPORT_DEVICE": pool.vendor.torch_device,
        "ACCELPORT_DIST_BACKEND": pool.vendor.distributed_backend,
    }
    env.update(job.env)
    return env


def launch_command(job: JobSpec, endpoint: str | None, run_id: str) -> list[str]:
    """The command each node runs: torchrun (standalone on one node, c10d rendezvous across nodes)."""
    if job.launcher == "none":
        return list(job.command)
    args = ["torchrun"]
    if job.nodes == 1:
        args += ["--standalone", "--nnodes=1"]
    else:
        args += [
            f"--nnodes={job.nodes}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={endpoint}:{job.rdzv_port}",
            f"--rdzv-id={run_id}",
        ]
    args.append(f"--nproc-per-node={job.devices_per_node}")
    return args + list(job.command)


def image_for(job: JobSpec, pool: Pool) -> str:
    """The container image for this pool's vendor: the pool's override, else the job's per-vendor image."""
    from accelport.errors import UserError

    if pool.kubernetes is not None and pool.kubernetes.image:
        return pool.kubernetes.image
    image = job.images.get(pool.vendor.key)
    if not image:
        raise UserError(
            f"{job.source or job.name}: job.images has no image for vendor {pool.vendor.key!r} "
            f"(pool {pool.name!r}); add `{pool.vendor.key} = \"registry/image:tag\"` under [job.images]"
        )
    return image

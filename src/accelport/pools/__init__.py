"""Route C: one vendor-neutral job rendered for Slurm and Kubernetes pools per vendor, and routed.

accelport renders, validates and routes; Slurm, Kubernetes, Kueue and Volcano schedule.
A job always runs in one pool: a distributed job is never split across vendors.
"""

from accelport.pools.model import (
    JobSpec,
    Pool,
    PoolState,
    job_from_toml,
    load_pools,
    pools_from_toml,
)

__all__ = ["JobSpec", "Pool", "PoolState", "job_from_toml", "load_pools", "pools_from_toml"]

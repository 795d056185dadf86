"""Pick one pool for one job: pinned, weighted ramp, load-aware, failover; never split a job.

The weighted ramp is rendezvous (highest-random-weight) hashing: each active pool scores
the job id, and the highest score wins. A resubmitted job lands where it landed before,
over many jobs each active pool gets its weight's share, and when one pool's weight changes
only the jobs that must move do: jobs move to a pool whose weight rose, or off a pool whose
weight fell, never between two pools that kept theirs. Load signals (from probes) move a job
off a pool that cannot start it now; a pool whose probe sees no devices at all (every node
drained or down) takes nothing under any policy; backup pools take work only when no
primary or canary pool can; drained pools (running jobs finish there) and pools that are
down take nothing new.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

from accelport.pools.model import JobSpec, Pool, PoolState

POLICIES = ("weighted", "least-loaded")


@dataclass(frozen=True)
class Load:
    """What a probe saw on one pool; None means unknown."""

    total: int | None = None  # devices the pool has (quota or GRES count)
    used: int | None = None  # devices in use
    pending_jobs: int = 0  # jobs or workloads waiting
    pending_devices: int | None = None  # devices those waiting jobs ask for, when known
    source: str = ""

    @property
    def free(self) -> int | None:
        if self.total is None or self.used is None:
            return None
        return max(self.total - self.used, 0)

    @property
    def pressure(self) -> float:
        """Demand over capacity: (used + waiting) / total; 0 when unknown."""
        if not self.total:
            return 0.0
        waiting = self.pending_devices if self.pending_devices is not None else 0
        return ((self.used or 0) + waiting) / self.total + (0.001 * self.pending_jobs)

    def can_start(self, devices: int) -> bool:
        """Whether a job of `devices` could start now, with what is already waiting ahead of it."""
        free = self.free
        if free is None:
            return self.pending_jobs == 0
        ahead = self.pending_devices if self.pending_devices is not None else (devices if self.pending_jobs else 0)
        return free >= devices + ahead

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "used": self.used,
            "free": self.free,
            "pending_jobs": self.pending_jobs,
            "pending_devices": self.pending_devices,
            "pressure": round(self.pressure, 4),
            "source": self.source,
        }


@dataclass(frozen=True)
class Candidate:
    pool: str
    vendor: str
    engine: str
    state: str
    weight: int
    share: float  # of the weighted ramp, among active pools
    eligible: bool
    why_not: str = ""
    load: Load | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "vendor": self.vendor,
            "engine": self.engine,
            "state": self.state,
            "weight": self.weight,
            "share": round(self.share, 4),
            "eligible": self.eligible,
            "why_not": self.why_not,
            "load": self.load.to_dict() if self.load else None,
        }


@dataclass(frozen=True)
class Decision:
    job_id: str
    pool: str | None  # None: no pool can take the job
    policy: str
    reason: str
    ticket: float  # the job id's hash in [0, 1), the same in every process
    candidates: tuple[Candidate, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "pool": self.pool,
            "policy": self.policy,
            "reason": self.reason,
            "ticket": round(self.ticket, 6),
            "candidates": [c.to_dict() for c in self.candidates],
            "notes": list(self.notes),
        }


def ticket(job_id: str) -> float:
    """A job id's place on [0, 1): the first 64 bits of its SHA-256, stable across runs and machines."""
    digest = hashlib.sha256(job_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _why_not(job: JobSpec, pool: Pool, load: Load | None = None) -> str:
    if pool.state is PoolState.DRAIN:
        return "drained: no new jobs, running ones finish"
    if pool.state is PoolState.DOWN:
        return "down: pool unavailable, no jobs"
    if load is not None and load.total == 0:
        return f"no capacity: {load.source or 'its load signal'} sees 0 devices (nodes drained or down)"
    if pool.devices and job.devices > pool.devices:
        return f"needs {job.devices} devices, pool has {pool.devices}"
    if pool.engine == "kubernetes" and pool.vendor.key not in job.images and not (pool.kubernetes and pool.kubernetes.image):
        return f"job has no image for vendor {pool.vendor.key}"
    if pool.weight == 0 and pool.state is not PoolState.BACKUP:
        return "weight 0"
    return ""


def rendezvous_score(job_id: str, pool: Pool) -> float:
    """The pool's bid for the job: ln(u) / weight, u uniform in (0, 1) from SHA-256 of (job id, pool name).

    The highest bid wins; pool i then wins with probability weight_i / sum of weights
    (weighted rendezvous hashing, the logarithmic method of Schindelhauer and Schomaker,
    "Weighted Distributed Hash Tables", SPAA 2005). A pool's bid depends on its own weight
    only, so changing one weight changes only which jobs that pool wins.
    """
    digest = hashlib.sha256(f"{job_id}\0{pool.name}".encode()).digest()
    u = (int.from_bytes(digest[:8], "big") + 0.5) / 2**64
    return math.log(u) / pool.weight


def _weighted_pick(active: list[Pool], job_id: str) -> Pool:
    return max(active, key=lambda p: (rendezvous_score(job_id, p), p.name))


def decide(
    job: JobSpec,
    pools: list[Pool],
    signals: dict[str, Load] | None = None,
    *,
    policy: str = "weighted",
    pin: str | None = None,
) -> Decision:
    """The pool this job goes to, and why. Pure: same inputs, same answer."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}")
    signals = signals or {}
    point = ticket(job.id)
    # Sorted by name so the ramp does not depend on the order pool files were given in.
    ordered = sorted(pools, key=lambda p: p.name)
    why_not = {p.name: _why_not(job, p, signals.get(p.name)) for p in ordered}
    active = [p for p in ordered if p.state in (PoolState.PRIMARY, PoolState.CANARY) and not why_not[p.name]]
    active_weight = sum(p.weight for p in active)
    candidates = tuple(
        Candidate(
            pool=p.name,
            vendor=p.vendor.key,
            engine=p.engine,
            state=p.state.value,
            weight=p.weight,
            share=(p.weight / active_weight) if p in active and active_weight else 0.0,
            eligible=not why_not[p.name],
            why_not=why_not[p.name],
            load=signals.get(p.name),
        )
        for p in ordered
    )

    def done(pool: Pool | None, reason: str, notes: tuple[str, ...] = ()) -> Decision:
        return Decision(job.id, pool.name if pool else None, "pinned" if pin else policy, reason, point, candidates, notes)

    if pin is not None:
        pinned = next((p for p in pools if p.name == pin), None)
        if pinned is None:
            return done(None, f"pinned pool {pin!r} is not among the pools given")
        why = why_not[pinned.name]
        if why and why != "weight 0":
            return done(None, f"pinned pool {pin!r} cannot take the job: {why}")
        return done(pinned, f"pinned to {pin}")

    eligible = [p for p in ordered if not why_not[p.name]]
    if not eligible:
        largest = max((p.devices for p in pools if not p.state.closed), default=0)
        if largest and job.devices > largest:
            return done(
                None,
                f"the job needs {job.devices} devices and the largest pool has {largest}; "
                "accelport runs a job in one pool and never splits it across vendors",
            )
        return done(None, "no pool can take the job: " + "; ".join(f"{c.pool}: {c.why_not}" for c in candidates))

    backups = sorted((p for p in eligible if p.state is PoolState.BACKUP), key=lambda p: (p.failover_order, p.name))

    def can_start(pool: Pool) -> bool:
        load = signals.get(pool.name)
        return load is None or load.can_start(job.devices)

    if policy == "least-loaded" and signals:
        pool_set = active or backups
        best = min(pool_set, key=lambda p: ((signals[p.name].pressure if p.name in signals else 0.0), ticket(job.id + p.name)))
        return done(best, f"least loaded of {', '.join(p.name for p in pool_set)}")

    if active:
        chosen = _weighted_pick(active, job.id)
        reason = f"weighted ramp: the rendezvous hash of the job id picks {chosen.name} (weight {chosen.weight} of {active_weight})"
        if can_start(chosen):
            return done(chosen, reason)
        # Load-aware: the ramp's pool cannot start the job now; prefer an active pool that can.
        roomy = [p for p in active if can_start(p)]
        if roomy:
            other = min(roomy, key=lambda p: (signals[p.name].pressure if p.name in signals else 0.0, p.name))
            return done(other, f"{chosen.name} is full ({_load_text(signals[chosen.name])}); {other.name} can start it now")
        roomy_backup = [p for p in backups if can_start(p)]
        if roomy_backup:
            return done(roomy_backup[0], f"every active pool is full; failover to backup {roomy_backup[0].name}")
        return done(chosen, reason + "; every pool is full, so it queues there", ("all pools full",))

    for pool in backups:
        if can_start(pool):
            return done(pool, f"no primary or canary pool can take the job; failover to backup {pool.name} (order {pool.failover_order})")
    return done(backups[0], f"failover to backup {backups[0].name}; it is full, so the job queues there")


def _load_text(load: Load) -> str:
    free = "?" if load.free is None else str(load.free)
    return f"{free} free, {load.pending_jobs} waiting"


def ramp_shares(decisions: list[Decision]) -> dict[str, float]:
    """Fraction of decisions per pool (None for unplaced jobs)."""
    counts: dict[str, int] = {}
    for decision in decisions:
        key = decision.pool or "(none)"
        counts[key] = counts.get(key, 0) + 1
    total = max(len(decisions), 1)
    return {k: v / total for k, v in sorted(counts.items())}


def http_route_weights(pools: list[Pool]) -> dict[str, int]:
    """Backend weights for an inference HTTPRoute: primary and canary weights, 0 for backup, drained and down pools."""
    return {p.name: (p.weight if p.state in (PoolState.PRIMARY, PoolState.CANARY) else 0) for p in pools}

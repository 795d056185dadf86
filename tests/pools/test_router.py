"""Routing: the 20% ramp holds, resubmits are stable, drained pools get nothing, load moves work."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace

import pytest

from accelport.pools.model import PoolState
from accelport.pools.router import Load, decide, http_route_weights, ramp_shares, ticket


@pytest.fixture
def ramp(golden_pools):
    """The CUDA pool at 80, the new Ascend pool at 20: a 20% ramp."""
    cuda = replace(golden_pools["nvidia"], state=PoolState.PRIMARY, weight=80, capacity=64)
    ascend = replace(golden_pools["ascend"], state=PoolState.CANARY, weight=20, capacity=64)
    return [cuda, ascend]


def test_twenty_percent_ramp_over_ten_thousand_jobs(golden_job, ramp):
    decisions = [decide(golden_job.with_id(f"job-{i:05d}"), ramp) for i in range(10_000)]
    shares = ramp_shares(decisions)
    assert set(shares) == {"nvidia", "ascend"}
    assert shares["ascend"] == pytest.approx(0.20, abs=0.01)


def test_ramp_follows_the_weights(golden_job, ramp):
    # A planted fault (weights ignored, or swapped) would move the share far from 5%.
    ramp = [replace(ramp[0], weight=95), replace(ramp[1], weight=5)]
    shares = ramp_shares([decide(golden_job.with_id(f"w{i}"), ramp) for i in range(10_000)])
    assert shares["ascend"] == pytest.approx(0.05, abs=0.01)


def test_resubmitted_job_lands_in_the_same_pool(golden_job, ramp):
    for i in range(200):
        job = golden_job.with_id(f"resubmit-{i}")
        first = decide(job, ramp).pool
        assert all(decide(job, list(reversed(ramp))).pool == first for _ in range(3))


def test_ticket_is_the_same_in_another_process():
    """Python's hash() is salted per process; a resubmission from another process must agree."""
    code = "from accelport.pools.router import ticket; print(repr(ticket('job-42')))"
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
        assert float(out) == ticket("job-42")


def test_drained_pool_receives_nothing(golden_job, ramp):
    drained = [ramp[0], replace(ramp[1], state=PoolState.DRAIN)]
    decisions = [decide(golden_job.with_id(f"d{i}"), drained) for i in range(2_000)]
    assert {d.pool for d in decisions} == {"nvidia"}
    pinned = decide(golden_job, drained, pin="ascend")
    assert pinned.pool is None and "drained" in pinned.reason


def test_with_load_signals_the_fuller_pool_is_avoided(golden_job, ramp):
    signals = {
        "nvidia": Load(total=64, used=64, pending_jobs=5, pending_devices=40),
        "ascend": Load(total=64, used=8, pending_jobs=0, pending_devices=0),
    }
    decisions = [decide(golden_job.with_id(f"l{i}"), ramp, signals) for i in range(1_000)]
    assert {d.pool for d in decisions} == {"ascend"}
    # Reversed load, reversed answer: the signal decides, not the pool's name or state.
    signals = {"nvidia": signals["ascend"], "ascend": signals["nvidia"]}
    decisions = [decide(golden_job.with_id(f"l{i}"), ramp, signals) for i in range(1_000)]
    assert {d.pool for d in decisions} == {"nvidia"}
    moved = next(d for d in decisions if d.reason.startswith("ascend is full"))
    assert "can start it now" in moved.reason


def test_least_loaded_policy_picks_lower_pressure(golden_job, ramp):
    signals = {"nvidia": Load(total=64, used=40), "ascend": Load(total=64, used=20)}
    decisions = {decide(golden_job.with_id(f"q{i}"), ramp, signals, policy="least-loaded").pool for i in range(100)}
    assert decisions == {"ascend"}


def test_load_with_room_keeps_the_ramp(golden_job, ramp):
    signals = {"nvidia": Load(total=64, used=16), "ascend": Load(total=64, used=0)}
    shares = ramp_shares([decide(golden_job.with_id(f"r{i}"), ramp, signals) for i in range(5_000)])
    assert shares["ascend"] == pytest.approx(0.20, abs=0.02)


def test_failover_goes_to_backups_in_order(golden_job, ramp, golden_pools):
    backup_a = replace(golden_pools["amd"], state=PoolState.BACKUP, failover_order=2, capacity=64)
    backup_b = replace(golden_pools["cambricon"], state=PoolState.BACKUP, failover_order=1, capacity=64)
    drained = [replace(p, state=PoolState.DRAIN) for p in ramp]
    decision = decide(golden_job, [*drained, backup_a, backup_b])
    assert decision.pool == "cambricon" and "failover" in decision.reason
    # Backups take nothing while an active pool can.
    assert {decide(golden_job.with_id(f"b{i}"), [*ramp, backup_a, backup_b]).pool for i in range(500)} <= {"nvidia", "ascend"}
    # Every active pool full: the first backup with room.
    full = {"nvidia": Load(total=64, used=64), "ascend": Load(total=64, used=64), "cambricon": Load(total=64, used=0)}
    assert decide(golden_job, [*ramp, backup_a, backup_b], full).pool == "cambricon"


def test_a_job_larger_than_every_pool_is_never_split(golden_job, ramp):
    big = replace(golden_job, nodes=20, devices_per_node=8)  # 160 devices, pools hold 64 each
    decision = decide(big, ramp)
    assert decision.pool is None
    assert "never splits" in decision.reason
    assert all(not c.eligible for c in decision.candidates)


def test_pool_without_image_for_its_vendor_is_not_eligible(golden_job, ramp, golden_pools):
    kube = replace(golden_pools["nvidia"].on("kubernetes"), state=PoolState.PRIMARY, weight=1)
    job = replace(golden_job, images={"npu": "reg/ft:npu"})
    decision = decide(job, [kube])
    assert decision.pool is None and "no image for vendor cuda" in decision.reason


def test_http_route_weights_follow_states(ramp, golden_pools):
    backup = replace(golden_pools["amd"], state=PoolState.BACKUP, weight=50)
    drained = replace(golden_pools["cambricon"], state=PoolState.DRAIN, weight=50)
    assert http_route_weights([*ramp, backup, drained]) == {"nvidia": 80, "ascend": 20, "amd": 0, "cambricon": 0}


@pytest.mark.parametrize(("state", "says"), [(PoolState.DRAIN, "drained: no new jobs, running ones finish"), (PoolState.DOWN, "down: pool unavailable")])
def test_drained_and_down_pools_receive_nothing_and_say_which(golden_job, ramp, state, says):
    pools = [ramp[0], replace(ramp[1], state=state)]
    decisions = [decide(golden_job.with_id(f"s{i}"), pools) for i in range(2_000)]
    assert {d.pool for d in decisions} == {"nvidia"}
    ascend = next(c for c in decisions[0].candidates if c.pool == "ascend")
    assert (ascend.state, ascend.eligible, ascend.share) == (state.value, False, 0.0)
    assert ascend.why_not.startswith(says)
    pinned = decide(golden_job, pools, pin="ascend")
    assert pinned.pool is None and says in pinned.reason
    # Every pool closed: nothing placed, and the reason names each state.
    closed = decide(golden_job, [replace(ramp[0], state=PoolState.DOWN), replace(ramp[1], state=PoolState.DRAIN)])
    assert closed.pool is None
    assert "nvidia: down" in closed.reason and "ascend: drained" in closed.reason
    assert http_route_weights(pools)["ascend"] == 0


def test_drain_and_down_in_the_admin_artefacts(golden_pools):
    from accelport.pools.kubernetes import render_kueue
    from accelport.pools.slurm import slurm_conf

    nvidia, ascend = golden_pools["nvidia"], golden_pools["ascend"]
    conf = slurm_conf([replace(nvidia, state=PoolState.DRAIN), replace(ascend, state=PoolState.DOWN)]).splitlines()
    # Slurm's DRAIN lets running and queued jobs finish and takes no new ones; DOWN starts nothing.
    assert "PartitionName=gpu-a100 Nodes=<nvidia-nodes> State=DRAIN" in conf
    assert "PartitionName=ascend Nodes=<ascend-nodes> State=DOWN" in conf
    assert "PartitionName=ascend Nodes=<ascend-nodes> State=UP" in slurm_conf([ascend])
    for state in (PoolState.DRAIN, PoolState.DOWN):
        queue = render_kueue([replace(nvidia.on("kubernetes"), state=state)])[1]
        assert queue["spec"]["stopPolicy"] == "Hold"  # never HoldAndDrain: running work is not evicted
    assert "stopPolicy" not in render_kueue([nvidia.on("kubernetes")])[1]["spec"]


def test_cli_route_shows_the_state_of_each_pool(cli, tmp_path):
    from pathlib import Path

    examples = Path(__file__).resolve().parents[2] / "examples" / "pools"
    down = tmp_path / "ascend-down.toml"
    down.write_text((examples / "ascend-pool.toml").read_text().replace('state = "canary"', 'state = "down"'))
    result = cli("pools", "route", examples / "job.toml", "--pools", examples / "cuda-pool.toml", "--pools", down)
    assert result.code == 0, result.err
    row = next(line for line in result.out.splitlines() if "ascend" in line and "npu" in line)
    assert " down " in row and "down: pool unavailable" in row


# --------------------------------------------------------------------------- no capacity, and weight changes


def _routes(job, pools, count=10_000, signals=None, policy="weighted"):
    return {f"j{i}": decide(job.with_id(f"j{i}"), pools, signals, policy=policy).pool for i in range(count)}


@pytest.mark.parametrize("policy", ["weighted", "least-loaded"])
def test_a_pool_with_no_capacity_receives_nothing_under_any_policy(golden_job, ramp, golden_pools, policy):
    # The Ascend pool's nodes are all drained: its probe sees 0 devices. The CUDA pool is busy,
    # so a pressure-based policy that read "0 devices" as "no load" would send everything there.
    signals = {"nvidia": Load(total=64, used=60, pending_jobs=3, pending_devices=24), "ascend": Load(total=0, used=0, source="sinfo")}
    routes = _routes(golden_job, ramp, signals=signals, policy=policy)
    assert set(routes.values()) == {"nvidia"}
    decision = decide(golden_job, ramp, signals, policy=policy)
    ascend = next(c for c in decision.candidates if c.pool == "ascend")
    assert not ascend.eligible and ascend.why_not.startswith("no capacity: sinfo sees 0 devices")
    pinned = decide(golden_job, ramp, signals, pin="ascend")
    assert pinned.pool is None and "no capacity" in pinned.reason
    # Failover skips an empty backup even when it comes first.
    empty = replace(golden_pools["amd"], state=PoolState.BACKUP, failover_order=1, capacity=64)
    roomy = replace(golden_pools["cambricon"], state=PoolState.BACKUP, failover_order=2, capacity=64)
    closed = [replace(p, state=PoolState.DRAIN) for p in ramp]
    assert decide(golden_job, [*closed, empty, roomy], {"amd": Load(total=0, used=0)}, policy=policy).pool == "cambricon"
    # No pool with capacity: no pool at all, and the reason says why.
    none = decide(golden_job, ramp, {"nvidia": Load(total=0, used=0), "ascend": Load(total=0, used=0)}, policy=policy)
    assert none.pool is None and "nvidia: no capacity" in none.reason


def _three_pools(golden_pools, weights):
    names = ("nvidia", "ascend", "amd")
    return [replace(golden_pools[name], state=PoolState.PRIMARY, weight=w, capacity=64) for name, w in zip(names, weights, strict=True)]


def _minimal_move(before, after):
    """The least share of jobs any router must move: the total variation distance between the two splits."""
    old = {k: v / sum(before.values()) for k, v in before.items()}
    new = {k: v / sum(after.values()) for k, v in after.items()}
    return sum(max(new[k] - old[k], 0.0) for k in old)


@pytest.mark.parametrize(
    ("before", "after", "changed"),
    [
        ((70, 20, 10), (70, 40, 10), "ascend"),  # the canary's weight rises
        ((70, 20, 10), (70, 5, 10), "ascend"),  # ... and falls
        ((70, 20, 10), (70, 20, 30), "amd"),  # the first pool by name grows: a split of [0, 1) by name would shift every share
        ((50, 30, 20), (50, 30, 0), "amd"),  # a pool leaves the ramp
    ],
)
def test_a_weight_change_moves_only_the_minimal_share_of_ten_thousand_jobs(golden_job, golden_pools, before, after, changed):
    names = ("nvidia", "ascend", "amd")
    first = _routes(golden_job, _three_pools(golden_pools, before))
    second = _routes(golden_job, _three_pools(golden_pools, after))
    for name, weight in zip(names, after, strict=True):
        assert sum(1 for p in second.values() if p == name) / len(second) == pytest.approx(weight / sum(after), abs=0.015)
    moved = [job for job in first if first[job] != second[job]]
    minimal = _minimal_move(dict(zip(names, before, strict=True)), dict(zip(names, after, strict=True)))
    assert len(moved) / len(first) == pytest.approx(minimal, abs=0.01)
    # Every job that moved, moved to or from the pool whose weight changed: the jobs of the pools that
    # kept their weight stay where they are, but for those that go to the pool that grew.
    assert all(changed in (first[job], second[job]) for job in moved)
    grew = after[names.index(changed)] > before[names.index(changed)]
    assert all(second[job] == changed for job in moved) if grew else all(first[job] == changed for job in moved)


def test_a_ramp_step_moves_only_jobs_from_the_old_pool_to_the_new(golden_job, ramp):
    before = _routes(golden_job, ramp)
    stepped = [replace(ramp[0], weight=70), replace(ramp[1], weight=30)]
    after = _routes(golden_job, stepped)
    moved = [job for job in before if before[job] != after[job]]
    assert len(moved) / len(before) == pytest.approx(0.10, abs=0.01)
    assert all(before[job] == "nvidia" and after[job] == "ascend" for job in moved)

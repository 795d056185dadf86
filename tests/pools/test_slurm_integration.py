"""Rendered scripts against a real Slurm: accepted by `sbatch --test-only`, and run for real."""

from __future__ import annotations

import re
import time
from dataclasses import replace
from pathlib import Path

import pytest

from accelport.pools.model import load_pools
from accelport.pools.probes import probe_pools
from accelport.pools.render import render_for_pool
from accelport.pools.router import decide
from accelport.pools.validate import sbatch_problems

DATA = Path(__file__).resolve().parent / "data"
# Waits on Slurm guard against hangs only; jobs that hold a device sleep longer than any wait
# and are cancelled when the test ends, so a slow scheduler never frees a device early.
HANG_GUARD_S = 300


@pytest.fixture(scope="module")
def pools():
    return {p.name: p for p in load_pools([DATA / "integration-pools.toml"])}


@pytest.fixture(scope="module")
def small_job(golden_job):
    """The golden job cut to what the test node has: one node, two devices, no memory request."""
    return replace(golden_job, nodes=1, devices_per_node=2, cpus_per_node=1, memory="", time_limit="00:05:00")


def _submit_and_wait(slurm, script: str, workdir: Path) -> str:
    path = workdir / "job.sbatch"
    path.write_text(script)
    out = workdir / "out.txt"
    job_id = slurm.run("sbatch", "--parsable", f"--output={out}", f"--chdir={workdir}", str(path)).stdout.strip()
    # Poll quickly rather than `sbatch --wait`, whose back-off adds seconds per job. The deadline
    # only guards against a hang: on a loaded 2-core machine slurmctld can take a minute to schedule.
    deadline = time.monotonic() + HANG_GUARD_S
    state = ""
    while time.monotonic() < deadline:
        state = slurm.run("scontrol", "--oneliner", "show", "job", job_id).stdout
        if "JobState=COMPLETED" in state:
            return out.read_text()
        if any(f"JobState={s}" in state for s in ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")):
            break
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not complete: {state.strip()}\n{out.read_text() if out.exists() else ''}")


@pytest.mark.slow
@pytest.mark.parametrize("pool_name", ["nvidia", "ascend", "amd", "mthreads", "cambricon"])
def test_rendered_script_passes_sbatch_test_only(slurm, pools, small_job, pool_name):
    script = render_for_pool(small_job, pools[pool_name]).text
    assert sbatch_problems(script, f"{pool_name}.sbatch", test_only=True, env=slurm.env) == []


@pytest.mark.slow
def test_sbatch_test_only_rejects_what_the_pool_cannot_give(slurm, pools, small_job):
    too_many = replace(small_job, devices_per_node=3)  # the node has two npu
    problems = sbatch_problems(render_for_pool(too_many, pools["ascend"]).text, "x.sbatch", test_only=True, env=slurm.env)
    assert problems and problems[0].check == "sbatch"


def _visible(output: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line)


PRINT_VARS = ["bash", "-c", "for v in ASCEND_RT_VISIBLE_DEVICES CUDA_VISIBLE_DEVICES MUSA_VISIBLE_DEVICES ACCELPORT_DIST_BACKEND; do echo $v=${!v:-unset}; done"]


@pytest.mark.slow
def test_npu_gres_job_sees_ascend_rt_visible_devices(slurm, pools, small_job, tmp_path):
    job = replace(small_job, launcher="none", command=tuple(PRINT_VARS))
    seen = _visible(_submit_and_wait(slurm, render_for_pool(job, pools["ascend"]).text, tmp_path))
    assert seen["ASCEND_RT_VISIBLE_DEVICES"] == "0,1"
    assert seen["CUDA_VISIBLE_DEVICES"] == "unset"  # Slurm sets nothing for the npu GRES
    assert seen["ACCELPORT_DIST_BACKEND"] == "hccl"


def _allocated(slurm, job_id: str, gres: str) -> set[int]:
    """The indices of `gres` Slurm reports for a running job (read here with Python, not the parser under test)."""
    detail = slurm.run("scontrol", "show", "job", "-d", job_id).stdout
    found = re.search(rf"[ =,]{gres}(?::[^(,]*)*\(IDX:([0-9,-]+)\)", detail)
    assert found, detail
    indices: set[int] = set()
    for item in found[1].split(","):
        low, _, high = item.partition("-")
        indices.update(range(int(low), int(high or low) + 1))
    return indices


@pytest.mark.slow
@pytest.mark.parametrize(("pool_name", "variable", "gres"), [("ascend", "ASCEND_RT_VISIBLE_DEVICES", "npu:910b"), ("cambricon", "MLU_VISIBLE_DEVICES", "mlu")])
def test_non_gpu_gres_job_sees_its_allocated_indices_not_zero(slurm, pools, small_job, tmp_path, pool_name, variable, gres):
    """Another job holds one of the two devices: ours gets the other one, which is not device 0."""
    hold = slurm.run("sbatch", "--parsable", f"--partition={pool_name}", f"--gres={gres}:1", "--output=/dev/null", "--wrap=sleep 900").stdout.strip()
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while slurm.run("squeue", "--noheader", f"--jobs={hold}", "--format=%T").stdout.strip() != "RUNNING":
            assert time.monotonic() < deadline, "the holding job never started"
            time.sleep(0.1)
        held = _allocated(slurm, hold, gres.split(":")[0])
        pool = replace(pools[pool_name], slurm=replace(pools[pool_name].slurm, exclusive=False))
        job = replace(small_job, devices_per_node=1, launcher="none", command=("bash", "-c", f"echo {variable}=${{{variable}:-unset}}"))
        seen = _visible(_submit_and_wait(slurm, render_for_pool(job, pool).text, tmp_path))
        assert seen[variable] == ",".join(str(i) for i in sorted({0, 1} - held))
        assert held == {0} and seen[variable] == "1"  # Slurm hands out the lowest free index first
    finally:
        slurm.run("scancel", hold, check=False)
        deadline = time.monotonic() + HANG_GUARD_S
        while slurm.run("squeue", "--noheader", f"--jobs={hold}", "--format=%T", check=False).stdout.strip():
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)


@pytest.mark.slow
def test_gpu_gres_jobs_see_slurms_variable_and_the_vendors(slurm, pools, small_job, tmp_path):
    job = replace(small_job, launcher="none", command=tuple(PRINT_VARS))
    (tmp_path / "cuda").mkdir()
    seen = _visible(_submit_and_wait(slurm, render_for_pool(job, pools["nvidia"]).text, tmp_path / "cuda"))
    assert seen["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert seen["ACCELPORT_DIST_BACKEND"] == "nccl"
    (tmp_path / "musa").mkdir()
    seen = _visible(_submit_and_wait(slurm, render_for_pool(job, pools["mthreads"]).text, tmp_path / "musa"))
    assert seen["MUSA_VISIBLE_DEVICES"] == seen["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert seen["ACCELPORT_DIST_BACKEND"] == "mccl"


@pytest.mark.slow
def test_probe_reads_real_squeue_sinfo_and_router_avoids_the_full_pool(slurm, pools, small_job):
    hold = slurm.run("sbatch", "--parsable", "--partition=ascend", "--gres=npu:910b:2", "--output=/dev/null", "--wrap=sleep 900").stdout.strip()
    wait = slurm.run("sbatch", "--parsable", "--partition=ascend", "--gres=npu:910b:2", "--output=/dev/null", "--wrap=true").stdout.strip()
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while time.monotonic() < deadline:
            state = slurm.run("squeue", "--noheader", f"--jobs={hold}", "--format=%T").stdout.strip()
            if state == "RUNNING":
                break
            time.sleep(0.2)
        pair = [pools["ascend"], replace(pools["nvidia"], weight=1)]
        report = probe_pools(pair, runner=slurm.runner)
        assert report.failures == {}
        ascend = report.loads["ascend"]
        assert (ascend.total, ascend.used, ascend.pending_jobs, ascend.pending_devices) == (2, 2, 1, 2)
        nvidia = report.loads["nvidia"]
        assert (nvidia.total, nvidia.used, nvidia.pending_jobs) == (2, 0, 0)
        placed = {decide(small_job.with_id(f"p{i}"), pair, report.loads).pool for i in range(200)}
        assert placed == {"nvidia"}
    finally:
        slurm.run("scancel", hold, wait, check=False)

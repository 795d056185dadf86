"""Demo step 60: route C, the example training job on a CUDA pool and an Ascend pool, both engines."""

from __future__ import annotations

TITLE = "Run both stacks: one job for the CUDA and Ascend pools, on Slurm and Kubernetes, routed by weight"


def run(ctx) -> bool:
    from accelport.pools.model import job_from_toml, load_pools
    from accelport.pools.render import render_admin, render_for_pool
    from accelport.pools.router import decide, ramp_shares
    from accelport.pools.validate import sbatch_problems, validate_object

    folder = ctx.examples / "pools"
    job = job_from_toml(folder / "job.toml")
    pools = load_pools([folder / "cuda-pool.toml", folder / "ascend-pool.toml"])
    out = ctx.workdir / "pools"
    failures = 0
    for pool in pools:
        for engine in ("slurm", "kubernetes"):
            artefact = render_for_pool(job, pool.on(engine))
            (out / engine).mkdir(parents=True, exist_ok=True)
            (out / engine / artefact.filename).write_text(artefact.text)
            if artefact.kind == "sbatch":
                problems = sbatch_problems(artefact.text, artefact.filename)
            else:
                problems = [p for obj in artefact.objects for p in validate_object(obj)]
            failures += bool(problems)
            verdict = ctx.style.green("valid") if not problems else ctx.style.red(f"{len(problems)} problem(s)")
            ctx.say(f"  {pool.name:7} {engine:10} {artefact.filename:28} {verdict}")
            for problem in problems:
                ctx.say(f"    {problem}")
    admin = render_admin([p.on("kubernetes") for p in pools], job)
    for artefact in admin:
        (out / "admin").mkdir(parents=True, exist_ok=True)
        (out / "admin" / artefact.filename).write_text(artefact.text)
    ctx.say(f"  admin artefacts: {', '.join(a.filename for a in admin)}")
    ascend_script = (out / "slurm" / f"{job.name}-ascend.sbatch").read_text()
    export = next(line.strip() for line in ascend_script.splitlines() if line.strip().startswith("ASCEND_RT_VISIBLE_DEVICES="))
    ctx.say(f"  Ascend on Slurm sets its own devices variable per node, from its allocation: {export.split(' || ')[0]}")
    decision = decide(job, pools)
    ctx.say(f"  route {job.id}: {decision.pool} ({decision.reason})")
    shares = ramp_shares([decide(job.with_id(f"{job.id}-{i}"), pools) for i in range(2000)])
    ctx.say("  2000 simulated jobs: " + ", ".join(f"{name} {share:.1%}" for name, share in shares.items()))
    ctx.results["pools"] = {"decision": decision.to_dict(), "shares": shares, "invalid": failures}
    return failures == 0 and decision.pool is not None

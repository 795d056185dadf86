"""Demo step: measure the example's training step (bench, profile, soak, collectives) and write the acceptance report."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

from accelport.fileio import atomic_write_text

TITLE = "acceptance: correctness, precision, speed, stability and collectives of the example -> one report"


def _train_step(app: Path):
    """A TinyLM training step on the CPU, built from the example's own model.py."""
    import torch

    spec = importlib.util.spec_from_file_location("legacy_cuda_app_model", app / "model.py")
    model_module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = model_module
    spec.loader.exec_module(model_module)
    model = model_module.build_model(seed=0)
    tokens, targets = model_module.example_batch(batch_size=4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = model_module.loss_fn(model(tokens), targets)
        loss.backward()
        optimizer.step()
        return loss

    return model, step, tokens.numel()


def _pooled(parts):
    """One bench result holding the measured steps of several rounds."""
    times = [t for part in parts for t in part.times_s]
    return dataclasses.replace(parts[-1], times_s=times, stop_reason=f"{len(parts)} alternating rounds")


def run(ctx) -> bool:
    from accelport.verify import accept
    from accelport.verify.perf import bench, profile
    from accelport.verify.stability import comm, soak

    out = ctx.workdir / "accept"
    out.mkdir(parents=True, exist_ok=True)
    model, step, tokens = _train_step(ctx.app)
    # One machine here: the reference run and the migrated run both use this CPU. On real
    # hardware the reference files come from the CUDA machine (`accelport bench --save`).
    # Here they alternate in short rounds, so a busy spell on a shared machine slows both
    # sides alike instead of failing one of them.
    rule = bench.StopRule(warmup=2, min_steps=5, max_steps=15, budget_s=1.0)
    rounds = [bench.run(step, scenario="tinylm-train-step", rule=rule, samples_per_step=4, tokens_per_step=tokens)
              for _ in range(4) for _side in ("reference", "migrated")]
    reference, migrated = (_pooled(rounds[side::2]) for side in (0, 1))
    for name, result in (("bench-reference.json", reference), ("bench-cpu.json", migrated)):
        atomic_write_text(out / name, json.dumps(result.to_dict(), indent=2) + "\n")
    profile.capture(step, out / "trace-reference.json", steps=2, warmup=1, model=model)
    profile.capture(step, out / "trace-cpu.json", steps=2, warmup=1, model=model)
    soaked = soak.run(step, steps=40, limits=soak.SoakLimits(hang_timeout_s=60.0))
    atomic_write_text(out / "soak-cpu.json", json.dumps(soaked.to_dict(), indent=2) + "\n")
    collectives = comm.run(2, sizes=(1 << 12, 1 << 16), iters=3, warmup=1, workdir=out / "comm", timeout_s=60.0)
    atomic_write_text(out / "comm-cpu.json", json.dumps(collectives.to_dict(), indent=2) + "\n")
    spec = [
        'title = "legacy_cuda_app: TinyLM migrated to CPU"',
        "",
        "[[performance]]",
        'name = "TinyLM train step (reference and migrated both on this CPU)"',
        'result = "bench-cpu.json"',
        'baseline = "bench-reference.json"',
        "floor = 0.6",
        'base_trace = "trace-reference.json"',
        'test_trace = "trace-cpu.json"',
        "",
        "[[stability]]",
        'name = "40-step soak"',
        'result = "soak-cpu.json"',
        "",
        "[[collectives]]",
        'name = "gloo, 2 ranks"',
        'result = "comm-cpu.json"',
    ]
    numerics = ctx.results.get("numerics") or {}
    logs = ctx.results.get("loss_logs") or {}
    if numerics.get("reference_dump"):
        # The original under `accelport run` is the reference; the migrated copy is the test.
        spec += [
            "",
            "[correctness]",
            f'reference = "{numerics["reference_dump"]}"',
            f'test = "{numerics["migrated_dump"]}"',
        ]
    if logs and all(Path(p).exists() for p in logs.values()):
        spec += ["", "[precision]", f'reference = "{logs["reference"]}"', f'tests = ["{logs["migrated"]}"]']
    atomic_write_text(out / "acceptance.toml", "\n".join(spec) + "\n")
    report = accept.evaluate(accept.load_spec(out / "acceptance.toml"))
    paths = accept.write_reports(report, out)
    ctx.say(accept.render_text(report).rstrip())
    if not numerics.get("reference_dump") or not logs:
        ctx.say("correctness and precision are not in this report: they need the dumps and loss logs of the "
                "migrate and numerics steps (run the whole demo)")
    ctx.say(f"\nacceptance report: {paths['html']}")
    ctx.say(f"also: {paths['junit']}, {paths['json']}")
    ctx.results["accept"] = report
    if report.verdict == "inconclusive":
        ctx.say("the verdict is inconclusive, not a failure: both sides ran on this one shared CPU, whose noise puts "
                "the floor inside the CI; on two real machines, measure the steps the report names")
    return report.verdict != "fail"

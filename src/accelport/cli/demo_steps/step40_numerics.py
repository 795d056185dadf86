"""Demo step 40: prove the numerics. Dump the original and the migrated run, compare them, then find a planted fault."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

TITLE = "Verify numerics: dump the original and the migrated run, compare, find a planted fault"

# The fault planted in a copy of the migrated app: a LayerNorm built with another eps.
_FAULT_FROM = "self.ln2 = nn.LayerNorm(d_model)"
_FAULT_TO = "self.ln2 = nn.LayerNorm(d_model, eps=1e-2)"


def _accelport(*args: str) -> list[str]:
    return [sys.executable, "-m", "accelport", *args]


def _dump_commands(ctx, runs: list[tuple[Path, list[str], Path]]) -> bool:
    """Run `accelport dump --output-dir OUT -- COMMAND` for each (OUT, COMMAND, CWD), side by side."""
    env = dict(os.environ, PYTHONHASHSEED="0")
    started = []
    for out, command, cwd in runs:
        errors = out.with_suffix(".stderr.txt")
        with errors.open("w") as handle:
            process = subprocess.Popen(
                _accelport("dump", "-q", "--output-dir", str(out), "--", *command),
                cwd=cwd,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=handle,
            )
        started.append((process, errors, command))
    ok = True
    for process, errors, command in started:
        if process.wait() != 0:
            last = errors.read_text().strip().splitlines()[-1:] or [""]
            ctx.say(
                ctx.style.red(
                    f"  {' '.join(command[:4])} ... failed ({process.returncode}): {last[0]}"
                )
            )
            ok = False
    return ok


def _with_commands(ctx, work: Path, migrated: Path) -> tuple[Path, Path, Path] | None:
    """The issue's route: the original under `accelport run`, the migrated copy as it is, and a faulty copy."""
    args = ["train.py", "--steps", "2", "--batch-size", "4"]
    ref, test, fault = work / "original", work / "migrated", work / "fault"
    faulty = work / "faulty_app"
    shutil.copytree(migrated, faulty, ignore=shutil.ignore_patterns("__pycache__"))
    model = faulty / "model.py"
    text = model.read_text()
    if _FAULT_FROM not in text:
        return None
    model.write_text(text.replace(_FAULT_FROM, _FAULT_TO, 1))
    ctx.say(
        "  dumping, side by side: the original example under `accelport run` (CUDA calls redirected),"
    )
    ctx.say(f"  the migrated copy {migrated}, and a copy of it with a planted fault: {_FAULT_TO}")
    runs = [
        (
            ref,
            [*_accelport("run", "--quiet", "--inventory", "-", "--"), sys.executable, *args],
            ctx.app,
        ),
        (test, [sys.executable, *args], migrated),
        (fault, [sys.executable, *args], faulty),
    ]
    return (ref, test, fault) if _dump_commands(ctx, runs) else None


def _in_process(ctx, work: Path) -> tuple[Path, Path, Path]:
    """Without `accelport migrate`/`run`: one training step of the example model, captured in this process."""
    import torch

    from accelport.verify import capture

    spec = importlib.util.spec_from_file_location("accelport_demo_tinylm", ctx.app / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def step(folder: Path, eps: float | None = None) -> Path:
        model = module.build_model(seed=0).eval()
        if eps is not None:
            model.blocks[1].ln2.eps = eps
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        tokens, targets = module.example_batch(batch_size=4)
        with capture(folder, steps="0..1"):
            for _ in range(2):
                optimizer.zero_grad()
                module.loss_fn(model(tokens), targets).backward()
                optimizer.step()
        return folder

    ctx.say(
        "  `accelport migrate`/`accelport run` results are not in this demo run: dumping two training steps"
    )
    ctx.say(
        "  of examples/legacy_cuda_app/model.py in this process instead (REF, then TEST, on the CPU)"
    )
    ref = step(work / "original")
    test = step(work / "migrated")
    ctx.say("  planted a fault: blocks.1.ln2 built with eps=1e-2 instead of 1e-5")
    fault = step(work / "fault", eps=1e-2)
    return ref, test, fault


def run(ctx) -> bool:
    if importlib.util.find_spec("torch") is None:
        ctx.say(ctx.style.red("  torch is not installed: pip install 'accelport[torch]'"))
        return False
    from accelport.verify.numerics.compare import compare_dumps
    from accelport.verify.numerics.numerics_report import render_html, where

    work = ctx.workdir / "numerics"
    work.mkdir(parents=True, exist_ok=True)
    migrated = ctx.results.get("migrated_app")
    have_run = importlib.util.find_spec("accelport.cli.run") is not None
    paths = _with_commands(ctx, work, Path(migrated)) if migrated and have_run else None
    if paths is None:
        if migrated and have_run:
            ctx.say(
                ctx.style.yellow(
                    "  the command route did not complete; falling back to the in-process dumps"
                )
            )
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        paths = _in_process(ctx, work)
    ref, test, fault = paths
    with compare_dumps(ref, test) as same:
        counts = same.counts
        verdict = ctx.style.green("PASS") if same.passed else ctx.style.red("FAIL")
        ctx.say(
            f"  compare original vs migrated: {verdict}  ({counts['matched']} records aligned, {counts['failed']} differ)"
        )
        (work / "compare-migrated.html").write_text(render_html(same))
    with compare_dumps(ref, fault) as faulty:
        first = faulty.first_divergence
        verdict = (
            ctx.style.red("FAIL")
            if not faulty.passed
            else ctx.style.yellow("PASS (the fault was missed)")
        )
        ctx.say(
            f"  compare original vs faulty:   {verdict}  ({faulty.counts['failed']} records differ)"
        )
        if first:
            ctx.say(f"  first divergence: {where(first)}")
            ctx.say(f"    {first.get('cause')}")
            if first.get("args_ref") is not None:
                ctx.say(
                    f"    arguments: REF {first['args_ref']['a'][-1]} vs TEST {first['args_test']['a'][-1]}"
                )
        (work / "compare-fault.html").write_text(render_html(faulty))
    ctx.results["numerics"] = {
        "reference_dump": ref,
        "migrated_dump": test,
        "same": same.passed,
        "fault_found": not faulty.passed,
        "first_divergence": first,
    }
    ctx.say(f"  reports: {work / 'compare-migrated.html'}, {work / 'compare-fault.html'}")
    caught = (
        bool(first)
        and "ln2" in (first.get("module") or "")
        and "layer_norm" in (first.get("op") or "")
    )
    return same.passed and not faulty.passed and caught

"""Demo step: migrate a copy of the example, train it on the available device, run the original under `accelport run`."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

from accelport.fileio import atomic_write_text

TITLE = "migrate + run: rewrite the example into device-agnostic PyTorch, train it; run the original unmodified"
STEPS = ["--steps", "8", "--batch-size", "4"]


def _copy(source: Path, target: Path) -> Path:
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return target


def _losses(log: Path) -> list[float]:
    if not log.exists():
        return []
    with log.open() as handle:
        return [float(row["loss"]) for row in csv.DictReader(handle)]


def _trend(losses: list[float]) -> str:
    return f"loss {losses[0]:.3f} -> {losses[-1]:.3f} over {len(losses)} steps" if losses else "no loss logged"


def _falls(losses: list[float]) -> bool:
    return len(losses) >= 2 and losses[-1] < losses[0]


def _start(command: list[str], cwd: Path, errors: Path) -> subprocess.Popen:
    """Start a command; its stderr goes to a file (two pipes read one after the other could stall)."""
    with errors.open("w") as handle:
        return subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=handle)


def _tail(text: str, lines: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def run(ctx) -> bool:
    from accelport.migrate import Options, migrate
    from accelport.migrate.render import render_json, render_markdown, render_summary
    from accelport.migrate.writing import write_files

    migrated = _copy(ctx.app, ctx.workdir / "migrated_app")
    result = migrate([str(migrated)], options=Options(whole_file=True), jobs=1)
    write_files(result.files)
    atomic_write_text(ctx.workdir / "migrate-changes.json", render_json(result))
    atomic_write_text(ctx.workdir / "migrate-changes.md", render_markdown(result))
    ctx.results["migrated_app"] = migrated
    ctx.say(render_summary(result, ctx.style, written=True).rstrip())
    ctx.say(f"change list: {ctx.workdir / 'migrate-changes.md'}; migrated copy: {migrated}")
    ok = not result.failed_files and not result.skipped

    # The migrated copy trains, and the unmodified original runs under `accelport run`, side by side.
    migrated_log = ctx.workdir / "migrated-loss.csv"
    original = _copy(ctx.app, ctx.workdir / "original_app")
    original_log = ctx.workdir / "original-under-run-loss.csv"
    inventory = ctx.workdir / "run-inventory.json"
    for log in (migrated_log, original_log):
        log.unlink(missing_ok=True)
    trained_log, run_log = ctx.workdir / "migrated-train.log", ctx.workdir / "original-under-run.log"
    trained = _start([sys.executable, "train.py", *STEPS, "--log", str(migrated_log)], migrated, trained_log)
    under_run = _start([sys.executable, "-m", "accelport", "run", "--quiet", "--inventory", str(inventory), "--",
                        sys.executable, "train.py", *STEPS, "--log", str(original_log)], original, run_log)
    trained.wait()
    under_run.wait()
    trained_err, run_err = trained_log.read_text(), run_log.read_text()

    ctx.results["loss_logs"] = {"reference": original_log, "migrated": migrated_log}
    losses = _losses(migrated_log)
    if trained.returncode != 0 or not _falls(losses):
        ctx.say(ctx.style.red(f"the migrated copy did not train (exit {trained.returncode}):\n{_tail(trained_err)}"))
        ok = False
    else:
        ctx.say(ctx.style.green(f"migrated copy trained on the available device: {_trend(losses)}"))
    losses = _losses(original_log)
    if under_run.returncode != 0 or not _falls(losses):
        ctx.say(ctx.style.red(f"the original did not train under accelport run (exit {under_run.returncode}):\n{_tail(run_err)}"))
        return False
    apis = json.loads(inventory.read_text())["apis"]
    ctx.say(ctx.style.green(f"original, unmodified, under `accelport run`: {_trend(losses)}"))
    ctx.say(f"{len(apis)} CUDA APIs redirected at run time (dynamic inventory: {inventory}):")
    for api in apis:
        site = api["sites"][0]
        ctx.say(f"  {api['api']:<36} -> {api['to']}  [{site['path']}:{site['line']}, {api['calls']} call(s)]")
    return ok

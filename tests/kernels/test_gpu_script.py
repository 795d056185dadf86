"""benchmarks/gpu_kernels.sh: its dry run executes every step it would run on a GPU, on CPU with tiny shapes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from accelport.kernels import get

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_kernels.sh"


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable, **env}
    for name in ("TRITON_INTERPRET", "DEVICE", "DTYPE", "OPS", "CASES", "MAX_CONFIGS", "BUDGET"):
        if name not in env:
            full.pop(name, None)  # the script's own defaults and its commands' own interpreter setup
    return subprocess.run(["bash", str(SCRIPT)], cwd=REPO, env=full, capture_output=True, text=True, timeout=300)


def test_gpu_script_parses():
    proc = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_gpu_script_dry_run_runs_every_step_on_cpu_with_tiny_shapes(tmp_path):
    proc = _run(tmp_path, DRY_RUN="1")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    steps = dict(line.split() for line in (tmp_path / "steps.txt").read_text().splitlines())
    assert steps == {"doctor": "0", "test": "0", "bench": "0", "model-step": "0", "tune": "0", "bench-tuned": "0"}
    test = json.loads((tmp_path / "test.json").read_text())
    assert test["passed"] and test["interpreter"] and test["checks"] > 0
    assert {(r["op"], r["dtype"]) for r in test["results"]} == {("swiglu", "float32")}
    assert test["ops"]["swiglu"]["exit"] == 0 and test["ops"]["swiglu"]["seconds"] > 0  # one process per operator
    step = json.loads((tmp_path / "model-step.json").read_text())
    assert set(step["results"]) == {"torch", "patch", "enable"} and step["device"] == "cpu"
    assert all(step["results"][m]["loss_gap"] < 1e-4 for m in ("patch", "enable"))  # the kernels trained the same step
    assert step["results"]["enable"]["taken_over"]["aten::mm"] > 0 and "layers.0.mlp" in step["results"]["patch"]["replaced"]
    assert step["results"]["torch"]["peak_mib"] is None  # no device memory to measure on CPU
    bench = json.loads((tmp_path / "bench-tuned.json").read_text())
    assert bench["device"] == "cpu" and {r["op"] for r in bench["results"]} == {"swiglu"} and bench["targets"]
    small = {c.label for c in get("swiglu").cases}
    assert {r["case"] for r in bench["results"]} <= small  # the interpreter's tiny matrix, not the GPU one
    tuned = json.loads((tmp_path / "tuned.json").read_text())
    assert tuned["entries"] and tuned["device_key"] == "cpu"
    trials = json.loads((tmp_path / "tune.json").read_text())["trials"]
    assert len({(t["case"], t["dtype"]) for t in trials}) == len(trials)  # MAX_CONFIGS=1: one candidate per case
    summary = (tmp_path / "summary.txt").read_text()
    assert "validation: passed" in summary and "target swiglu peak >= 0.8: None not measurable here" in summary
    assert "model step (cpu, float32): torch" in summary and "not a GPU measurement" in summary


def test_gpu_script_skips_steps_the_budget_cannot_hold_and_fails(tmp_path):
    (tmp_path / "tuned.json").write_text("{}")  # an earlier run's table must not survive into this one
    proc = _run(tmp_path, DRY_RUN="1", BUDGET="19")  # 19 s less the 15 s kept back leaves no step 5 s
    assert proc.returncode == 1
    steps = (tmp_path / "steps.txt").read_text().splitlines()
    assert steps == ["doctor skipped", "test skipped", "bench skipped", "model-step skipped", "tune skipped"]
    assert "SKIPPED, the 19s budget is spent" in proc.stdout
    assert not (tmp_path / "tuned.json").exists()
    assert "validation: no result" in (tmp_path / "summary.txt").read_text()

"""benchmarks/gpu_kernels.sh runs every step it would run on a GPU, here on CPU with one operator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_gpu_script_runs_end_to_end_on_cpu(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "DEVICE": "cpu", "OPS": "swiglu", "DTYPE": "float32", "MAX_CONFIGS": "2", "PYTHON": sys.executable}
    env.pop("TRITON_INTERPRET", None)  # the script's commands set up the interpreter themselves
    proc = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_kernels.sh")], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    steps = dict(line.split() for line in (tmp_path / "steps.txt").read_text().splitlines())
    assert steps == {"doctor": "0", "test": "0", "bench": "0", "tune": "0", "bench-tuned": "0"}
    test = json.loads((tmp_path / "test.json").read_text())
    assert test["passed"] and test["interpreter"] and test["checks"] > 0
    bench = json.loads((tmp_path / "bench-tuned.json").read_text())
    assert {r["op"] for r in bench["results"]} == {"swiglu"} and bench["targets"]
    tuned = json.loads((tmp_path / "tuned.json").read_text())
    assert tuned["entries"] and tuned["device_key"] == "cpu"
    summary = (tmp_path / "summary.txt").read_text()
    assert "validation: passed" in summary and "target swiglu peak >= 0.8: None not measurable here" in summary

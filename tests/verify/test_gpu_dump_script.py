"""benchmarks/gpu_dump.py's dry run: every check it would run on a lent GPU passes on the CPU with tiny sizes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_dry_run_passes_every_check_and_reports_both_statistics_paths(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    env.pop("TRITON_INTERPRET", None)  # the script sets it itself for a dry run
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_dump.py"), "--out", str(tmp_path), "--dry-run"],
        capture_output=True, text=True, env=env, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["ok"] and result["dry_run"] and result["device"] == "cpu"
    assert set(result["checks"]) == {"device_capture", "fp32_vs_cpu", "bf16_autocast_vs_cpu", "weight_plus_0.05", "gelu_scaled_1.01", "stats_kernel"}
    assert result["checks"]["stats_kernel"]["cases"] == 7 and not result["checks"]["stats_kernel"]["mismatches"]
    [timing] = result["timing"]
    for key in ("plain_step_ms", "statistics_step_ms", "statistics_torch_ops_step_ms", "records_per_step"):
        assert timing[key] > 0, key

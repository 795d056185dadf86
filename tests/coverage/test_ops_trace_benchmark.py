"""benchmarks/ops_trace.py runs, in its small mode, and reports what it promises."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_small_mode_runs_and_reports_every_field(subprocess_env):
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "ops_trace.py"), "--small"],
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["benchmark"] == "ops_trace" and report["size"] == "small" and report["targets"] is None
    big, cpu = report["trace_1b"], report["cpu_step_small"]
    assert big["strategy"] == "meta"
    for key in ("seconds", "warm_seconds", "peak_rss_mb", "rss_after_import_torch_mb"):
        assert big[key] > 0, key
    assert big["peak_rss_mb"] >= big["rss_after_import_torch_mb"]
    assert cpu["seconds"] > 0 and cpu["peak_rss_mb"] > 0 and report["meta_trace_small_seconds"] > 0
    # The small pair is the Llama architecture at two sizes: same operators, a measured size ratio.
    assert big["parameters"] > 1_000_000 and cpu["parameters"] > 10_000
    assert cpu["size_ratio"] == round(big["parameters"] / cpu["parameters"], 1) and cpu["size_ratio"] > 10
    assert big["calls"] > big["operators"] > 30
    assert report["small_meta_ops_equal_cpu_ops"] is True and report["ops_1b_equal_ops_small"] is True

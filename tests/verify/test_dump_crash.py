"""A dump killed with SIGKILL mid-run stays readable up to its last flush, and compare says it is truncated."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from accelport.verify.numerics import dumpfile
from accelport.verify.numerics.compare import compare_dumps

REPO = Path(__file__).resolve().parents[2]

# Trains TinyLM for STEPS steps under a capture (STEPS=0: until killed).
SCRIPT = """
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("m", {model!r})
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
from accelport.verify import capture
steps = int(sys.argv[2])
model = m.build_model(seed=0).eval()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
tokens, targets = m.example_batch(batch_size=2, seq_len=16)
with capture(sys.argv[1], tensors=True):
    step = 0
    while steps == 0 or step < steps:
        m.loss_fn(model(tokens), targets).backward()
        opt.step(); opt.zero_grad(); step += 1
"""


def run_script(tmp_path: Path, folder: Path, steps: int) -> subprocess.Popen:
    script = tmp_path / "train_forever.py"
    script.write_text(SCRIPT.format(model=str(REPO / "examples" / "legacy_cuda_app" / "model.py")))
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    return subprocess.Popen(
        [sys.executable, str(script), str(folder), str(steps)], env=env, stderr=subprocess.PIPE
    )


@pytest.mark.slow
def test_kill_9_leaves_a_readable_dump_that_compare_reports_truncated(tmp_path):
    ref = tmp_path / "ref"
    done = run_script(tmp_path, ref, 8)
    assert done.wait(timeout=120) == 0, done.stderr.read().decode()

    killed = tmp_path / "killed"
    proc = run_script(tmp_path, killed, 0)
    manifest = killed / dumpfile.MANIFEST
    deadline = time.monotonic() + 120
    # Wait until step 1 has been flushed (step 0 complete), then kill mid-step.
    while time.monotonic() < deadline:
        if manifest.exists() and b'"step":1' in manifest.read_bytes():
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("the capturing process never flushed step 1")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    info = dumpfile.DumpInfo(killed, {})
    recs = list(dumpfile.iter_records(killed, info))
    assert info.truncated and not info.end
    assert recs and all(isinstance(r, dict) for r in recs)
    assert {0, 1} <= {r["step"] for r in recs if r.get("k") == "op"}
    lines = manifest.read_bytes().split(b"\n")
    assert (
        len(recs) >= len([line for line in lines[1:] if line.strip()]) - 1
    )  # at most the cut line is lost

    with compare_dumps(ref, killed) as result:
        data = result.to_dict()
    assert data["truncated"]["test"] is True and data["truncated"]["ref"] is False
    assert data["verdict"] == "fail" and any("truncated" in r for r in data["reasons"])
    assert data["counts"]["failed"] == 0 and data["counts"]["matched"] > 100
    assert data["counts"]["after_truncation"] > 0
    with compare_dumps(ref, killed, allow_truncated=True) as result:
        assert result.passed
    json.dumps(data)  # the report is plain JSON

"""inventory and migrate work on a machine with no torch installed (users migrate before they install a vendor torch)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "legacy_cuda_app"

# `sys.modules["torch"] = None` makes every `import torch` (and triton) raise ImportError, as on a bare machine.
RUN = """
import sys
sys.modules["torch"] = None
sys.modules["triton"] = None
from accelport.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RUN, *args], capture_output=True, text=True, timeout=120)


def test_inventory_runs_without_torch():
    result = _run("inventory", str(EXAMPLE), "--format", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["summary"]["findings"] > 0


def test_migrate_runs_without_torch(tmp_path):
    copy = tmp_path / "app"
    subprocess.run(["cp", "-r", str(EXAMPLE), str(copy)], check=True)
    result = _run("migrate", str(copy / "train.py"), str(copy / "utils.py"), "--diff")
    assert result.returncode in (0, 1), result.stderr
    assert "torch.accelerator" in result.stdout
    assert "Traceback" not in result.stderr


def test_rules_and_backends_run_without_torch():
    assert _run("rules", "AP1101").returncode == 0
    assert _run("backends", "npu").returncode == 0


def test_torch_commands_without_torch_are_one_line_exit_2():
    """kernels list/test and comm need torch: one line saying how to install it, not a traceback
    (comm's ranks are child processes: without the check each would fail on its own)."""
    for args in (("kernels", "list"), ("kernels", "test", "rms_norm"), ("comm", "--ranks", "2")):
        result = _run(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert f"accelport {args[0]} needs torch; install it with `pip install 'accelport[torch]'`" in result.stderr

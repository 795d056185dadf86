"""The example app end to end: migrated it trains here, the original fails plainly and trains under
`accelport run`, and migrated code picks a fake PrivateUse1 accelerator with no edits."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
TRAIN = ["train.py", "--steps", "6", "--batch-size", "4"]


def python(*args: str, cwd: Path, timeout: int = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def losses(log: Path) -> list[float]:
    with log.open() as handle:
        return [float(row["loss"]) for row in csv.DictReader(handle)]


def assert_loss_falls(values: list[float]) -> None:
    assert len(values) == 6
    assert sum(values[-3:]) / 3 < 0.8 * (sum(values[:3]) / 3), values


def test_migrated_example_trains_on_this_machine(migrated_app, tmp_path):
    log = tmp_path / "migrated.csv"
    done = python(*TRAIN, "--log", str(log), cwd=migrated_app)
    assert done.returncode == 0, done.stderr[-2000:]
    assert_loss_falls(losses(log))
    assert "on cpu" in done.stdout


def test_original_fails_plainly_and_trains_under_accelport_run(app_copy, tmp_path):
    plain = python(*TRAIN, "--log", str(tmp_path / "plain.csv"), cwd=app_copy)
    assert plain.returncode != 0
    assert "Torch not compiled with CUDA enabled" in plain.stderr

    log, inventory = tmp_path / "run.csv", tmp_path / "run.json"
    run = python("-m", "accelport", "run", "--inventory", str(inventory), "--", sys.executable, *TRAIN, "--log", str(log), cwd=app_copy)
    assert run.returncode == 0, run.stderr[-2000:]
    assert_loss_falls(losses(log))
    assert (app_copy / "train.py").read_text() == (Path(__file__).resolve().parents[2] / "examples/legacy_cuda_app/train.py").read_text()
    # Each redirected API is logged once, with the line that first used it.
    logged = [line for line in run.stderr.splitlines() if line.startswith("accelport run: Tensor.cuda ->")]
    assert logged == ["accelport run: Tensor.cuda -> Tensor.to(cpu)  [train.py:75]"]
    data = json.loads(inventory.read_text())
    apis = {a["api"]: a for a in data["apis"]}
    assert apis["Tensor.cuda"]["rule_id"] == "AP1004"
    assert apis["Tensor.cuda"]["calls"] == 6 and apis["Tensor.cuda"]["sites"] == [{"path": "train.py", "line": 75, "calls": 6}]
    assert apis["torch.cuda.Event"]["sites"][0]["path"] == "utils.py"
    assert {"Module.cuda", "Tensor.is_cuda", "torch.amp.autocast", "torch.amp.GradScaler", "torch.cuda.synchronize"} <= set(apis)
    assert data["exit_code"] == 0 and data["devices"] == ["cpu"]


FAKE_ACCELERATOR = textwrap.dedent(
    """
    import json, sys, types
    import torch

    # A Python-only PrivateUse1 backend: enough for device selection, not for tensors on it.
    torch.utils.rename_privateuse1_backend("fakenpu")
    module = types.ModuleType("torch.fakenpu")
    seeded = []
    module.is_available = lambda: True
    module.device_count = lambda: 1
    module.current_device = lambda: 0
    module._is_in_bad_fork = lambda: False
    module.manual_seed_all = seeded.append
    module.get_amp_supported_dtype = lambda: [torch.float16, torch.bfloat16]
    module.is_bf16_supported = lambda including_emulation=True: False
    torch._register_device_module("fakenpu", module)
    torch.utils.generate_methods_for_privateuse1_backend()

    sys.path.insert(0, sys.argv[1])
    sys.argv = ["train.py"]
    import train, utils
    import accelport.compat

    print(json.dumps({"argparse_default": train.parse_args().device}), flush=True)
    utils.seed_everything(7)
    with torch.amp.autocast(train.DEVICE.type, enabled=False) as autocast:
        pass
    print(json.dumps({
        "train_device": str(train.DEVICE),
        "utils_device": str(utils.DEVICE),
        "autocast_device": autocast.device,
        "scaler_device": torch.amp.GradScaler(train.DEVICE.type, enabled=False)._device,
        "seeded": seeded,
        "bf16": accelport.compat.is_bf16_supported(utils.DEVICE),
        "visible": accelport.compat.visible_devices_var(),
    }))
    """
)


def test_migrated_code_selects_a_fake_privateuse1_accelerator(migrated_app, app_copy, tmp_path):
    script = tmp_path / "fake_accelerator.py"
    script.write_text(FAKE_ACCELERATOR)
    done = python(str(script), str(migrated_app), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    first, seen = (json.loads(line) for line in done.stdout.strip().splitlines()[-2:])
    assert first == {"argparse_default": "fakenpu"}
    assert seen == {
        "train_device": "fakenpu",
        "utils_device": "fakenpu",
        "autocast_device": "fakenpu",
        "scaler_device": "fakenpu",
        "seeded": [7],  # torch.manual_seed reaches the accelerator, once: the repeated CUDA seed is dropped
        "bf16": False,  # asked of the backend's own module
        "visible": "CUDA_VISIBLE_DEVICES",  # an unknown vendor has no variable of its own
    }
    # The unmigrated code knows only CUDA: its default stays "cuda" on the same machine.
    original = python(str(script), str(app_copy), cwd=tmp_path)
    assert json.loads(original.stdout.strip().splitlines()[0]) == {"argparse_default": "cuda"}

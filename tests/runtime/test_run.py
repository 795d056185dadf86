"""`accelport run` and `import accelport.auto`: what the redirect shim promises, seen from a real program."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PROGRAM = textwrap.dedent(
    """
    import json, os, sys
    import torch

    @torch.jit.script
    def double(x):
        return x * 2

    path = os.path.join(sys.argv[1], "cuda_resnet50.pt")
    torch.save(torch.ones(2, dtype=torch.float64), path)
    loaded = torch.load(path, map_location="cuda")
    moved = [torch.ones(2, dtype=torch.float64).cuda() for _ in range(3)]
    made = torch.zeros(2, device="cuda:0")
    ranked = torch.nn.Linear(2, 2).to(0)
    with torch.cuda.amp.autocast(dtype=torch.bfloat16):
        product = torch.ones(4, 4) @ torch.ones(4, 4)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(); end.record(); torch.cuda.synchronize()
    print(json.dumps({
        "scripted": type(double).__name__,
        "scripted_result": double(torch.ones(1)).tolist(),
        "legacy_type_dtype": str(torch.cuda.DoubleTensor.dtype),
        "loaded": [str(loaded.dtype), str(loaded.device)],
        "moved": [str(moved[0].dtype), str(moved[0].device)],
        "made": str(made.device),
        "ranked": str(ranked.weight.device),
        "autocast_dtype": str(product.dtype),
        "elapsed_ms_is_float": isinstance(start.elapsed_time(end), float),
        "files": sorted(os.listdir(sys.argv[1])),
        "available": torch.cuda.is_available(),
    }))
    """
)


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.slow
def test_redirects_without_touching_jit_dtypes_or_paths(tmp_path):
    (tmp_path / "program.py").write_text(PROGRAM)
    data = tmp_path / "data"
    data.mkdir()
    done = run("-m", "accelport", "run", "--inventory", "inventory.json", "--", sys.executable, "program.py", str(data), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "scripted": "ScriptFunction",  # torch.jit.script is never disabled
        "scripted_result": [2.0],
        "legacy_type_dtype": "torch.float64",  # torch.cuda.DoubleTensor is not swapped for a float32 type
        "loaded": ["torch.float64", "cpu"],
        "moved": ["torch.float64", "cpu"],
        "made": "cpu",
        "ranked": "cpu",  # model.to(rank): an index means a CUDA device
        "autocast_dtype": "torch.bfloat16",  # the dtype the program asked for
        "elapsed_ms_is_float": True,
        "files": ["cuda_resnet50.pt"],  # the path was not rewritten
        "available": False,
    }
    redirected = [line for line in done.stderr.splitlines() if line.startswith("accelport run: ")]
    assert "accelport run: Tensor.cuda -> Tensor.to(cpu)  [program.py:12]" in redirected
    assert "accelport run: torch.load(map_location) -> device cpu  [program.py:11]" in redirected
    assert sum(line.startswith("accelport run: Tensor.cuda ") for line in redirected) == 1  # once per API
    inventory = json.loads((tmp_path / "inventory.json").read_text())
    apis = {a["api"]: a for a in inventory["apis"]}
    assert apis["Tensor.cuda"]["calls"] == 3 and apis["Tensor.cuda"]["rule_id"] == "AP1004"
    assert apis["torch.cuda.Event"]["rule_id"] == "AP1105"
    assert apis["torch.amp.autocast"]["sites"] == [{"path": "program.py", "line": 15, "calls": 1}]
    assert inventory["processes"] == 1 and inventory["exit_code"] == 0


@pytest.mark.slow
def test_import_accelport_auto_redirects_in_process(tmp_path):
    script = "import accelport.auto\nimport torch\nprint(torch.ones(1).cuda().device, torch.cuda.device_count())\n"
    done = run("-c", script, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "cpu 0"
    assert "accelport run: Tensor.cuda -> Tensor.to(cpu)  [<string>:3]" in done.stderr


PINNING = textwrap.dedent(
    """
    import json
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    source = torch.arange(4.0)
    pinned = source.pin_memory()
    pinned.add_(1)  # a copy, as pinning makes one: the source is not changed through it
    batches = [b.tolist() for (b,) in DataLoader(TensorDataset(source), batch_size=2, pin_memory=True)]
    positional = [b.tolist() for (b,) in DataLoader(TensorDataset(source), 2, False, None, None, 0, None, True)]
    made = torch.zeros(2, pin_memory=True)
    print(json.dumps({"pinned": pinned.tolist(), "source": source.tolist(), "batches": batches,
                      "positional": positional, "made": made.tolist()}))
    """
)


@pytest.mark.slow
def test_pinning_without_an_accelerator_runs_with_the_same_values(tmp_path):
    (tmp_path / "pinning.py").write_text(PINNING)
    plain = run("pinning.py", cwd=tmp_path)
    if plain.returncode == 0:
        pytest.skip("this machine has an accelerator, so pinning works without the shim")
    assert "RuntimeError" in plain.stderr  # what torch does without an accelerator
    done = run("-m", "accelport", "run", "--inventory", "inventory.json", "--", sys.executable, "pinning.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "pinned": [1.0, 2.0, 3.0, 4.0],
        "source": [0.0, 1.0, 2.0, 3.0],
        "batches": [[0.0, 1.0], [2.0, 3.0]],
        "positional": [[0.0, 1.0], [2.0, 3.0]],
        "made": [0.0, 0.0],
    }
    assert "accelport run: Tensor.pin_memory -> a pageable copy (no accelerator to pin for)  [pinning.py:7]" in done.stderr
    calls = {api["api"]: (api["rule_id"], api["calls"]) for api in json.loads((tmp_path / "inventory.json").read_text())["apis"]}
    assert calls == {"Tensor.pin_memory": ("AP1605", 1), "pin_memory=True": ("AP1605", 3)}


def test_exit_code_of_the_program_is_passed_on(cli, tmp_path):
    result = cli("run", "--inventory", tmp_path / "inv.json", "--", sys.executable, "-c", "import sys; sys.exit(3)")
    assert result.code == 3
    assert json.loads((tmp_path / "inv.json").read_text())["exit_code"] == 3


def test_no_command_or_missing_command_is_a_usage_error(cli, tmp_path):
    assert cli("run").code == 2
    missing = cli("run", "--inventory", "-", "--", str(tmp_path / "no-such-program"))
    assert missing.code == 2 and "command not found" in missing.err


@pytest.mark.slow
def test_a_device_this_machine_lacks_stops_the_program_with_one_line(tmp_path):
    done = run("-m", "accelport", "run", "--device", "npu", "--inventory", "-", "--", sys.executable, "-c", "import torch; print('ran')", cwd=tmp_path)
    assert done.returncode == 2
    assert "ran" not in done.stdout
    assert "accelport run: device npu: no such accelerator here (current accelerator: none)" in done.stderr
    assert "or choose the cpu device" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--device", "bogus", "--device bogus: not a device type; use one of cpu, cuda,"),
        ("--device", "npu:first", "--device npu:first: the index after ':' must be a number"),
        ("--inventory", "BLOCKER/inv.json", "--inventory BLOCKER/inv.json: cannot be created"),
        ("--inventory", "FOLDER", "--inventory FOLDER: is a directory"),
    ],
)
def test_bad_options_stop_before_the_program_starts(cli, tmp_path, option, value, expected):
    (tmp_path / "BLOCKER").write_text("a file, not a folder\n")
    (tmp_path / "FOLDER").mkdir()
    value = value.replace("BLOCKER", str(tmp_path / "BLOCKER")).replace("FOLDER", str(tmp_path / "FOLDER"))
    expected = expected.replace("BLOCKER", str(tmp_path / "BLOCKER")).replace("FOLDER", str(tmp_path / "FOLDER"))
    marker = tmp_path / "ran"
    extra = ["--inventory", "-"] if option == "--device" else []
    result = cli("run", option, value, *extra, "--", sys.executable, "-c", f"open({str(marker)!r}, 'w').close()")
    assert result.code == 2
    assert expected in result.err and result.err.count("\n") == 1 and "Traceback" not in result.err
    if value == "bogus":
        assert "npu" in result.err and "xpu" in result.err  # the valid device types are named
    assert not marker.exists()

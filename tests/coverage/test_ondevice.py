"""On the device: the live dispatcher of a (fake) PrivateUse1 backend, and smoke runs per dtype."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from accelport.coverage import Status, check_on_device, trace
from accelport.errors import UserError

FAKE = Path(__file__).resolve().parent / "fake_backend"

# Runs in a child process: renaming PrivateUse1 can happen once per process, and must not leak
# into the other tests. First the adapter's kernels alone, then with its boxed fallback, then
# without --target (the current accelerator).
CHILD = """
import json, sys
from accelport.cli import main
spec, knowledge, out = sys.argv[1:4]
base = ["--knowledge", knowledge, "ops", spec, "--on-device", "--format", "json"]
codes = [main([*base, "--target", "fakenpu", "-o", out + ".1"])]
import fakenpu_adapter
fakenpu_adapter.enable_fallback()
codes.append(main([*base, "--target", "fakenpu", "-o", out + ".2"]))
codes.append(main([*base, "-o", out + ".3"]))
print(json.dumps(codes))
"""


@pytest.fixture(scope="module")
def fake_backend_runs(tmp_path_factory, model_spec):
    import os

    out = tmp_path_factory.mktemp("ondevice") / "report"
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    env["PYTHONPATH"] = os.pathsep.join([str(FAKE), str(Path(__file__).resolve().parents[2] / "src"), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", CHILD, model_spec("tiny_lm"), str(FAKE / "fakenpu.toml"), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    codes = json.loads(done.stdout.strip().splitlines()[-1])
    reports = [json.loads(Path(f"{out}.{n}").read_text()) for n in (1, 2, 3)]
    return codes, reports


def _statuses(report: dict) -> dict[str, str]:
    return {op["op"]: op["status"] for op in report["targets"][0]["ops"]}


def test_live_dispatcher_sees_kernels_composites_and_gaps(fake_backend_runs):
    codes, reports = fake_backend_runs
    target = reports[0]["targets"][0]
    assert target["vendor"] == "fakenpu" and target["on_device"] and "PrivateUse1" in target["label"]
    statuses = _statuses(reports[0])
    assert statuses["mm"] == statuses["addmm"] == statuses["embedding"] == "native"
    assert statuses["gelu"] == "delegate"  # its structured gelu.out has a kernel
    assert statuses["scaled_dot_product_attention"] == "composite"
    assert statuses["native_layer_norm_backward"] == "missing"
    assert statuses["add.Tensor"] == "missing"  # add.out has no kernel either
    assert codes[0] == 1


def test_a_boxed_fallback_is_flagged_not_taken_for_support(fake_backend_runs):
    codes, reports = fake_backend_runs
    before, after = _statuses(reports[0]), _statuses(reports[1])
    assert after["native_layer_norm_backward"] == "fallback"
    assert after["add.Tensor"] == "fallback"
    assert after["mm"] == "native" and after["gelu"] == "delegate"
    assert "missing" not in after.values()
    assert {op for op, s in after.items() if s == "fallback"} == {op for op, s in before.items() if s == "missing"}
    assert codes[1] == 1  # a silent CPU fallback fails the check


def test_without_target_the_current_accelerator_is_checked(fake_backend_runs):
    codes, reports = fake_backend_runs
    assert reports[2]["targets"][0]["vendor"] == "fakenpu"
    assert _statuses(reports[2]) == _statuses(reports[1])
    assert codes[2] == 1


@torch.library.custom_op("accelport_test::fragile", mutates_args=())
def fragile(x: torch.Tensor) -> torch.Tensor:
    """A kernel that works for float32 and fails for float64: the smoke run must tell them apart."""
    if x.dtype == torch.float64:
        raise RuntimeError("no float64 kernel")
    return x.clone()


@fragile.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class UsesFragile(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fragile(self.lin(x)) + fragile(x.double()).float()


def test_smoke_run_finds_a_dtype_that_fails_on_the_device():
    traced = trace(lambda: (UsesFragile().eval(), (torch.randn(2, 4),)))
    report = check_on_device(traced, ["cpu"], run_smoke=True)
    verdicts = {v.op: v for v in report.targets[0].verdicts}
    smoke = verdicts["accelport_test::fragile"].smoke
    assert smoke["float32"] == "ok"
    assert smoke["float64"].startswith("error: RuntimeError: no float64 kernel")
    assert verdicts["addmm"].status is Status.NATIVE and verdicts["addmm"].smoke == {"float32,float32,float32": "ok"}
    assert report.failed


def test_smoke_run_of_a_training_step_passes_on_cpu(lm_meta):
    report = check_on_device(lm_meta, ["cpu"], run_smoke=True)
    target = report.targets[0]
    failures = {v.op: v.smoke for v in target.verdicts if v.smoke_failed}
    assert failures == {}
    assert all(v.smoke for v in target.verdicts)
    assert not report.failed and target.count(Status.MISSING) == 0


def test_on_device_without_an_accelerator_is_a_user_error(lm_meta):
    with pytest.raises(UserError, match="no accelerator in this process"):
        check_on_device(lm_meta, [None])

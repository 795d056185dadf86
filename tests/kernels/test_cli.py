"""`accelport kernels ...`: the thin CLI over the library, its output formats and exit codes."""

from __future__ import annotations

import json

import pytest

from accelport.kernels import OPERATOR_NAMES, bench, get, hardware


def test_list_names_every_operator(cli):
    result = cli("kernels", "list", "--format", "json")
    assert result.code == 0
    data = json.loads(result.out)
    assert [op["name"] for op in data] == list(OPERATOR_NAMES)
    assert next(op for op in data if op["name"] == "rms_norm")["implementations"] == ["reference", "triton", "triton-npu"]
    assert "softmax" in cli("kernels", "list").out


def test_test_command_validates_and_exits_by_verdict(cli):
    result = cli("kernels", "test", "swiglu", "--device", "cpu", "--dtype", "float32", "--format", "json")
    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert data["passed"] and data["interpreter"] and data["checks"] == 6 and data["lint"] == []
    table = cli("kernels", "test", "swiglu", "--device", "cpu", "--dtype", "bfloat16")
    assert table.code == 0 and "6 checks (Triton interpreter on CPU): 6 passed, 0 failed" in table.out


def test_test_command_fails_with_exit_1_when_a_check_fails(cli, monkeypatch):
    op = get("swiglu")
    monkeypatch.setattr(op.__class__, "implementation", lambda self, name, forced=True: lambda g, u: op.reference(g, u) * 1.01)
    result = cli("kernels", "test", "swiglu", "--device", "cpu", "--dtype", "float32", "--no-lint")
    assert result.code == 1 and "FAIL" in result.out


@pytest.mark.parametrize("args", [("kernels", "test", "conv"), ("kernels", "bench", "softmax", "--device", "cuda:7"), ("kernels", "hardware", "tpu")])
def test_bad_input_is_one_line_and_exit_2(cli, args):
    result = cli(*args)
    assert result.code == 2
    assert result.err.count("\n") == 1 and "Traceback" not in result.err


@pytest.mark.parametrize("command", ["test", "bench", "tune"])
def test_a_device_this_machine_lacks_is_one_line_exit_2_naming_the_way_out(cli, command):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device, so --device cuda is valid here")
    result = cli("kernels", command, "softmax", "--device", "cuda", "--dtype", "float32")
    assert result.code == 2 and result.out == ""
    assert result.err.count("\n") == 1 and "Traceback" not in result.err
    assert "--device cuda" in result.err and "no cuda device" in result.err and "--device cpu" in result.err
    bogus = cli("kernels", command, "softmax", "--device", "bogus", "--dtype", "float32")
    assert bogus.code == 2 and bogus.out == "" and bogus.err.count("\n") == 1
    assert "--device bogus" in bogus.err and "not a device type" in bogus.err


def test_bench_on_cpu_times_the_reference_next_to_pytorch_and_says_so(cli):
    result = cli("kernels", "bench", "rms_norm", "gemm", "--device", "cpu", "--dtype", "float32", "--check-targets", "--format", "json")
    assert result.code == 0, result.err
    data = json.loads(result.out)
    rows = data["results"]
    assert {r["op"] for r in rows} == {"rms_norm", "gemm"}
    for r in rows:
        assert r["implementation"] == "reference" and r["note"] == bench.CPU_NOTE
        assert r["ms"] > 0 and r["torch_ms"] > 0 and r["achieved"] > 0 and r["torch_achieved"] > 0
        assert r["fraction_of_peak"] is None  # no peak for a CPU: no guessed fraction
        assert r["unit"] == ("TFLOP/s" if r["op"] == "gemm" else "GB/s")
    assert all(t["passed"] is None for t in data["targets"])  # CPU cannot meet or miss a GPU target
    text = cli("kernels", "bench", "swiglu", "--device", "cpu", "--dtype", "float32")
    assert "note: CPU: timed the PyTorch reference path" in text.out


def test_bench_fraction_of_peak_comes_from_the_hardware_profile(monkeypatch):
    h200 = hardware.profile("h200-sxm")
    monkeypatch.setattr(hardware, "detect", lambda device: h200)
    op = get("gemm")
    result = bench.bench_case(op, op.cases[1], "bfloat16", "cpu")
    cost = op.cost(op.cases[1], "bfloat16")
    assert result.achieved == pytest.approx(cost.flops / (result.ms / 1e3) / 1e12)
    assert result.fraction == pytest.approx(result.achieved / 989.4)
    assert result.torch_fraction == pytest.approx(result.torch_achieved / 989.4)
    softmax = get("softmax")
    memory = bench.bench_case(softmax, softmax.cases[0], "float32", "cpu")
    assert memory.unit == "GB/s" and memory.fraction == pytest.approx(memory.achieved / 4800)


def test_targets_judge_the_best_case_and_leave_the_unmeasurable_open():
    def row(op, fraction, speedup=1.0):
        return bench.BenchResult(op, "big", "bfloat16", "gpu", "triton", "compute", "TFLOP/s", 1.0, 1.0, 1.0, fraction, speedup, 1.0, None)

    checks = {(t.op, t.measure): t for t in bench.check_targets([row("gemm", 0.72, 0.95), row("flash_attention", 0.40)])}
    assert checks["gemm", "peak"].passed and checks["gemm", "torch"].passed
    assert checks["flash_attention", "peak"].passed is False
    assert checks["softmax", "peak"].passed is None


def test_hardware_command(cli):
    data = json.loads(cli("kernels", "hardware", "mi300x", "--format", "json").out)
    assert data[0]["warp_size"] == 64 and data[0]["onchip_memory"]["bytes_per_block"] == 65536


def test_benchmark_script_prints_one_json_object(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "kernels.py"
    spec = importlib.util.spec_from_file_location("bench_kernels_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["swiglu", "--device", "cpu", "--dtype", "float32"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["device"] == "cpu" and {r["op"] for r in data["results"]} == {"swiglu"}
    assert all(r["torch_ms"] > 0 for r in data["results"]) and data["targets"]

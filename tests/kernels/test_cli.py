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


def test_list_shows_at_least_15_operators_with_forward_and_backward_per_vendor(cli):
    data = json.loads(cli("kernels", "list", "--format", "json").out)
    assert len(data) >= 15
    vendors = {"cuda", "rocm", "xpu", "npu", "musa", "mlu"}
    for op in data:
        assert set(op["vendors"]) == vendors, op["name"]
        assert all({"forward", "backward"} == set(s) for s in op["vendors"].values())
    by_name = {op["name"]: op["vendors"] for op in data}
    assert by_name["rms_norm"]["npu"] == {"forward": "triton-npu", "backward": "triton"}
    assert by_name["flash_attention"]["cuda"] == {"forward": "triton", "backward": "triton"}
    assert by_name["block_sparse_attention"]["mlu"]["backward"] == "none"
    table = cli("kernels", "list").out
    assert f"{len(data)} operators; each vendor cell: forward / backward" in table
    assert "triton-npu / triton" in table


def test_plan_reports_zero_unplanned_triples(cli):
    result = cli("kernels", "plan", "--dtype", "bfloat16")
    assert result.code == 0, result.out
    assert "0 unplanned" in result.out and "ascend-910b2" in result.out and "mtt-s4000" in result.out


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
    assert "--device cuda: no cuda device" in result.err and "use cpu to run here" in result.err
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


def _bench_row(op, case, fraction, speedup=1.0, large=True, note=""):
    """One row of a bench JSON file as `accelport kernels bench --format json` writes it, written by hand."""
    return {
        "op": op, "case": case, "dtype": "bfloat16", "device": "NVIDIA H200", "implementation": "triton",
        "fraction_of_peak": fraction, "speedup_vs_torch": speedup, "large_shape": large, "note": note,
    }  # fmt: skip


def test_targets_judge_the_worst_large_shape_row_of_synthetic_bench_json():
    text = json.dumps({"results": [
        _bench_row("gemm", "512x512x512", 0.95, 1.5, large=False),  # a small case near peak must not count
        _bench_row("gemm", "8192x8192x8192", 0.74, 0.97),
        _bench_row("gemm", "4096x14336x4096", 0.66, 0.92),  # the worst large row misses 70% of peak
        _bench_row("flash_attention", "b4-h32-s4096-d128", 0.52),
        _bench_row("flash_attention", "b4-h32-s4096-d128-causal", 0.47),
        _bench_row("softmax", "256x1000", 0.99, large=False),  # only small rows: no verdict
        _bench_row("rms_norm", "8192x8192", None),  # no peak known for the device
        _bench_row("swiglu", "16384x14336", 0.81),
        _bench_row("rope", "8x4096x32x128", 0.79),
    ]})  # fmt: skip
    checks = {(t.op, t.measure): t for t in bench.check_targets(json.loads(text)["results"])}
    gemm = checks["gemm", "peak"]
    assert (gemm.value, gemm.case, gemm.passed) == (0.66, "4096x14336x4096", False)
    assert checks["gemm", "torch"].passed and checks["gemm", "torch"].value == 0.92
    attention = checks["flash_attention", "peak"]
    assert attention.passed and (attention.value, attention.case) == (0.47, "b4-h32-s4096-d128-causal")
    assert checks["softmax", "peak"].passed is None and "no large-shape row" in checks["softmax", "peak"].detail
    assert checks["rms_norm", "peak"].passed is None and "no peak" in checks["rms_norm", "peak"].detail
    assert checks["layer_norm", "peak"].passed is None and checks["layer_norm", "peak"].detail == "not benchmarked"
    assert checks["swiglu", "peak"].passed is True and checks["rope", "peak"].passed is False
    cpu = bench.check_targets([_bench_row("gemm", "8192x8192x8192", 0.9, 2.0, note=bench.CPU_NOTE)])
    assert all(t.passed is None for t in cpu if t.op == "gemm")


def test_bench_marks_the_rows_of_the_benchmark_matrix_as_large():
    import dataclasses

    op = get("swiglu")
    small = bench.bench_case(op, op.cases[0], "float32", "cpu")
    assert small.large is False and small.to_dict()["large_shape"] is False
    # The real benchmark matrix is too big for a CPU test: make a small case the matrix.
    as_bench = dataclasses.replace(op, bench_cases=(op.cases[0],))
    row = bench.bench_case(as_bench, op.cases[0], "float32", "cpu")
    assert row.large is True and row.to_dict()["large_shape"] is True


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


def _impls(result):
    assert result.code == 0, result.err
    return sorted({(r["op"], r["implementation"]) for r in json.loads(result.out)["results"]})


def test_test_command_validates_what_accelport_kernel_impl_forces(cli, monkeypatch):
    args = ("kernels", "test", "swiglu", "softmax", "--device", "cpu", "--dtype", "float32", "--no-lint", "--format", "json")
    assert _impls(cli(*args)) == [("softmax", "triton"), ("softmax", "triton-npu"), ("swiglu", "triton")]
    monkeypatch.setenv("ACCELPORT_KERNEL_IMPL", "softmax=triton-npu")
    assert _impls(cli(*args)) == [("softmax", "triton-npu"), ("swiglu", "triton")]
    monkeypatch.setenv("ACCELPORT_KERNEL_IMPL", "softmax=reference,swiglu=auto")
    assert _impls(cli(*args)) == [("softmax", "reference"), ("swiglu", "triton")]
    monkeypatch.setenv("ACCELPORT_KERNEL_IMPL", "softmax=triton-npu")
    assert _impls(cli(*args, "--impl", "triton")) == [("softmax", "triton"), ("swiglu", "triton")]  # --impl wins


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("swiglu=bogus", "ACCELPORT_KERNEL_IMPL=swiglu=bogus: swiglu: no implementation 'bogus'"),
        ("softmax=triton-npu", "ACCELPORT_KERNEL_IMPL=softmax=triton-npu: softmax: implementation 'triton-npu' cannot load"),
        ("conv=triton", "ACCELPORT_KERNEL_IMPL: unknown operator 'conv'"),
    ],
)
def test_a_forced_implementation_that_cannot_load_is_exit_2_not_a_fallback(cli, monkeypatch, value, message):
    monkeypatch.setitem(get("softmax").overrides, "npu", "accelport.kernels.no_such_module:softmax")
    monkeypatch.setenv("ACCELPORT_KERNEL_IMPL", value)
    result = cli("kernels", "test", "swiglu", "softmax", "--device", "cpu", "--dtype", "float32", "--no-lint")
    assert result.code == 2 and result.out == ""
    assert result.err.count("\n") == 1 and message in result.err and "Traceback" not in result.err


def test_aot_jobs_zero_is_a_usage_error(cli):
    result = cli("kernels", "aot", "--jobs", "0")
    assert result.code == 2
    assert "argument --jobs: must be at least 1" in result.err and "Traceback" not in result.err

"""Hardware profiles, the configuration generator's on-chip memory plan, and tuned tables as data."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from accelport import knowledge
from accelport.errors import UserError
from accelport.kernels import configs, get, hardware, tl_compat
from accelport.kernels.configs import Config


def test_every_profile_belongs_to_a_vendor_and_agrees_with_it():
    vendors = knowledge.vendors()
    for hw in hardware.profiles().values():
        vendor = vendors[hw.vendor]
        assert hw.warp_size == vendor.warp_size, hw.key
        assert hw.sources and hw.onchip_bytes_per_block <= hw.onchip_bytes_per_core
        if vendor.onchip_memory is not None:
            assert hw.onchip_kind == vendor.onchip_memory.kind, hw.key
    # The device each vendor profile quotes its on-chip memory for has the same figure here.
    assert hardware.profile("h100-sxm").onchip_bytes_per_core == vendors["cuda"].onchip_memory.bytes_per_core
    assert hardware.profile("mi300x").onchip_bytes_per_core == vendors["rocm"].onchip_memory.bytes_per_core
    assert hardware.profile("ascend-910b2").onchip_bytes_per_core == vendors["npu"].onchip_memory.bytes_per_core
    assert hardware.profile("max-1550").onchip_bytes_per_core == vendors["xpu"].onchip_memory.bytes_per_core


def test_every_source_key_is_explained_in_the_data_file():
    text = (Path(knowledge.__file__).parent / "kernels" / "hardware.toml").read_text()
    explained = set(re.findall(r"^#\s+([A-Z0-9][A-Z0-9-]+)\s{2,}", text, flags=re.M))
    for hw in hardware.profiles().values():
        assert set(hw.sources) <= explained, (hw.key, set(hw.sources) - explained)


def test_profiles_match_device_names_and_targets():
    assert hardware.match_name("NVIDIA H200").key == "h200-sxm"
    assert hardware.match_name("NVIDIA H100 80GB HBM3").key == "h100-sxm"
    assert hardware.match_name("AMD Instinct MI300X").key == "mi300x"
    assert hardware.match_name("NVIDIA GeForce RTX 4090") is None
    assert hardware.for_target("gfx942").triton_target.label == "gfx942"
    assert hardware.for_target("sm_80").onchip_bytes_per_block == 166912
    generic = hardware.generic("rocm", "AMD Radeon Pro W7900")
    assert generic.generic and generic.peak("bfloat16") is None and generic.onchip_bytes_per_block == 65536


def test_generator_prunes_gemm_tiles_by_on_chip_memory():
    space = get("gemm").config_space
    problem = {"M": 8192, "N": 8192, "K": 8192, "dtype": "bfloat16"}
    mi300x, h100 = hardware.profile("mi300x"), hardware.profile("h100-sxm")
    on_amd, on_nvidia = configs.generate(space, problem, mi300x), configs.generate(space, problem, h100)
    assert on_amd.configs and on_nvidia.configs
    assert all(space.onchip_bytes(c, problem, mi300x) <= 65536 for c in on_amd.configs)
    assert any("LDS" in reason for reason in on_amd.rejected)
    # What MI300X's 64 KiB rules out, H100's 227 KiB allows: the plan is per device.
    assert max(space.onchip_bytes(c, problem, h100) for c in on_nvidia.configs) > 65536
    assert all(c["BLOCK_K"] >= 16 for c in on_nvidia.configs)  # never below the matrix unit's K


def test_ascend_row_tiles_fit_the_unified_buffer():
    from accelport.kernels.softmax_npu import SPACE

    ascend = hardware.profile("ascend-910b2")
    pruned = configs.generate(SPACE, {"rows": 4096, "cols": 50257, "dtype": "bfloat16"}, ascend)
    assert pruned.configs and all(c.num_warps == 1 for c in pruned.configs)
    assert all(SPACE.onchip_bytes(c, {}, ascend) <= 196608 for c in pruned.configs)
    assert "needs more unified buffer than the 196608 bytes per block" in pruned.rejected


def test_a_tuned_table_is_loaded_and_used_by_launches(tmp_path, monkeypatch):
    table = tmp_path / "tuned-cpu.json"
    entry = configs.TunedEntry("cpu", "softmax", "float32", "N1024", Config.make({"BLOCK": 128}, 2, 1), 1.0, "test")
    table.write_text(configs.table_json("cpu", "cpu", [entry], {"source": "test"}))
    monkeypatch.setenv(configs.TUNED_ENV, str(table))
    configs.clear_tuned_cache()
    x = torch.randn(3, 1000)
    with tl_compat.recording() as launches:
        get("softmax").triton(x)
    assert launches[0].kwargs["BLOCK"] == 128 and launches[0].kwargs["ONE_TILE"] is False
    torch.testing.assert_close(get("softmax").triton(x), torch.softmax(x, -1))  # the tuned config also runs right
    monkeypatch.delenv(configs.TUNED_ENV)
    configs.clear_tuned_cache()
    with tl_compat.recording() as launches:
        get("softmax").triton(x)
    assert launches[0].kwargs["BLOCK"] == 1024


def test_malformed_tuned_tables_are_one_line_errors(tmp_path, monkeypatch):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema_version": 1, "device_key": "cpu", "entries": [{"op": "softmax"}]}))
    monkeypatch.setenv(configs.TUNED_ENV, str(bad))
    configs.clear_tuned_cache()
    with pytest.raises(UserError, match=r"bad.json: not a tuned table"):
        configs.lookup("cpu", "softmax", "float32", "N1024")
    monkeypatch.setenv(configs.TUNED_ENV, str(tmp_path / "missing.json"))
    configs.clear_tuned_cache()
    with pytest.raises(UserError, match=r"missing\.json: tuned table not found"):
        configs.lookup("cpu", "softmax", "float32", "N1024")
    configs.clear_tuned_cache()


@pytest.mark.parametrize("command", [("test", "--no-lint"), ("bench",), ("tune", "--max-configs", "1")])
def test_a_malformed_tuned_table_stops_the_command_with_exit_2_naming_it(cli, tmp_path, monkeypatch, command):
    """Inside a launch the table's UserError would count as a failed case (exit 1); it is bad input."""
    bad = tmp_path / "bad-table.json"
    bad.write_text(json.dumps({"schema_version": 1, "device_key": "cpu", "entries": [{"op": "swiglu", "bucket": "n4096"}]}))
    monkeypatch.setenv(configs.TUNED_ENV, str(bad))
    configs.clear_tuned_cache()
    out = tmp_path / "out.json"
    extra = ("--table", str(out)) if command[0] == "tune" else ()
    result = cli("kernels", *command, "swiglu", "--device", "cpu", "--dtype", "float32", *extra)
    configs.clear_tuned_cache()
    assert result.code == 2, result.out
    assert result.err.count("\n") == 1 and "Traceback" not in result.err
    assert f"{bad}: not a tuned table (missing key 'dtype')" in result.err and result.out == ""
    assert not out.exists()


def test_tune_on_cpu_writes_a_table_that_dispatch_reads(cli, tmp_path, monkeypatch):
    table = tmp_path / "tuned.json"
    result = cli("kernels", "tune", "swiglu", "--device", "cpu", "--dtype", "float32", "--max-configs", "2", "--table", table, "--format", "json")
    assert result.code == 0, result.err
    data = json.loads(table.read_text())
    assert data["device_key"] == "cpu" and "interpreter" in data["timed"]
    assert {(e["op"], e["bucket"]) for e in data["entries"]} == {("swiglu", "n4096"), ("swiglu", "n2048")}
    report = json.loads(result.out)
    assert all(t["ms"] is not None for t in report["trials"])
    monkeypatch.setenv(configs.TUNED_ENV, str(table))
    configs.clear_tuned_cache()
    chosen = configs.choose("swiglu", get("swiglu").config_space, {"n": 2100, "dtype": "float32"}, "cpu")
    assert chosen.to_dict() == next(e["config"] for e in data["entries"] if e["bucket"] == "n4096")
    configs.clear_tuned_cache()


def test_tune_creates_missing_folders_and_refuses_unusable_tables_with_exit_2(cli, tmp_path):
    deep = tmp_path / "a" / "b" / "tuned.json"
    result = cli("kernels", "tune", "swiglu", "--device", "cpu", "--dtype", "float32", "--max-configs", "1", "--table", deep)
    assert result.code == 0, result.err
    assert json.loads(deep.read_text())["entries"]
    assert [p.name for p in deep.parent.iterdir()] == ["tuned.json"]  # no temporary file left beside it
    blocker = tmp_path / "file"
    blocker.write_text("")
    foreign = tmp_path / "foreign.json"
    foreign.write_text(configs.table_json("h100-sxm", "H100", [], {"source": "test"}))
    for table, message in [
        (blocker / "tuned.json", f"{blocker} is not a folder"),
        (tmp_path, "is a folder; give the table a file name"),
        (foreign, "holds a table for h100-sxm, not cpu"),
    ]:
        bad = cli("kernels", "tune", "swiglu", "--device", "cpu", "--dtype", "float32", "--max-configs", "1", "--table", table)
        assert bad.code == 2 and bad.out == "", (table, bad.out)
        assert bad.err.count("\n") == 1 and message in bad.err and "Traceback" not in bad.err
    assert bad.err.startswith(f"accelport: error: {foreign}:")
    blocked = cli("kernels", "tune", "swiglu", "--device", "cpu", "--dtype", "float32", "--max-configs", "1", "--table", tmp_path)
    assert blocked.err.rstrip().endswith(".json (--table)")  # the library names its parameter; the CLI the flag
    assert cli("kernels", "tune", "swiglu", "--device", "cpu", "--max-configs", "0").code == 2


def test_tune_writes_its_table_after_each_operator_so_a_cut_short_run_keeps_finished_work(tmp_path, monkeypatch):
    from accelport.kernels import tune

    table = tmp_path / "tuned.json"
    real = tune.tune_case

    def interrupted_on_softmax(op, *args, **kwargs):
        if op.name == "softmax":
            raise KeyboardInterrupt  # what a timeout or Ctrl-C does part-way through the second operator
        return real(op, *args, **kwargs)

    monkeypatch.setattr(tune, "tune_case", interrupted_on_softmax)
    with pytest.raises(KeyboardInterrupt):
        tune.tune([get("swiglu"), get("softmax")], "cpu", ["float32"], "small", max_configs=1, table=table)
    data = json.loads(table.read_text())
    assert {e["op"] for e in data["entries"]} == {"swiglu"} and len(data["entries"]) == 2
    monkeypatch.setattr(tune, "tune_case", real)
    tune.tune([get("softmax")], "cpu", ["float32"], "small", max_configs=1, table=table)
    merged = json.loads(table.read_text())
    assert {e["op"] for e in merged["entries"]} == {"swiglu", "softmax"}  # the next run merges, keeping swiglu
    assert [p.name for p in tmp_path.iterdir()] == ["tuned.json"]
    configs.clear_tuned_cache()

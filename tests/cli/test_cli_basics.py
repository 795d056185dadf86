"""The CLI skin: help, exit codes, one-line errors for bad input."""

from __future__ import annotations

import json


def test_help_lists_exit_codes(cli):
    result = cli("--help")
    assert result.code == 0
    assert "exit codes:" in result.out
    assert "2  usage or input error" in result.out


def test_no_command_is_usage_error(cli):
    assert cli().code == 2


def test_unknown_vendor_is_one_line_error(cli):
    result = cli("backends", "nosuchvendor")
    assert result.code == 2
    assert result.err.count("\n") == 1
    assert "unknown vendor 'nosuchvendor'" in result.err
    assert "Traceback" not in result.err


def test_backends_json_has_every_required_vendor(cli):
    result = cli("backends", "--format", "json")
    assert result.code == 0
    data = json.loads(result.out)
    for key in ("cuda", "rocm", "npu", "xpu", "musa", "mlu", "mps", "cpu", "iluvatar", "hygon", "enflame", "metax", "biren"):
        assert key in data, key
    assert data["npu"]["visible_devices"][0] == "ASCEND_RT_VISIBLE_DEVICES"
    # MCCL clash: Moore Threads' backend is 'mccl'; MetaX's MCCL answers to 'nccl'.
    assert data["musa"]["distributed_backend"] == "mccl"
    assert data["metax"]["collective_library"] == "MCCL"
    assert data["metax"]["distributed_backend"] == "nccl"


def test_doctor_json_reports_torch(cli):
    result = cli("doctor", "--format", "json")
    assert result.code == 0
    data = json.loads(result.out)
    assert data["torch"]["version"].startswith("2.")
    assert "gloo" in data["torch"]["distributed_backends"]


def test_output_file_is_written_atomically(cli, tmp_path):
    target = tmp_path / "out" / "vendors.json"
    result = cli("backends", "--format", "json", "-o", target)
    assert result.code == 0 and result.out == ""
    assert json.loads(target.read_text())["cuda"]["torch_device"] == "cuda"
    assert [p.name for p in target.parent.iterdir()] == ["vendors.json"]


def test_output_to_directory_is_one_line_error(cli, tmp_path):
    result = cli("backends", "-o", tmp_path)
    assert result.code == 2
    assert "is a directory" in result.err


def test_the_cyclic_collector_is_paused_only_where_a_command_asks(monkeypatch, tmp_path):
    # Start-up runs without the cyclic GC; a command runs with it unless its module says
    # GC_PAUSED (inventory, migrate); afterwards it is back on for whoever called main().
    import gc

    import accelport.cli.inventory
    import accelport.cli.rules
    from accelport.cli import main

    seen = {}
    real_rules, real_inventory = accelport.cli.rules.run, accelport.cli.inventory.run

    def rules(args):
        seen["rules"] = gc.isenabled()
        return real_rules(args)

    def inventory(args):
        seen["inventory"] = gc.isenabled()
        return real_inventory(args)

    rules.__module__, inventory.__module__ = real_rules.__module__, real_inventory.__module__  # main() reads the handler's module
    monkeypatch.setattr(accelport.cli.rules, "run", rules)
    monkeypatch.setattr(accelport.cli.inventory, "run", inventory)
    (tmp_path / "a.py").write_text("import torch\ntorch.cuda.synchronize()\n")
    assert gc.isenabled()
    assert main(["rules", "AP1103"]) == 0 and gc.isenabled()
    assert main(["inventory", str(tmp_path), "-o", str(tmp_path / "out.json")]) == 0 and gc.isenabled()
    assert seen == {"rules": True, "inventory": False}

"""`accelport inventory` and `accelport rules` from the command line: formats, thresholds, exit codes, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "legacy_cuda_app"


def test_example_inventory_table(cli):
    result = cli("inventory", EXAMPLE)
    assert result.code == 0
    assert "route B: operator rewrite" in result.out  # the CUDA extension in csrc/
    assert "train.py" in result.out and "AP1004" in result.out


@pytest.mark.parametrize("fmt", ["json", "sarif", "csv", "md", "html"])
def test_every_format_writes_a_file(cli, tmp_path, fmt):
    target = tmp_path / f"report.{fmt}"
    result = cli("inventory", EXAMPLE, "--format", fmt, "-o", target)
    assert result.code == 0 and result.out == ""
    assert target.stat().st_size > 200


def test_fail_on_thresholds(cli):
    assert cli("inventory", EXAMPLE, "--fail-on", "low", "--format", "json").code == 1
    assert cli("inventory", EXAMPLE, "--fail-on", "medium", "--format", "json").code == 1  # get_device_capability
    assert cli("inventory", EXAMPLE, "--fail-on", "high", "--format", "json").code == 1  # CUDAExtension in setup.py
    assert cli("inventory", EXAMPLE / "train.py", "--fail-on", "high", "--format", "json").code == 0


def test_target_rocm_needs_no_effort_for_torch_cuda(cli):
    data = json.loads(cli("inventory", EXAMPLE, "--format", "json", "--target", "rocm").out)
    by_rule = {f["rule_id"]: f for f in data["findings"]}
    assert by_rule["AP1103"]["effort"] == "none"  # ROCm reuses torch.cuda
    npu = json.loads(cli("inventory", EXAMPLE, "--format", "json", "--target", "npu").out)
    assert {f["rule_id"]: f for f in npu["findings"]}["AP1103"]["effort"] == "low"


def test_missing_path_is_one_line_exit_2(cli, tmp_path):
    result = cli("inventory", tmp_path / "nope")
    assert result.code == 2
    assert result.err.strip().endswith("no such file or directory; check the path")
    assert result.err.count("\n") == 1


def test_empty_directory_is_one_line_exit_2(cli, tmp_path):
    result = cli("inventory", tmp_path)
    assert result.code == 2
    assert "no files accelport scans were found" in result.err
    assert result.err.count("\n") == 1


def test_binary_file_is_one_line_exit_2(cli, tmp_path):
    blob = tmp_path / "weights.bin"
    blob.write_bytes(bytes(range(256)) * 8)
    result = cli("inventory", blob)
    assert result.code == 2
    assert "weights.bin: not a kind of file accelport scans" in result.err
    assert result.err.count("\n") == 1


def test_binary_content_named_py_is_one_line_exit_2(cli, tmp_path):
    blob = tmp_path / "model.py"
    blob.write_bytes(b"\x00\x89PNG torch.cuda \x00" * 10)
    result = cli("inventory", blob)
    assert result.code == 2
    assert "model.py: cannot be scanned: binary content" in result.err


def test_skipped_files_change_the_exit_code(cli, tmp_path):
    (tmp_path / "ok.py").write_text("x = 1\n")
    (tmp_path / "broken.py").write_text("import torch\ntorch.cuda.synchronize(\n")
    assert cli("inventory", tmp_path).code == 1
    result = cli("inventory", tmp_path, "--allow-skipped")
    assert result.code == 0
    assert "broken.py: does not parse as Python" in result.out


def test_a_file_over_the_size_limit_names_the_flag_that_lifts_it(cli, tmp_path):
    (tmp_path / "ok.py").write_text("x = 1\n")
    (tmp_path / "big.py").write_text("# " + "x" * (2 * 1024 * 1024) + "\n")
    result = cli("inventory", tmp_path, "--max-file-size", "1", "--allow-skipped", "--format", "json")
    reasons = {os.path.basename(s["path"]): s["reason"] for s in json.loads(result.out)["skipped"]}
    assert reasons["big.py"].startswith("larger than the 1 MiB limit") and reasons["big.py"].endswith("; raise it with --max-file-size")
    alone = cli("inventory", tmp_path / "big.py", "--max-file-size", "1")
    assert alone.code == 2 and alone.err.rstrip().endswith("raise it with --max-file-size")


def test_unknown_target_is_usage_error(cli):
    result = cli("inventory", EXAMPLE, "--target", "tpu9")
    assert result.code == 2 and "unknown vendor 'tpu9'" in result.err


def test_rules_list_and_detail(cli):
    listing = cli("rules")
    assert listing.code == 0 and "AP1203" in listing.out
    detail = cli("rules", "AP1203")
    assert "custom_fwd" in detail.out and "Before:" in detail.out and "After:" in detail.out
    assert cli("rules", "AP0000").code == 2


def test_real_process_prints_help_with_exit_codes():
    result = subprocess.run([sys.executable, "-m", "accelport", "inventory", "--help"], capture_output=True, text=True)
    assert result.returncode == 0
    assert "Exit codes" in result.stdout or "exit codes" in result.stdout.lower()


def test_marked_findings_are_reported_but_do_not_fail(cli, tmp_path):
    code = tmp_path / "m.py"
    code.write_text("import torch\nmajor, minor = torch.cuda.get_device_capability()\n")
    assert cli("inventory", code, "--fail-on", "any").code == 1
    code.write_text(
        "import torch\n"
        "major, minor = torch.cuda.get_device_capability()  # accelport: AP1109: gate on the feature instead\n"
    )
    result = cli("inventory", code, "--fail-on", "any")
    assert result.code == 0
    assert "[marked]" in result.out and "1 marked in the source" in result.out
    data = json.loads(cli("inventory", code, "--format", "json").out)
    assert data["summary"]["acknowledged"] == 1 and data["findings"][0]["acknowledged"] is True


def test_output_under_a_file_names_the_file(cli, tmp_path):
    blocker = tmp_path / "report"
    blocker.write_text("keep me")
    result = cli("inventory", EXAMPLE, "--format", "json", "-o", blocker / "out.json")
    assert result.code == 2
    assert f"{blocker} is a file, not a folder" in result.err and "File exists" not in result.err
    assert blocker.read_text() == "keep me"


def test_select_ignore_fail_on_and_pyproject_defaults(cli, tmp_path):
    import json

    tree = tmp_path / "proj"
    tree.mkdir()
    (tree / "train.py").write_text("import torch\nx = torch.zeros(2).cuda()\ntorch.cuda.synchronize()\n")
    rules = {f["rule_id"] for f in json.loads(cli("inventory", tree, "--format", "json").out)["findings"]}
    assert len(rules) >= 2
    kept = sorted(rules)[0]
    only = json.loads(cli("inventory", tree, "--format", "json", "--select", kept).out)["findings"]
    assert {f["rule_id"] for f in only} == {kept}
    rest = json.loads(cli("inventory", tree, "--format", "json", "--ignore", kept).out)["findings"]
    assert {f["rule_id"] for f in rest} == rules - {kept}
    assert cli("inventory", tree, "--fail-on", "any").code == 1
    # The same options from [tool.accelport]; the command line still wins.
    (tree / "pyproject.toml").write_text(f'[tool.accelport]\nselect = ["{kept}"]\nfail-on = "any"\n')
    from_file = cli("inventory", tree, "--format", "json")
    assert from_file.code == 1 and {f["rule_id"] for f in json.loads(from_file.out)["findings"]} == {kept}
    (tree / "pyproject.toml").write_text('[tool.accelport]\nfail-on = "sometimes"\n')
    bad = cli("inventory", tree)
    assert bad.code == 2 and "fail-on 'sometimes' must be one of" in bad.err


def test_verbose_shows_decisions(cli, tmp_path):
    tree = tmp_path / "proj"
    tree.mkdir()
    (tree / "train.py").write_text("import torch\nx = torch.zeros(2).cuda()\n")
    (tree / "broken.py").write_bytes(b"\xff\xfe not utf-8 \x00")
    quiet = cli("inventory", tree)
    loud = cli("-v", "inventory", tree)
    assert "train.py: 1 finding(s), route" not in quiet.err
    assert "train.py: 1 finding(s), route" in loud.err and "project route" in loud.err
    migrate = cli("-v", "migrate", tree)
    assert "train.py:2: rewritten AP" in migrate.err

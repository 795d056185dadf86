"""`accelport dump --output-dir DIR -- python script.py`: the wrapper captures an unmodified training script."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from accelport.errors import InvalidValue, UserError
from accelport.verify import capture
from accelport.verify.numerics import dumpfile

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("m", {model!r})
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
model = m.build_model(seed=0)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
tokens, targets = m.example_batch(batch_size=2, seq_len=8)
for step in range(3):
    m.loss_fn(model(tokens), targets).backward()
    opt.step(); opt.zero_grad()
print("trained")
"""


@pytest.fixture
def script(tmp_path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT.format(model=str(REPO / "examples" / "legacy_cuda_app" / "model.py")))
    return path


@pytest.mark.slow
def test_wrapper_dumps_an_unmodified_script(cli, script, tmp_path, monkeypatch):
    import sys

    # The program's own sitecustomize (a virtualenv's, `accelport run`'s) must still run.
    site = tmp_path / "site"
    site.mkdir()
    marker = tmp_path / "site-ran"
    (site / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO / "src"), str(site)]))
    out = tmp_path / "dump"
    result = cli(
        "dump",
        "--output-dir",
        out,
        "--steps",
        "1..2",
        "--filter",
        "module:TinyLM.blocks.*",
        "--views",
        "--",
        sys.executable,
        script,
    )
    assert result.code == 0, result.err
    assert marker.exists()
    assert "3 steps" not in result.out and "2 steps" in result.out and "complete" in result.out
    header = json.loads((out / dumpfile.MANIFEST).read_text().splitlines()[0])
    assert header["argv"][0].endswith("train.py") and header["filters"]["modules"] == [
        "TinyLM.blocks.*"
    ]
    records = [r for r in dumpfile.iter_records(out) if r["k"] != "step"]
    assert {r["step"] for r in records} == {1, 2}
    assert all(r["module"].startswith("TinyLM.blocks.") for r in records)
    assert any(r["phase"] == "backward" for r in records)
    # --views reached the capture: the attention's transposes are records of their own.
    assert header["views"] is True and any(r.get("op") == "aten.transpose.int" for r in records)


def test_wrapper_usage_errors(cli, tmp_path):
    assert cli("dump", "--output-dir", tmp_path / "d").code == 2
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    busy = cli("dump", "--output-dir", tmp_path / "full", "--", "python", "-c", "pass")
    assert busy.code == 2 and "not empty" in busy.err
    steps = cli("dump", "--output-dir", tmp_path / "d2", "--steps", "a..b", "--", "python")
    assert steps.code == 2 and "--steps a..b: not a step range; write N, N..M or N.." in steps.err
    assert cli("dump", "--output-dir", tmp_path / "d3", "--filter", "layer:x", "--", "python").code == 2


def test_an_output_folder_that_cannot_be_made_is_one_line_exit_2(cli, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    ran = tmp_path / "ran"
    command = ("--", "python", "-c", f"open({str(ran)!r}, 'w')")
    inside = cli("dump", "--output-dir", blocker / "run", *command)
    assert inside.code == 2 and len(inside.err.strip().splitlines()) == 1
    assert f"{blocker / 'run'}: cannot create or write the dump folder (a part of the path is a file" in inside.err
    onto = cli("dump", "--output-dir", blocker, *command)
    assert onto.code == 2 and "is a file, not a folder" in onto.err
    assert not ran.exists()  # the program is not started when its dump cannot be written
    with pytest.raises(UserError, match="cannot create the dump folder"), capture(blocker / "api", step_on="manual"):
        import torch

        torch.ones(2) + 1


def test_bad_options_in_code_name_the_parameter_and_on_the_command_line_the_flag(cli, tmp_path):
    """The library speaks of its parameters (InvalidValue); only the CLI words them as flags."""
    cases = [
        ({"steps": "a..b"}, "steps", "steps=a..b: not a step range; write N, N..M or N.."),
        ({"phases": ["forward", "sideways"]}, "phases",
         "phases=forward,sideways: unknown phase 'sideways'; choose from forward, backward, optimizer, other"),
        ({"step_on": "epoch"}, "step_on", "step_on=epoch: choose optimizer, forward or manual"),
    ]  # fmt: skip
    for options, parameter, message in cases:
        with pytest.raises(InvalidValue) as raised:
            capture(tmp_path / parameter, **options)
        assert raised.value.parameter == parameter and str(raised.value) == message
        assert not (tmp_path / parameter).exists()
    bad = cli("dump", "--output-dir", tmp_path / "cli", "--steps", "3..x", "--", "python", "-c", "pass")
    assert bad.code == 2 and bad.err.strip() == "accelport: error: --steps 3..x: not a step range; write N, N..M or N.."

"""Several captures of one program as one side: `profiling(captures=K)`, `side_paths`, and the CLI on folders."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from accelport.errors import UserError
from accelport.verify.perf import capture, profile

sys.path.insert(0, str(Path(__file__).parent))
from profile_helpers import MARKED_SCRIPT

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(
    torch is None or importlib.util.find_spec("numpy") is None or importlib.util.find_spec("msgspec") is None,
    reason="captures and reads real traces: needs torch, numpy and msgspec (pip install 'accelport[torch]')",
)

STEPS, WARMUP, CAPTURES = 2, 1, 3



def _profiler_steps(path) -> list[str]:
    events = json.loads(path.read_text())["traceEvents"]
    return sorted(e["name"] for e in events if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#"))


def _tiny_step():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    x = torch.randn(8, 16)
    return model, lambda: model(x).sum().backward()


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """A folder of CAPTURES traces taken in this process, each of STEPS profiled steps."""
    if torch is None:
        pytest.skip("captures real traces: needs torch")
    folder = tmp_path_factory.mktemp("captures") / "side"
    model, step_fn = _tiny_step()
    assert profile.capture(step_fn, folder, steps=STEPS, warmup=WARMUP, model=model, captures=CAPTURES) == folder
    return folder


@needs_torch
def test_profiling_three_captures_writes_three_traces_each_of_the_profiled_steps(captured):
    paths = profile.side_paths(captured)
    assert paths == capture.capture_paths(captured, CAPTURES)
    steps = [_profiler_steps(path) for path in paths]
    assert [len(names) for names in steps] == [STEPS] * CAPTURES, steps
    assert len({name for names in steps for name in names}) == STEPS * CAPTURES  # no step in two captures
    assert all(profile.profile_trace(path).steps == STEPS for path in paths)


@needs_torch
@pytest.mark.filterwarnings("ignore:Profiler won.t be using warmup")
def test_step_says_done_after_every_cycle_and_stale_captures_are_removed(tmp_path):
    folder = tmp_path / "side"
    folder.mkdir()
    (folder / "capture-9.json").write_text("{}")  # from an earlier run of more captures
    (folder / "notes.json").write_text("{}")  # not a capture: left alone
    _, step_fn = _tiny_step()
    calls = 0
    with capture.profiling(folder, steps=STEPS, warmup=0, captures=2) as step:
        while True:
            step_fn()
            calls += 1
            if not step():
                break
    assert calls == 2 * STEPS
    assert sorted(p.name for p in folder.iterdir()) == ["capture-1.json", "capture-2.json", "notes.json"]


@needs_torch
def test_too_few_steps_for_every_capture_raises_and_says_how_many_are_needed(tmp_path):
    folder = tmp_path / "side"
    _, step_fn = _tiny_step()
    cycle = WARMUP + STEPS
    with (pytest.raises(RuntimeError, match=rf"wrote 2 of 3 captures.*need {3 * cycle} steps"),
          capture.profiling(folder, steps=STEPS, warmup=WARMUP, captures=3) as step):
        for _ in range(2 * cycle + WARMUP + 1):  # stops inside the third capture's profiled steps
            step_fn()
            step()
    assert not (folder / "capture-3.json").exists()  # half a capture is never written


def test_side_paths_of_a_folder_are_its_traces_in_natural_order(tmp_path):
    for name in ("capture-10.json", "capture-2.json.gz", "capture-1.json", "README.txt", "capture-3.json.bak"):
        (tmp_path / name).write_text("")
    (tmp_path / "nested.json").mkdir()
    assert [p.name for p in capture.side_paths(tmp_path)] == ["capture-1.json", "capture-2.json.gz", "capture-10.json"]


def test_side_paths_of_a_file_or_a_missing_path_is_that_path(tmp_path):
    trace = tmp_path / "cuda.json"
    trace.write_text("")
    assert capture.side_paths(trace) == [trace]
    assert capture.side_paths(tmp_path / "missing.json") == [tmp_path / "missing.json"]


def test_side_paths_of_a_folder_without_traces_names_it_and_what_to_put_there(tmp_path):
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(UserError, match=r"holds no trace.*\.json or \.json\.gz.*put the traces") as info:
        capture.side_paths(tmp_path)
    assert str(tmp_path) in str(info.value) and "\n" not in str(info.value)


def test_profile_diff_of_a_folder_without_traces_is_one_line_exit_2(cli, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    done = cli("profile-diff", empty, empty)
    assert done.code == 2 and f"{empty}: folder holds no trace" in done.err, done.err
    assert len(done.err.strip().splitlines()) == 1 and "Traceback" not in done.err


@needs_torch
def test_cli_profile_captures_into_a_folder_and_profile_diff_reads_two_folders(cli, tmp_path, captured):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(MARKED_SCRIPT))
    folder = tmp_path / "cpu"
    run = ("profile", "--steps", STEPS, "--warmup", WARMUP, "--captures", CAPTURES, "--output-dir", folder,
           "--", sys.executable, script)
    done = cli(*run)
    assert done.code == 0, done.err[-2000:]
    paths = capture.capture_paths(folder, CAPTURES)
    assert sorted(folder.iterdir()) == paths
    assert all(len(_profiler_steps(path)) == STEPS for path in paths)
    first, second = done.out.splitlines()[:2]
    assert first.startswith(f"{CAPTURES} captures written to {folder}")
    assert second.startswith(f"{folder}: ") and f"of {STEPS * CAPTURES} step(s)" in second
    assert "aten::linear" in done.out

    done = cli(*run[:-3], "--format", "json", *run[-3:])
    assert done.code == 0, done.err[-2000:]
    data = json.loads(done.out)
    assert data["output_dir"] == str(folder) and data["captures"] == [str(p) for p in paths]
    assert data["steps"] == STEPS * CAPTURES  # the breakdown is of the merged captures

    done = cli("profile-diff", folder, captured, "--format", "json")
    assert done.code == 0, done.err[-2000:]
    result = json.loads(done.out)
    assert result["base"]["captures"] == [str(p) for p in paths]
    assert result["test"]["captures"] == [str(p) for p in capture.capture_paths(captured, CAPTURES)]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--captures", "0"], "--captures 0: must be 1 <= captures"),
        (["--captures", "3", "--steps", "2", "--trace", "t.json"], "--trace t.json: one file holds one capture"),
        (["--captures", "3"], "--captures 3: needs --steps"),
        (["--output-dir", "caps"], "--output-dir caps: a folder holds several captures"),
        (["--captures", "3", "--steps", "2", "--output-dir", "train.py"], "--output-dir train.py: is a file"),
        (["--captures", "3", "--steps", "2", "--output-dir", "no/such/caps"], "--output-dir no/such/caps: folder"),
    ],
)
def test_cli_profile_bad_capture_arguments_are_one_line_usage_errors(cli, tmp_path, monkeypatch, arguments, message):
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('the script must not run on bad arguments')\n")
    done = cli("profile", *arguments, "--", script)
    assert done.code == 2, done.out + done.err
    assert message in done.err and "Traceback" not in done.err, done.err
    assert len(done.err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]  # nothing written, no folder made


def test_profile_child_refuses_several_captures_without_steps(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        capture._child(["--trace", str(tmp_path), "--captures", "3", str(tmp_path / "x.py")])
    assert info.value.code == 2 and "several captures need" in capsys.readouterr().err


def test_a_script_that_ends_before_every_capture_is_taken_says_so_in_one_line(tmp_path):
    script = tmp_path / "short.py"
    script.write_text("from accelport.verify.perf import bench\nfor _ in range(3):\n    bench.step()\n")
    # A real process: the child's stderr is the user's too.
    done = subprocess.run([sys.executable, "-m", "accelport", "profile", "--steps", "4", "--captures", "3",
                           "--output-dir", str(tmp_path / "caps"), "--", sys.executable, str(script)],
                          capture_output=True, text=True, check=False, cwd=tmp_path)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr, done.stderr
    assert "run at least 15 steps" in done.stderr
    assert not list((tmp_path / "caps").glob("capture-*.json"))

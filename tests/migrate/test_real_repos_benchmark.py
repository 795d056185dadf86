"""benchmarks/real_repos.py: its pipeline on a small CUDA project, its stop rule and how it names a failure."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("real_repos", REPO / "benchmarks" / "real_repos.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["real_repos"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("real_repos", None)


TRAIN = textwrap.dedent(
    """
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1).cuda() if torch.cuda.is_available() else torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4).pin_memory().to(device), torch.randn(16, 1).to(device)
    for step in range(5):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize()
        print(f"step {step} loss {loss.item():.6f}")
    """
)


@pytest.mark.slow
def test_a_cuda_project_is_migrated_run_twice_and_judged(bench, tmp_path, monkeypatch):
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(TRAIN)
    recipe = bench.Recipe(name="tiny", subdir=".", marker="train.py", command=("{python}", "train.py"), loss=r"loss (?P<loss>\S+)")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(REPO / "src"))
    row = bench.measure(recipe, project, sys.executable, scratch, with_accelport=False)
    assert row["findings"] >= 5 and row["rewrites"] >= 4, row
    assert row["imports_accelport"] == [] and row["findings_left_unmarked"] == 0
    assert row["runs_after_migrate"] == {"ok": True, "wall_s": row["runs_after_migrate"]["wall_s"], "loss_lines": 5}
    assert row["runs_under_run"]["ok"] and row["runs_under_run"]["loss_lines"] == 5
    assert row["redirected_under_run"]["apis"] >= 3  # is_available, synchronize, pin_memory at least
    assert row["curves"]["verdict"] == "pass" and row["curves"]["steps"] == 5
    assert (project / "train.py").read_text() == TRAIN  # the checkout itself is never touched
    assert "torch.cuda" in (scratch / "original" / "train.py").read_text()  # run under `run` as it was


def test_migrated_code_that_imports_accelport_cannot_run(bench, tmp_path):
    (tmp_path / "m.py").write_text("import accelport.compat\nprint('ran')\n")
    env = bench._environment(bench.RECIPES[0], tmp_path, [str(_blocker(bench, tmp_path))])
    run = bench.run_program([sys.executable, "m.py"], tmp_path, env, 60, None, None)
    assert bench._error(run) == "ImportError: accelport is not installed here: migrated code must need only torch"
    assert bench._imports_accelport(tmp_path) == ["m.py"]


def _blocker(bench, tmp_path: Path) -> Path:
    folder = tmp_path / "blocker"
    folder.mkdir()
    (folder / "accelport.py").write_text(bench._BLOCKER)
    return folder


def test_a_program_without_an_iteration_limit_is_stopped_after_enough_loss_lines(bench, tmp_path):
    forever = "import itertools, time\nfor i in itertools.count():\n    print(f'loss {i}', flush=True)\n    time.sleep(0.01)\n"
    run = bench.run_program([sys.executable, "-c", forever], tmp_path, {}, 60, bench.re.compile(r"loss \d+"), 3)
    assert run.stopped and not run.timed_out and bench._error(run) is None
    assert run.lines[:3] == ["loss 0", "loss 1", "loss 2"]


def test_the_worker_exception_is_named_not_torchruns_own(bench):
    lines = [
        "[rank0]: Traceback (most recent call last):",
        "[rank0]: RuntimeError: Cannot access accelerator device when none is available.",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    ]
    assert bench._error(bench.Run(1, lines, 1.0)) == "RuntimeError: Cannot access accelerator device when none is available."


def test_recipes_match_a_checkout_or_the_project_folder_in_it(bench, tmp_path):
    (tmp_path / "examples" / "imagenet").mkdir(parents=True)
    (tmp_path / "examples" / "imagenet" / "main.py").write_text("")
    assert [r.name for r, _ in bench.recipes_for(tmp_path / "examples")] == ["examples-imagenet"]
    assert [(r.name, p) for r, p in bench.recipes_for(tmp_path / "examples" / "imagenet")] == [
        ("examples-imagenet", tmp_path / "examples" / "imagenet")
    ]
    assert bench.recipes_for(tmp_path) == []


def test_progress_lines_of_ranks_that_ran_into_each_other_still_agree(bench):
    ddp = next(r for r in bench.RECIPES if r.loss is None)
    line = "[GPU{}] Epoch 0 | Batchsize: 64 | Steps: 16"
    apart = bench.Run(0, [line.format(0), line.format(1)], 1.0)
    glued = bench.Run(0, [line.format(0) + line.format(1)], 1.0)
    assert bench._curves(ddp, glued, apart, None)["verdict"].endswith("its progress lines agree")
    one_rank = bench.Run(0, [line.format(0)], 1.0)
    assert bench._curves(ddp, one_rank, apart, None)["verdict"].endswith("its progress lines differ")

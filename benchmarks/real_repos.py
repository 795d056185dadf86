"""Route A on real repositories, zero manual edits: migrate a copy, run it, run the original under `accelport run`, compare.

For each PATH (a checkout of a repository this script has a recipe for: nanoGPT,
minGPT, pytorch/examples — one checkout can hold several recipes), and each recipe
that matches it:

1. copy the project into a temporary folder twice, write its fake data into both
   (the recipe's setup; data a user would have downloaded), and commit one copy to git;
2. `accelport inventory` it, then `accelport migrate --write` it (timed);
3. `accelport inventory` the result again: what is acknowledged there is the markers left;
4. run the user's own command line on the migrated copy — by default where accelport
   cannot be imported, since migrated code must need nothing but torch (`--with-accelport`
   lifts that) — and the unmodified copy under `accelport run`;
5. turn each run's printed loss lines into JSONL and judge them with `accelport curves`
   (the original under `run` is the reference).

Nothing in the projects is edited; commands, environment variables and fake data are
all the recipe sets. Programs without an iteration limit are stopped once they have
printed `stop_after` loss lines (both runs alike). Prints one JSON object per recipe
(a list), or a Markdown table with `--markdown`.

    python benchmarks/real_repos.py PATH... [--python RECIPE=PYTHON]... [--only RECIPE]...
                                   [--keep DIR] [--with-accelport] [--markdown]
    python benchmarks/real_repos.py --render TABLE.json     # a saved JSON table as Markdown

`--python imagenet=/path/to/venv/bin/python` runs one recipe's program with another
interpreter (imagenet needs torchvision, which must match that interpreter's torch).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import pickle
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ACCELPORT = [sys.executable, "-m", "accelport"]
GIT_ENV = {
    "GIT_AUTHOR_NAME": "real-repos", "GIT_AUTHOR_EMAIL": "real-repos@example.com",
    "GIT_COMMITTER_NAME": "real-repos", "GIT_COMMITTER_EMAIL": "real-repos@example.com",
}
# Where accelport must not be importable: a module of that name that says so.
_BLOCKER = 'raise ImportError("accelport is not installed here: migrated code must need only torch")\n'


# --------------------------------------------------------------------------- recipes


def _nanogpt_data(tree: Path) -> None:
    """data/shakespeare_char as prepare.py leaves it: uint16 token files and meta.pkl (65 characters)."""
    import numpy as np

    folder = tree / "data" / "shakespeare_char"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    rng.integers(0, 65, 20_000, dtype=np.uint16).tofile(folder / "train.bin")
    rng.integers(0, 65, 4_000, dtype=np.uint16).tofile(folder / "val.bin")
    chars = [chr(c) for c in range(32, 97)]
    meta = {"vocab_size": 65, "itos": dict(enumerate(chars)), "stoi": {c: i for i, c in enumerate(chars)}}
    (folder / "meta.pkl").write_bytes(pickle.dumps(meta))


def _wikitext_data(tree: Path) -> None:
    """data/wikitext-2/{train,valid,test}.txt: lines of words from a small vocabulary."""
    rng = random.Random(0)
    words = [f"w{i}" for i in range(120)]
    folder = tree / "data" / "wikitext-2"
    folder.mkdir(parents=True, exist_ok=True)
    for name, lines in (("train.txt", 300), ("valid.txt", 40), ("test.txt", 40)):
        text = "".join(" ".join(rng.choice(words) for _ in range(rng.randint(5, 15))) + "\n" for _ in range(lines))
        (folder / name).write_text(text, encoding="utf-8")


@dataclass(frozen=True)
class Recipe:
    """How the user runs one project: where it is in the checkout, its command line, its data."""

    name: str
    subdir: str  # the project inside the checkout ("." for the whole checkout)
    marker: str  # a file that identifies the project, relative to subdir
    command: tuple[str, ...]  # {python} and {bin} (that interpreter's folder) are filled in
    loss: str | None  # regex with a group `loss`, one match per logged step; None: the program prints no loss
    progress: str | None = None  # without a loss: lines whose set must agree between the runs
    setup: Callable[[Path], None] | None = None
    env: dict[str, str] = field(default_factory=dict)  # {tree} is the copy's folder
    stop_after: int | None = None  # stop the program after this many loss lines (it has no iteration limit)
    timeout: int = 600
    needs: str | None = None  # a module the interpreter must have (checked before anything runs)


RECIPES = (
    Recipe(
        name="nanoGPT",
        subdir=".",
        marker="configurator.py",
        command=(
            "{python}", "train.py", "config/train_shakespeare_char.py", "--compile=False", "--max_iters=20",
            "--lr_decay_iters=20", "--warmup_iters=2", "--eval_interval=10", "--eval_iters=2", "--log_interval=1",
            "--batch_size=4", "--block_size=32", "--n_layer=2", "--n_head=2", "--n_embd=32", "--dropout=0.0",
        ),
        loss=r"^iter \d+: loss (?P<loss>[-+.\deE]+|nan|inf)",
        setup=_nanogpt_data,
    ),
    Recipe(
        name="minGPT-adder",
        subdir=".",
        marker="mingpt/trainer.py",
        command=(
            "{python}", "projects/adder/adder.py", "--data.ndigit=1", "--trainer.max_iters=41",
            "--trainer.num_workers=0", "--trainer.batch_size=16", "--system.work_dir=out/adder",
        ),
        loss=r"iter \d+: train loss (?P<loss>[-+.\deE]+|nan|inf)",
        env={"PYTHONPATH": "{tree}"},  # what `pip install -e .` in the checkout gives
    ),
    Recipe(
        name="examples-imagenet",
        subdir="imagenet",
        marker="main.py",
        command=("{python}", "main.py", "--dummy", "-a", "resnet18", "-b", "4", "-j", "0", "-p", "1", "--seed", "0"),
        loss=r"^Epoch: \[\d+\]\[\s*\d+/\d+\].*\tLoss (?P<loss>[-+.\deE]+|nan|inf) \(",
        stop_after=4,  # one epoch of --dummy is 1.28M images, and main.py has no iteration limit
        needs="torchvision",
    ),
    Recipe(
        name="examples-word_language_model",
        subdir="word_language_model",
        marker="main.py",
        command=(
            "{python}", "main.py", "--accel", "--epochs", "1", "--emsize", "16", "--nhid", "16", "--nlayers", "1",
            "--bptt", "8", "--batch_size", "4", "--log-interval", "5", "--save", "model.pt",
        ),
        loss=r"batches \|.*\| loss\s+(?P<loss>[-+.\deE]+|nan|inf) \|",
        setup=_wikitext_data,
    ),
    Recipe(
        name="examples-ddp-tutorial-series",
        subdir="distributed/ddp-tutorial-series",
        marker="multigpu_torchrun.py",
        command=("{bin}/torchrun", "--standalone", "--nproc_per_node=2", "multigpu_torchrun.py", "2", "1", "--batch_size", "64"),
        loss=None,  # the tutorial prints no loss, and its data and weights are unseeded
        # Not anchored: the two ranks share one pipe, and their lines can run into each other.
        progress=r"\[GPU\d+\] Epoch \d+ \| Batchsize: \d+ \| Steps: \d+",
    ),
)


def recipes_for(path: Path) -> list[tuple[Recipe, Path]]:
    """The recipes whose project is this checkout or lies inside it."""
    found = []
    for recipe in RECIPES:
        project = path / recipe.subdir
        if (project / recipe.marker).is_file():
            found.append((recipe, project))
        elif recipe.subdir != "." and path.name == Path(recipe.subdir).name and (path / recipe.marker).is_file():
            found.append((recipe, path))
    return found


# --------------------------------------------------------------------------- running things


@dataclass
class Run:
    """One program run: how it ended and what it printed."""

    exit_code: int | None
    lines: list[str]
    wall_s: float
    stopped: bool = False  # stopped by this script after `stop_after` loss lines
    timed_out: bool = False


def run_program(command: list[str], cwd: Path, env: dict[str, str], timeout: int, stop: re.Pattern | None, stop_after: int | None) -> Run:
    """Run `command`, stdout and stderr merged, line by line; stop its process group after
    `stop_after` lines matching `stop`, or at `timeout`."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
        start_new_session=True,
    )
    lines: list[str] = []
    matched = 0
    enough = threading.Event()

    def read() -> None:
        nonlocal matched
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if stop is not None and stop_after is not None and stop.search(line):
                matched += 1
                if matched >= stop_after:
                    enough.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    stopped = timed_out = False
    deadline = started + timeout
    while process.poll() is None:
        if enough.wait(0.2):
            stopped = True
            break
        if time.perf_counter() > deadline:
            timed_out = True
            break
    if process.poll() is None:
        _stop_group(process)
    reader.join(10)
    return Run(process.returncode, lines, time.perf_counter() - started, stopped, timed_out)


def _stop_group(process: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGINT, 10), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def accelport(*args: str, cwd: Path | None = None) -> tuple[subprocess.CompletedProcess, float]:
    started = time.perf_counter()
    done = subprocess.run([*ACCELPORT, *args], cwd=cwd, capture_output=True, text=True, check=False)
    return done, time.perf_counter() - started


def _error(run: Run) -> str | None:
    """Why a run did not succeed, in one line: the exception that ended it (a worker's, under torchrun)."""
    if run.stopped or run.exit_code == 0:
        return None
    if run.timed_out:
        return "timed out"
    raised = []
    for line in run.lines:
        line = re.sub(r"^\[(default)?rank\d+\]:\s?", "", line).strip()
        if re.match(r"^[\w.]+(Error|Exception|Interrupt)\b", line):
            raised.append(line)
    causes = [line for line in raised if "ChildFailedError" not in line] or raised
    if causes:
        return causes[-1][:300]
    return f"exit code {run.exit_code}: {(run.lines[-1] if run.lines else '').strip()[:300]}"


def _environment(recipe: Recipe, tree: Path, first: list[str]) -> dict[str, str]:
    """The program's environment: unbuffered output, the recipe's variables, and `first` ahead of its PYTHONPATH."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONPATH", None)  # this script's own (accelport's source) is given in `first` where wanted
    paths = list(first)
    for key, value in recipe.env.items():
        value = value.replace("{tree}", str(tree))
        if key == "PYTHONPATH":
            paths.append(value)
        else:
            env[key] = value
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def _accelport_paths() -> list[str]:
    """Where this script imports accelport from (its source tree, when run with PYTHONPATH=src)."""
    return [p for p in sys.path if p and Path(p, "accelport", "__init__.py").is_file()][:1]


def _losses(run: Run, pattern: str) -> list[float]:
    regex = re.compile(pattern)
    return [float(m.group("loss")) for line in run.lines if (m := regex.search(line))]


def _write_jsonl(path: Path, losses: list[float]) -> None:
    # The step is the loss line's number: programs restart their own count each epoch.
    path.write_text("".join(json.dumps({"step": i, "loss": loss}) + "\n" for i, loss in enumerate(losses)), encoding="utf-8")


def _imports_accelport(tree: Path) -> list[str]:
    """The Python files of `tree` that import accelport (a migrated project must not)."""
    found = []
    for path in sorted(tree.rglob("*.py")):
        if ".git" in path.parts:
            continue
        try:
            module = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(module):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            )
            if any(n == "accelport" or n.startswith("accelport.") for n in names):
                found.append(str(path.relative_to(tree)))
                break
    return found


def _copy(project: Path, into: Path) -> None:
    shutil.copytree(project, into, symlinks=True, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.pyc"))


# --------------------------------------------------------------------------- one recipe


def measure(recipe: Recipe, project: Path, python: str, scratch: Path, with_accelport: bool) -> dict:
    row: dict = {"repo": recipe.name, "path": str(project), "python": python, "command": " ".join(recipe.command)}
    if recipe.needs:
        check = subprocess.run([python, "-c", f"import {recipe.needs}"], capture_output=True, text=True, check=False)
        if check.returncode != 0:
            last = (check.stderr.strip().splitlines() or ["?"])[-1]
            row["error"] = f"{python} cannot import {recipe.needs} ({last}); give one that can with --python {recipe.name}=PYTHON"
            return row
    migrated, original = scratch / "migrated", scratch / "original"
    for tree in (migrated, original):
        _copy(project, tree)
        if recipe.setup is not None:
            recipe.setup(tree)
    git = {**os.environ, **GIT_ENV}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "as fetched, with fake data"]):
        subprocess.run(["git", "-C", str(migrated), *args], check=True, capture_output=True, env=git)

    before, _ = accelport("inventory", "--format", "json", str(migrated))
    inventory = json.loads(before.stdout)["summary"]
    row.update(files=inventory["files_scanned"], findings=inventory["findings"])

    changes = scratch / "accelport-changes.json"
    done, wall = accelport("migrate", "--write", "--changes", str(changes), "--format", "json", str(migrated))
    row["migrate_wall_s"] = round(wall, 2)
    row["migrate_exit"] = done.returncode
    if done.returncode not in (0, 1):
        row["error"] = f"migrate --write failed: {done.stderr.strip()[-300:]}"
        return row
    result = json.loads(changes.read_text(encoding="utf-8"))
    summary = result["summary"]
    row.update(
        files_changed=summary["files_changed"],
        rewrites=summary["rewritten"],
        added=summary["added"],
        marked=summary["marked"],
        skipped=[f"{s['path'].removeprefix(str(migrated) + os.sep)}: {s['reason']}" for s in result["skipped"]],
        left_alone=[f"{f['path']}: {f['error']}" for f in result["files"] if f["error"]],
    )
    after, _ = accelport("inventory", "--format", "json", str(migrated))
    report = json.loads(after.stdout)
    row["markers_left"] = report["summary"]["acknowledged"]
    row["markers_by_rule"] = _count(f["rule_id"] for f in report["findings"] if f.get("acknowledged"))
    row["findings_left_unmarked"] = sum(
        1 for f in report["findings"] if not f.get("acknowledged") and f["route"] == "A" and not f["location"]["path"].endswith(".ipynb")
    )
    row["imports_accelport"] = _imports_accelport(migrated)

    bin_dir = str(Path(python).parent)
    command = [part.replace("{python}", python).replace("{bin}", bin_dir) for part in recipe.command]
    stop = re.compile(recipe.loss) if recipe.loss else None
    first = _accelport_paths()
    if not with_accelport:
        blocker = scratch / "no-accelport"
        blocker.mkdir()
        (blocker / "accelport.py").write_text(_BLOCKER, encoding="utf-8")
        first = [str(blocker)]
    after_migrate = run_program(command, migrated, _environment(recipe, migrated, first), recipe.timeout, stop, recipe.stop_after)
    inventory_path = scratch / "accelport-run.json"
    under_run = run_program(
        [*ACCELPORT, "run", "--inventory", str(inventory_path), "--", *command],
        original, _environment(recipe, original, _accelport_paths()), recipe.timeout, stop, recipe.stop_after,
    )
    (scratch / "migrated.log").write_text("\n".join(after_migrate.lines) + "\n", encoding="utf-8")
    (scratch / "original-under-run.log").write_text("\n".join(under_run.lines) + "\n", encoding="utf-8")
    row["runs_after_migrate"] = _verdict(after_migrate, recipe)
    row["runs_under_run"] = _verdict(under_run, recipe)
    if inventory_path.exists():
        redirected = json.loads(inventory_path.read_text(encoding="utf-8"))
        row["redirected_under_run"] = {"apis": redirected["summary"]["apis"], "processes": redirected["processes"]}
    row["curves"] = _curves(recipe, after_migrate, under_run, scratch)
    return row


def _verdict(run: Run, recipe: Recipe) -> dict:
    error = _error(run)
    verdict: dict = {"ok": error is None, "wall_s": round(run.wall_s, 1)}
    if recipe.loss:
        verdict["loss_lines"] = len(_losses(run, recipe.loss))
    if run.stopped:
        verdict["stopped_after"] = recipe.stop_after
    if error:
        verdict["error"] = error
    return verdict


def _curves(recipe: Recipe, test: Run, ref: Run, scratch: Path) -> dict:
    if recipe.loss is None:
        pattern = re.compile(recipe.progress or r"(?!)")
        seen = [sorted({m.group(0) for line in run.lines for m in pattern.finditer(line)}) for run in (ref, test)]
        agree = bool(seen[0]) and seen[0] == seen[1]
        return {
            "verdict": "n/a: the program prints no loss (and seeds neither data nor weights); its progress lines "
            + ("agree" if agree else "differ"),
            "progress_lines": len(seen[1]),
        }
    losses = {name: _losses(run, recipe.loss) for name, run in (("ref", ref), ("test", test))}
    if not losses["ref"] or not losses["test"]:
        return {"verdict": "not compared: " + " and ".join(f"no loss in the {n} run" for n, v in losses.items() if not v)}
    for name, values in losses.items():
        _write_jsonl(scratch / f"{name}.jsonl", values)
    done, _ = accelport("curves", str(scratch / "ref.jsonl"), str(scratch / "test.jsonl"), "--format", "json")
    if done.returncode not in (0, 1):
        return {"verdict": f"curves failed: {done.stderr.strip()[-300:]}"}
    report = json.loads(done.stdout)
    verdict = report.get("verdict")
    return {
        "verdict": verdict if isinstance(verdict, str) else ("pass" if done.returncode == 0 else "fail"),
        "steps": min(len(losses["ref"]), len(losses["test"])),
        "final_loss": {"under_run": losses["ref"][-1], "after_migrate": losses["test"][-1]},
        "max_rel_gap": max(abs(t - r) / abs(r) if r else abs(t) for r, t in zip(losses["ref"], losses["test"], strict=False)),
    }


def _count(items) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return dict(sorted(counts.items()))


# --------------------------------------------------------------------------- output


def markdown(rows: list[dict]) -> str:
    head = ("repo", "files", "findings", "rewrites", "markers left", "runs after migrate", "runs under `run`", "curves", "migrate wall", "imports accelport")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        if "runs_after_migrate" not in row:
            lines.append(f"| {row['repo']} | " + " | ".join(["—"] * (len(head) - 2)) + f" | {row.get('error', '')} |")
            continue

        def ran(verdict: dict) -> str:
            text = "yes" if verdict["ok"] else f"no: `{verdict.get('error', '')}`"
            return text + (f" (stopped after {verdict['stopped_after']} steps)" if verdict.get("stopped_after") else "")

        curves = row["curves"]["verdict"]
        if "max_rel_gap" in row["curves"]:
            curves += f" ({row['curves']['steps']} steps, max gap {row['curves']['max_rel_gap']:.2%})"
        lines.append(
            f"| {row['repo']} | {row['files']} | {row['findings']} | {row['rewrites']} | {row['markers_left']} | "
            f"{ran(row['runs_after_migrate'])} | {ran(row['runs_under_run'])} | {curves} | {row['migrate_wall_s']:.1f} s | "
            f"{', '.join(row['imports_accelport']) or 'no'} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", type=Path, metavar="PATH", help="checkouts of the repositories")
    parser.add_argument("--python", action="append", default=[], metavar="RECIPE=PYTHON", help="the interpreter for one recipe's program")
    parser.add_argument("--only", action="append", default=[], metavar="RECIPE", help="only these recipes")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep each recipe's copies, logs and change list under DIR")
    parser.add_argument("--with-accelport", action="store_true", help="let migrated code import accelport")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table instead of JSON")
    parser.add_argument("--render", type=Path, metavar="TABLE.json", help="print this saved JSON table as Markdown; run nothing")
    args = parser.parse_args()
    if args.render:
        print(markdown(json.loads(args.render.read_text(encoding="utf-8"))), end="")
        return
    if not args.paths:
        parser.error("give at least one PATH (or --render TABLE.json)")
    pythons = dict(item.split("=", 1) for item in args.python)
    known = {r.name for r in RECIPES}
    for name in [*pythons, *args.only]:
        if name not in known:
            parser.error(f"{name}: no such recipe; the recipes are {', '.join(sorted(known))}")
    rows = []
    for path in args.paths:
        matched = recipes_for(path.resolve())
        if not matched:
            parser.error(f"{path}: no recipe matches this folder; the recipes are {', '.join(sorted(known))}")
        for recipe, project in matched:
            if args.only and recipe.name not in args.only:
                continue
            python = pythons.get(recipe.name, sys.executable)
            if args.keep:
                scratch = args.keep / recipe.name
                shutil.rmtree(scratch, ignore_errors=True)
                scratch.mkdir(parents=True)
                rows.append(measure(recipe, project, python, scratch, args.with_accelport))
            else:
                with tempfile.TemporaryDirectory(prefix=f"accelport-{recipe.name}-") as scratch:
                    rows.append(measure(recipe, project, python, Path(scratch), args.with_accelport))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(markdown(rows) if args.markdown else json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

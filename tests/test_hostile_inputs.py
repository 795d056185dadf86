"""Every command that reads a path, given a hostile one: one line and the documented exit code, no traceback, no hang.

The kinds of path, for each input a command reads:

- missing, directory, binary (bytes that are not UTF-8), unreadable, FIFO (a reader that
  opens it waits for a writer forever), symlink-out (a link to a text file outside the
  working folder that is not a valid input), huge (a sparse 64 GiB file: reading it whole
  is a MemoryError or minutes of zeros);
- control: a valid input under a name holding ESC sequences, BEL, a newline and HTML. It
  must work as under a plain name (same exit code) and print no raw control character.

"unreadable" is a file with mode 000; as root (which reads such files) it is a link to
/proc/sys/vm/drop_caches instead, which is write-only even for root (EACCES on read).

Commands run in this process through `accelport.cli.main`; a FIFO that a command opens
is unblocked by a watchdog after 10 s and the case fails as a hang. The huge cases run
together in one child process whose address space is capped at 2 GiB, so a reader that
regresses to reading the file whole fails there at once instead of filling this machine.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest

from accelport.cli import main

REPO = Path(__file__).resolve().parents[1]
POOLS = REPO / "tests" / "pools" / "data"
KINDS = ("missing", "directory", "binary", "unreadable", "fifo", "symlink-out", "huge", "control")
HOSTILE_NAME = "in\x1b[31mred\x1b]0;title\x07\nput<img src=x onerror=alert(1)>"
STAT = [0.0, 1.0, 0.5, 1.0, 0.5, 0, 0, 0]


@dataclass(frozen=True)
class Command:
    """`argv(P)` reads path P as `good` does; `codes` overrides the exit code 2 for some kinds."""

    name: str
    suffix: str
    good: str  # the world's valid input of this kind
    argv: object
    codes: tuple[tuple[str, int], ...] = ()


def _world(root: Path) -> dict[str, Path]:
    """Valid inputs of every kind the commands read."""
    root.mkdir()
    good: dict[str, Path] = {}
    dump = root / "dump"
    dump.mkdir()
    header = {"k": "header", "format": "accelport-dump", "version": 1, "mode": "stats"}
    entry = {"dtype": "float32", "shape": [4], "stats": STAT}
    op = {"k": "op", "seq": 0, "step": 0, "phase": "forward", "op": "aten.relu.default", "module": "", "call": 0,
          "line": "x.py:1", "args": {}, "in": [entry], "out": [{**entry, "src": 0}]}  # fmt: skip
    (dump / "manifest.jsonl").write_text("\n".join(json.dumps(r) for r in (header, op, {"k": "end"})) + "\n")
    good["dump"] = dump
    good["py"] = root / "good.py"
    good["py"].write_text("import torch\nx = torch.zeros(1).cuda()\n")
    good["csv"] = root / "loss.csv"
    good["csv"].write_text("step,loss\n" + "".join(f"{s},{2.0 / (s + 1)}\n" for s in range(12)))
    from accelport.verify.perf import bench

    result = bench.BenchResult(scenario="step", times_s=[0.01] * 10, warmup=2, stop_reason="converged", samples_per_step=8)
    good["bench"] = root / "bench.json"
    good["bench"].write_text(json.dumps(result.to_dict()))
    good["trace"] = root / "trace.json"
    good["trace"].write_text(json.dumps({"traceEvents": [
        {"ph": "X", "name": "aten::mm", "cat": "cpu_op", "ts": 0, "dur": 10, "pid": 1, "tid": 1}]}))  # fmt: skip
    good["map"] = root / "map.toml"
    good["map"].write_text('[rename.ops]\n"aten.relu.default" = "aten.relu.default"\n')
    good["oplist"] = root / "ops.json"
    good["oplist"].write_text(json.dumps({"vendor": "npu", "ops": ["relu.default"]}))
    good["spec"] = root / "spec.toml"
    good["spec"].write_text(f'[[performance]]\nresult = "{good["bench"]}"\nbaseline = "{good["bench"]}"\n')
    good["job"] = POOLS / "golden-job.toml"
    good["pools"] = POOLS / "golden-pools.toml"
    good["signals"] = root / "signals.json"
    good["signals"].write_text("{}")
    good["knowledge"] = root / "site.toml"
    good["knowledge"].write_text("")
    good["sbatch"] = root / "job.sbatch"
    good["sbatch"].write_text("#!/bin/bash\n#SBATCH --job-name=x\nsrun true\n")
    return good


def _commands(good: dict[str, Path], out: Path) -> list[Command]:
    return [
        Command("inventory", ".py", "py", lambda p: ["inventory", p], (("symlink-out", 0),)),
        Command("migrate", ".py", "py", lambda p: ["migrate", p],
                (("binary", 1), ("unreadable", 1), ("huge", 1), ("symlink-out", 0))),  # a skipped file: exit 1
        Command("ops --oplist", ".json", "oplist", lambda p: ["ops", "--lists", "--oplist", p]),
        Command("compare REF", "", "dump", lambda p: ["compare", p, good["dump"]]),
        Command("compare TEST", "", "dump", lambda p: ["compare", good["dump"], p]),
        Command("compare --map", ".toml", "map", lambda p: ["compare", good["dump"], good["dump"], "--map", p]),
        Command("curves REF", ".csv", "csv", lambda p: ["curves", p, good["csv"]]),
        Command("curves TEST", ".csv", "csv", lambda p: ["curves", good["csv"], p]),
        Command("curves --seed", ".csv", "csv", lambda p: ["curves", good["csv"], good["csv"], "--seed", p]),
        Command("bench --result", ".json", "bench", lambda p: ["bench", "--result", p]),
        Command("bench --baseline", ".json", "bench", lambda p: ["bench", "--result", good["bench"], "--baseline", p]),
        Command("profile-diff BASE", ".json", "trace", lambda p: ["profile-diff", p, good["trace"]]),
        Command("profile-diff TEST", ".json", "trace", lambda p: ["profile-diff", good["trace"], p]),
        Command("accept", ".toml", "spec", lambda p: ["accept", p, "--output-dir", out / "accept"]),
        Command("pools render JOB", ".toml", "job", lambda p: ["pools", "render", p, "--pools", good["pools"]]),
        Command("pools render --pools", ".toml", "pools", lambda p: ["pools", "render", good["job"], "--pools", p]),
        Command("pools validate --files", ".sbatch", "sbatch", lambda p: ["pools", "validate", "--files", p],
                (("symlink-out", 1),)),  # text that is not a batch script: the check fails
        Command("pools route --signals", ".json", "signals",
                lambda p: ["pools", "route", good["job"], "--pools", good["pools"], "--signals", p]),
        Command("--knowledge", ".toml", "knowledge", lambda p: ["--knowledge", p, "backends"]),
    ]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    good = _world(root / "good")
    secret = root / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("TOPSECRET-CONTENT\n")
    return root, good, secret, _commands(good, root / "out")


COMMANDS = [c.name for c in _commands({k: Path(k) for k in
            ("dump", "py", "csv", "bench", "trace", "map", "oplist", "spec", "job", "pools", "signals", "knowledge", "sbatch")},
            Path("out"))]  # fmt: skip


def _hostile(kind: str, folder: Path, command: Command, good: dict[str, Path], secret: Path) -> Path:
    folder.mkdir()
    path = folder / ("input" + command.suffix)
    if kind == "missing":
        return folder / "nope"
    if kind == "directory":
        path.mkdir()
    elif kind == "binary":
        path.write_bytes(bytes(range(256)) * 4 + b"\xff\xfe\x00")
    elif kind == "unreadable":
        if os.geteuid() == 0:
            path.symlink_to("/proc/sys/vm/drop_caches")  # root reads mode-000 files; this one it cannot
        else:
            path.write_text("x")
            path.chmod(0)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink-out":
        path.symlink_to(secret)
    elif kind == "huge":
        with open(path, "wb") as handle:
            handle.truncate(1 << 36)  # sparse: no disk used
    elif kind == "control":
        path = folder / (HOSTILE_NAME + command.suffix)
        source = good[command.good]
        if source.is_dir():
            shutil.copytree(source, path)
        else:
            shutil.copy(source, path)
    return path


def _run(argv: list[object], fifo: Path | None, watchdog) -> tuple[int, str, str, bool]:
    out, err = io.StringIO(), io.StringIO()
    guard = watchdog(fifo) if fifo is not None and watchdog is not None else contextlib.nullcontext(None)
    with guard as hung, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
        except BaseException:
            code = -1
            err.write(traceback.format_exc())
    return code, out.getvalue(), err.getvalue(), bool(hung is not None and hung.is_set())


HUGE_CHILD = """
import json, resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
sys.path.insert(0, sys.argv[1])
import test_hostile_inputs as matrix
root = Path(sys.argv[2])
good = matrix._world(root / "good")
results = {}
for command in matrix._commands(good, root / "out"):
    path = matrix._hostile("huge", root / command.name.replace(" ", "_").replace("-", ""), command, good, root)
    code, out, err, _ = matrix._run(command.argv(path), None, None)
    results[command.name] = [code, out, err, str(path)]
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def huge_results(tmp_path_factory) -> dict[str, list]:
    root = tmp_path_factory.mktemp("huge")
    import accelport

    source = Path(accelport.__file__).resolve().parents[1]  # the accelport this run tests
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(source), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", HUGE_CHILD, str(REPO / "tests"), str(root)],
                          capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", COMMANDS)
def test_hostile_path(world, tmp_path, name, kind, fifo_watchdog, request):
    _, good, secret, commands = world
    command = next(c for c in commands if c.name == name)
    expected = dict(command.codes).get(kind, 2)
    if kind == "huge":
        code, out, err, path_text = request.getfixturevalue("huge_results")[name]
        path, hung = Path(path_text), False
    else:
        path = _hostile(kind, tmp_path / "case", command, good, secret)
        if kind == "control":
            expected, _, plain_err, _ = _run(command.argv(good[command.good]), None, fifo_watchdog)
            assert expected in (0, 1), plain_err  # the valid input itself works
        code, out, err, hung = _run(command.argv(path), path if kind == "fifo" else None, fifo_watchdog)
    assert not hung, f"{name} blocked on a FIFO"
    assert "Traceback" not in err, err
    assert code == expected, (code, err)
    if code == 2:
        assert len(err.strip().splitlines()) == 1, err
        assert "accelport: error: " in err and (kind == "control" or str(path.parent) in err), err
    for char in ("\x1b", "\x07"):
        assert char not in out and char not in err, (out + err)[:500]


# Path arguments the matrix does not feed hostile inputs, and why. Everything else the parser
# takes as a path must be in COMMANDS: a new command's input is covered, or listed here.
NOT_INPUTS = {
    ("*", "output"): "an output (-o), written atomically",
    ("*", "output_dir"): "an output folder (accept's is checked in tests/cli/test_cli_errors.py)",
    ("pools submit", "output_dir"): "the folder the job runs in, on the cluster",
    ("migrate", "changes"): "an output: the change list --write writes",
    ("run", "inventory"): "an output: the dynamic inventory",
    ("curves", "png"): "an output",
    ("bench", "save"): "an output",
    ("soak", "save"): "an output",
    ("comm", "save"): "an output",
    ("profile", "output_trace"): "an output",
    ("demo", "examples"): "the examples of this checkout, read by the demo's own steps",
    ("ops", "factory"): "a Python file the command imports and runs, as python would",
    ("kernels tune", "table"): "a tuned table, read by `kernels tune` after it compiles kernels (tests/kernels/test_configs.py)",
    ("pools validate", "pools"): "the same loader as `pools render --pools`, which the matrix covers",
    ("pools validate", "job"): "the same loader as `pools render JOB`",
    ("pools route", "pools"): "the same loader as `pools render --pools`",
    ("pools route", "job"): "the same loader as `pools render JOB`",
    ("pools submit", "pools"): "the same loader as `pools render --pools`",
    ("pools submit", "job"): "the same loader as `pools render JOB`",
    ("pools submit", "signals"): "the same loader as `pools route --signals`",
}
COVERED = {
    ("inventory", "paths"), ("migrate", "paths"), ("ops", "oplist"), ("compare", "ref"), ("compare", "test"),
    ("compare", "map"), ("curves", "ref"), ("curves", "tests"), ("curves", "seed"), ("bench", "result"),
    ("bench", "baseline"), ("profile-diff", "base"), ("profile-diff", "test"), ("accept", "spec"),
    ("pools render", "job"), ("pools render", "pools"), ("pools validate", "files"), ("pools route", "signals"),
    ("", "knowledge"),
}  # fmt: skip
_PATH_METAVARS = {"PATH", "FILE", "DIR", "LOG", "TEST", "FILE.json", "MODULE:FACTORY"}
_PATH_POSITIONALS = {"ref", "test", "base", "spec", "job", "paths", "tests"}


def _path_arguments() -> set[tuple[str, str]]:
    import argparse

    from accelport.cli import build_parser

    found = set()

    def walk(parser: argparse.ArgumentParser, command: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{command} {name}".strip())
            elif action.metavar in _PATH_METAVARS or (not action.option_strings and action.dest in _PATH_POSITIONALS):
                found.add((command, action.dest))

    walk(build_parser(), "")
    return found


def test_every_path_the_parser_takes_is_in_the_matrix_or_listed_as_not_an_input():
    arguments = _path_arguments()
    uncovered = {a for a in arguments if a not in COVERED and a not in NOT_INPUTS and ("*", a[1]) not in NOT_INPUTS}
    assert not uncovered, f"path arguments with no hostile-input case: {sorted(uncovered)}"
    assert arguments >= COVERED, sorted(COVERED - arguments)  # the matrix names real arguments
    assert len(COMMANDS) == len(COVERED)

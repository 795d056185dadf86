"""`accelport dump --output-dir DIR -- COMMAND`: run a PyTorch program and record every op, parameter and input it computes.

Records statistics (min, max, mean, L2, abs-mean, NaN/Inf/zero counts) of every ATen op's
inputs and outputs, with module path, call index and source line, into DIR/manifest.jsonl;
with --tensors, full tensors too (safetensors, one file per step). The manifest is
flushed as the run goes: a killed run leaves a readable, truncated dump. In code, use
`with accelport.verify.capture(DIR): ...` instead.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess

from accelport.cli._conventions import add_deprecated
from accelport.cli._output import emit
from accelport.errors import UserError

ORDER = 50


def _filters(values: list[str], flag: str) -> tuple[list[str], list[str]]:
    modules, ops = [], []
    for value in values:
        kind, _, pattern = value.partition(":")
        if kind == "module" and pattern:
            modules.append(pattern)
        elif kind == "op" and pattern:
            ops.append(pattern)
        else:
            raise UserError(
                f"{flag} {value}: write module:GLOB or op:GLOB (for example module:blocks.0.* or op:aten.addmm*)"
            )
    return modules, ops


def run(args: argparse.Namespace) -> int:
    command = list(args.program)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UserError(
            "accelport dump: give the command to run after --, for example: accelport dump --output-dir run -- python train.py"
        )
    if not args.output_dir:
        raise UserError("give --output-dir DIR: a new folder for the dump")
    folder = os.path.abspath(args.output_dir)
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise UserError(f"{args.output_dir}: is a file, not a folder; give --output-dir a new folder")
    if os.path.exists(folder) and os.listdir(folder):
        raise UserError(f"{args.output_dir}: folder is not empty; dump into a new folder")
    modules, ops = _filters(args.filter, "--filter")
    tensor_modules, tensor_ops = _filters(args.tensor_filter, "--tensor-filter")
    from accelport.verify.numerics.dump import ENV_VAR, PHASES, bootstrap_dir, parse_steps

    parse_steps(args.steps)  # fail early on a bad range
    phases = args.phases.split(",") if args.phases else ["forward", "backward", "other"]
    for phase in phases:
        if phase not in PHASES:
            raise UserError(
                f"--phases {args.phases}: unknown phase {phase!r}; choose from {', '.join(PHASES)}"
            )
    # Make the folder now: a path that cannot be created is the user's to fix, before the program runs.
    try:
        os.makedirs(folder, exist_ok=True)
        probe = os.path.join(folder, ".accelport-write-test")
        with open(probe, "w", encoding="utf-8"):
            pass
        os.unlink(probe)
    except OSError as exc:
        why = "a part of the path is a file, not a folder" if isinstance(exc, FileExistsError | NotADirectoryError) else exc.strerror or str(exc)
        raise UserError(f"{args.output_dir}: cannot create or write the dump folder ({why}); choose another --output-dir") from None
    options = {
        "dir": folder,
        "tensors": args.tensors,
        "steps": args.steps,
        "modules": modules,
        "ops": ops,
        "tensor_modules": tensor_modules,
        "tensor_ops": tensor_ops,
        "phases": phases,
        "checksums": args.checksums,
        "step_on": args.step_on,
        "views": args.views,
    }
    env = dict(os.environ)
    env[ENV_VAR] = json.dumps(options)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(bootstrap_dir()), env.get("PYTHONPATH", "")) if p
    )
    try:
        code = subprocess.call(command, env=env)
    except FileNotFoundError:
        raise UserError(f"{command[0]}: command not found; check the command after --") from None
    if not args.quiet:
        emit(_summary(folder, code), None)
    return code


def _summary(folder: str, code: int) -> str:
    from pathlib import Path

    from accelport.verify.numerics import dumpfile

    roots = [Path(folder)]
    if Path(folder).is_dir():
        roots += sorted(
            p for p in Path(folder).iterdir() if p.is_dir() and p.name.startswith(("rank", "pid"))
        )
    lines = []
    for root in roots:
        if not (root / dumpfile.MANIFEST).exists():
            continue
        info = dumpfile.DumpInfo(path=root, header={})
        steps = set()
        for record in dumpfile.iter_records(root, info):
            steps.add(record.get("step"))
        state = f"TRUNCATED ({info.truncated_reason})" if info.truncated else "complete"
        lines.append(
            f"accelport dump: {root}: {info.records} records over {len(steps)} steps, {info.header.get('mode')} mode, {state}"
        )
    if not lines:
        lines.append(
            f"accelport dump: {folder}: nothing recorded (the command ran no PyTorch ops, or did not start Python)"
        )
    if code != 0:
        lines.append(f"accelport dump: the command exited with {code}")
    return "\n".join(lines) + "\n"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "dump",
        help="run a PyTorch program and record every op's numerics (statistics or full tensors)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--output-dir", metavar="DIR", help="new folder for the dump (per rank: DIR/rankN); required")
    add_deprecated(parser, "dump", "-o", "--output-dir", "output_dir", "DIR")
    parser.add_argument(
        "--steps",
        metavar="N..M",
        help="record only these steps (N, N..M or N..); a step ends at optimizer.step()",
    )
    parser.add_argument(
        "--tensors",
        action="store_true",
        help="save full tensors as well (safetensors, one file per step)",
    )
    parser.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="module:GLOB|op:GLOB",
        help="record only matching records; repeatable",
    )
    parser.add_argument(
        "--tensor-filter",
        action="append",
        default=[],
        metavar="module:GLOB|op:GLOB",
        help="with --tensors: keep full tensors only for matching records",
    )
    parser.add_argument(
        "--phases",
        metavar="LIST",
        help="comma-separated: forward,backward,optimizer,other (default: forward,backward,other)",
    )
    parser.add_argument(
        "--checksums",
        action="store_true",
        help="CRC-32 of every tensor (bit-exact comparison; copies tensors to the host)",
    )
    parser.add_argument(
        "--views",
        action="store_true",
        help="record view ops (view, reshape, transpose, expand, detach...) as records of their "
        "own; by default a view is listed where it is used, with the statistics and producer "
        "of the tensor it views",
    )
    parser.add_argument(
        "--step-on",
        choices=("optimizer", "forward", "manual"),
        default="optimizer",
        help="what ends a step (default: %(default)s)",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no summary line after the command"
    )
    # Read as args.program; the usage line still shows it as `command`.
    parser.add_argument(
        "program",
        metavar="command",
        nargs=argparse.REMAINDER,
        help="-- then the command to run, e.g. -- python train.py --steps 2",
    )
    parser.set_defaults(handler=run)

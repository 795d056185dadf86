"""`accelport profile` and `accelport profile-diff`: per-op time from torch.profiler traces, and where two traces differ.

    accelport profile --steps 3 --trace cpu.json -- python train.py     # loop calls accelport.verify.perf.bench.step()
    accelport profile-diff cuda.json cpu.json --format html -o diff.html
    accelport profile --steps 3 --captures 3 --output-dir cpu -- python train.py   # cpu/capture-1.json ... -3.json
    accelport profile-diff cuda/ cpu/       # each side a folder of captures: each row's drift between captures

profile-diff reads Chrome/Kineto traces (torch.profiler on CUDA, ROCm, XPU, CPU)
and torch_npu's trace_view.json, plain or gzip. Rows are top-level ATen ops per
module, matched by (module, op), never by kernel name; their deltas add up to
the end-to-end delta. A side may be a folder of several captures of the same
program (3 is a good number); its figures are then the mean over the captures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from accelport.cli._conventions import add_deprecated, add_output, add_output_dir
from accelport.cli._output import check_range, emit
from accelport.errors import UserError

ORDER = 61
DEFAULT_TRACE = "accelport-trace.json"
DEFAULT_CAPTURES_DIR = "accelport-captures"


def _python_script(command: list[str]) -> tuple[str, list[str]]:
    if command and Path(command[0]).name.startswith("python"):
        if len(command) < 2 or command[1].startswith("-"):
            raise UserError("profile runs a Python script: use `-- python script.py ARGS` (no -m or -c)")
        return command[0], command[1:]
    if command and command[0].endswith(".py"):
        return sys.executable, command
    raise UserError("profile runs a Python script: put `python script.py ARGS` after --")


def run_profile(args: argparse.Namespace) -> int:
    from accelport.verify.perf import profile

    command = list(args.command or [])
    if command and command[0] == "--":
        command = command[1:]
    interpreter, script = _python_script(command)
    if not Path(script[0]).is_file():
        what = "is a folder, not a script" if Path(script[0]).is_dir() else "not found"
        raise UserError(f"{script[0]}: script {what}; give the Python file to profile, e.g. `accelport profile -- python train.py`")
    check_range("--steps", args.steps, low=1)
    check_range("--warmup", args.warmup, low=0)
    check_range("--captures", args.captures, low=1)
    trace = _trace_target(args)
    child = [interpreter, "-m", "accelport.verify.perf.profile", "--trace", str(trace), "--warmup", str(args.warmup)]
    if args.steps:
        child += ["--steps", str(args.steps)]
    if args.captures > 1:
        child += ["--captures", str(args.captures)]
    env = dict(os.environ)
    env.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    if not args.steps:
        env.pop("ACCELPORT_STEP_LOG", None)
    try:
        code = subprocess.run([*child, *script], env=env, check=False).returncode
    except OSError as exc:
        raise UserError(f"{interpreter}: cannot start ({exc.strerror}); check the interpreter after --") from None
    paths = profile.capture_paths(trace, args.captures) if args.captures > 1 else [trace]
    if code != 0 or not all(path.is_file() for path in paths):
        raise UserError(f"{script[0]}: profiling failed (exit code {code}); see the output above")
    if args.captures > 1:
        summary = profile.merge_captures(profile.profile_traces(paths, args.steps_used))
        where = f"{len(paths)} captures written to {trace} ({paths[0].name} ... {paths[-1].name})"
    else:
        summary = profile.profile_trace(trace, args.steps_used)
        where = f"trace written to {trace}"
    if args.format == "json":
        head = {"output_dir": str(trace)} if args.captures > 1 else {"trace": str(trace)}
        data = {**head, **summary.to_dict(),
                "rows": [{"module": k[0], "op": k[1], **s.to_dict()} for k, s in summary.rows.items()]}
        emit(json.dumps(data, indent=2) + "\n", args.output)
    else:
        shown = dataclasses.replace(summary, path=str(trace))  # the figures are of the folder's captures, not the first
        emit(f"{where}\n" + profile.render_single(shown), args.output)
    return 0


def _trace_target(args: argparse.Namespace) -> Path:
    """The trace file to write, or with several captures the folder to write them into."""
    if args.captures > 1:
        if args.output_trace is not None:
            raise UserError(f"--trace {args.output_trace}: one file holds one capture; with --captures "
                            f"{args.captures} give --output-dir DIR for the folder of captures")
        if not args.steps:
            raise UserError(f"--captures {args.captures}: needs --steps N, the marked steps each capture profiles")
        given = args.output_dir or DEFAULT_CAPTURES_DIR
        folder = Path(given).resolve()
        if folder.exists() and not folder.is_dir():
            raise UserError(f"--output-dir {given}: is a file; give a folder to write the captures into")
        if not folder.parent.is_dir():
            raise UserError(f"--output-dir {given}: folder {folder.parent} does not exist; create it or pick another folder")
        return folder
    if args.output_dir is not None:
        raise UserError(f"--output-dir {args.output_dir}: a folder holds several captures; give --captures K "
                        "(K > 1), or --trace FILE for one")
    given = args.output_trace or DEFAULT_TRACE
    trace = Path(given).resolve()
    if not trace.parent.is_dir():
        raise UserError(f"--trace {given}: folder {trace.parent} does not exist; create it or pick another trace path")
    return trace


def run_diff(args: argparse.Namespace) -> int:
    from accelport.verify.perf import profile

    check_range("--top", args.top, low=0)
    check_range("--fail-above", args.fail_above, low=0, low_open=True)
    result = profile.diff_traces(profile.side_paths(args.base), profile.side_paths(args.test), args.steps_used)
    limit = None if args.top == 0 else args.top
    if args.format == "json":
        emit(json.dumps(result.to_dict(), indent=2) + "\n", args.output)
    elif args.format == "html":
        emit(profile.render_html(result, limit or len(result.rows)), args.output)
    else:
        emit(profile.render_text(result, limit or len(result.rows)), args.output)
    if args.fail_above is not None and result.ratio is not None and result.ratio > args.fail_above:
        return 1
    return 0


def _steps_used_option(parser: argparse.ArgumentParser) -> None:
    # Literal choices: importing accelport.verify.perf.profile here would slow down `accelport --help`.
    parser.add_argument("--steps-used", choices=("faster-half", "all"), default="faster-half",
                        help="profiled steps the figures average: the faster half (interference only ever "
                             "lengthens a step) or all of them (default: %(default)s)")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("profile", help="run a Python script under torch.profiler; per-op breakdown",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", dest="output_trace", metavar="FILE",
                        help=f"trace to write, one capture (default: {DEFAULT_TRACE})")
    add_deprecated(parser, "profile", "--output-trace", "--trace", "output_trace", "FILE")
    parser.add_argument("--steps", type=int, help="profile this many steps marked by bench.step() (default: the whole run)")
    parser.add_argument("--warmup", type=int, default=1, help="marked steps before profiling starts (default: %(default)s)")
    parser.add_argument("--captures", type=int, default=1, metavar="K",
                        help="profile K cycles of --warmup + --steps steps, one trace each, so profile-diff can "
                             "measure each row's drift between captures; 3 is a good number; needs --steps "
                             "(default: %(default)s)")
    add_output_dir(parser, "profile", "folder for the traces of --captures K > 1, capture-1.json ... "
                   f"(default: {DEFAULT_CAPTURES_DIR})")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    add_output(parser, "the breakdown")
    add_deprecated(parser, "profile", "--report", "-o/--output", "output", "FILE")
    _steps_used_option(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- python script.py ARGS")
    parser.set_defaults(handler=run_profile)

    diff = subparsers.add_parser("profile-diff", help="which ops got slower between two traces, and why",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    diff.add_argument("base", help="baseline trace (e.g. from CUDA), or a folder of captures of it")
    diff.add_argument("test", help="trace to explain (e.g. from the target device), or a folder of captures of it")
    diff.add_argument("--top", type=int, default=25, help="rows to show; the rest are summed in one row; 0 = all (default: %(default)s)")
    diff.add_argument("--format", choices=("table", "json", "html"), default="table")
    diff.add_argument("--fail-above", type=float, metavar="RATIO", help="exit 1 when test/base step time exceeds RATIO")
    diff.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    _steps_used_option(diff)
    diff.set_defaults(handler=run_diff)

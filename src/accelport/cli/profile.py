"""`accelport profile` and `accelport profile-diff`: per-op time from torch.profiler traces, and where two traces differ.

    accelport profile --steps 3 --trace cpu.json -- python train.py     # loop calls accelport.verify.perf.bench.step()
    accelport profile-diff cuda.json cpu.json --format html -o diff.html

profile-diff reads Chrome/Kineto traces (torch.profiler on CUDA, ROCm, XPU, CPU)
and torch_npu's trace_view.json, plain or gzip. Rows are top-level ATen ops per
module, matched by (module, op), never by kernel name; their deltas add up to
the end-to-end delta.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from accelport.cli._conventions import add_deprecated, add_output
from accelport.cli._output import check_range, emit
from accelport.errors import UserError

ORDER = 61


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
    trace = Path(args.output_trace).resolve()
    if not trace.parent.is_dir():
        raise UserError(f"--trace {args.output_trace}: folder {trace.parent} does not exist; create it or pick another trace path")
    check_range("--steps", args.steps, low=1)
    check_range("--warmup", args.warmup, low=0)
    child = [interpreter, "-m", "accelport.verify.perf.profile", "--trace", str(trace), "--warmup", str(args.warmup)]
    if args.steps:
        child += ["--steps", str(args.steps)]
    env = dict(os.environ)
    env.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    if not args.steps:
        env.pop("ACCELPORT_STEP_LOG", None)
    try:
        code = subprocess.run([*child, *script], env=env, check=False).returncode
    except OSError as exc:
        raise UserError(f"{interpreter}: cannot start ({exc.strerror}); check the interpreter after --") from None
    if code != 0 or not trace.is_file():
        raise UserError(f"{script[0]}: profiling failed (exit code {code}); see the output above")
    summary = profile.profile_trace(trace, args.steps_used)
    if args.format == "json":
        data = {"trace": str(trace), **summary.to_dict(),
                "rows": [{"module": k[0], "op": k[1], **s.to_dict()} for k, s in summary.rows.items()]}
        emit(json.dumps(data, indent=2) + "\n", args.output)
    else:
        emit(f"trace written to {trace}\n" + profile.render_single(summary), args.output)
    return 0


def run_diff(args: argparse.Namespace) -> int:
    from accelport.verify.perf import profile

    check_range("--top", args.top, low=0)
    check_range("--fail-above", args.fail_above, low=0, low_open=True)
    result = profile.diff_traces(args.base, args.test, args.steps_used)
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
    parser.add_argument("--trace", dest="output_trace", default="accelport-trace.json", metavar="FILE",
                        help="trace to write (default: %(default)s)")
    add_deprecated(parser, "profile", "--output-trace", "--trace", "output_trace", "FILE")
    parser.add_argument("--steps", type=int, help="profile this many steps marked by bench.step() (default: the whole run)")
    parser.add_argument("--warmup", type=int, default=1, help="marked steps before profiling starts (default: %(default)s)")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    add_output(parser, "the breakdown")
    add_deprecated(parser, "profile", "--report", "-o/--output", "output", "FILE")
    _steps_used_option(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- python script.py ARGS")
    parser.set_defaults(handler=run_profile)

    diff = subparsers.add_parser("profile-diff", help="which ops got slower between two traces, and why",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    diff.add_argument("base", help="baseline trace (e.g. from CUDA)")
    diff.add_argument("test", help="trace to explain (e.g. from the target device)")
    diff.add_argument("--top", type=int, default=25, help="rows to show; the rest are summed in one row; 0 = all (default: %(default)s)")
    diff.add_argument("--format", choices=("table", "json", "html"), default="table")
    diff.add_argument("--fail-above", type=float, metavar="RATIO", help="exit 1 when test/base step time exceeds RATIO")
    diff.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    _steps_used_option(diff)
    diff.set_defaults(handler=run_diff)

"""`accelport soak`: run for hours; catch hangs (with stacks), OOM, NaN/Inf, loss spikes, memory leaks and slowdowns.

The script marks each step with `accelport.verify.perf.bench.step(loss=loss)`:

    accelport soak --duration 72h --hang-timeout 600 --save soak.json -- python train.py --steps 1000000

Before the first marked step any line of output counts as a heartbeat; after
it only steps do. On a hang the process gets SIGABRT and Python prints the
stack of every thread (PYTHONFAULTHANDLER=1), which the report keeps.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from accelport.cli._output import check_range, check_save_path, emit, save_text
from accelport.errors import UserError

ORDER = 63


def _render(data: dict) -> str:
    lines = [f"soak: {data['verdict'].upper()}  ({data['steps']} steps, {data['duration_s']:.1f} s, stopped: {data['stop_reason']})"]
    if data.get("step_time_median_s"):
        lines.append(f"step time     median {data['step_time_median_s'] * 1000:.3f} ms")
    for key, fit in data["slopes"].items():
        unit = "ms" if key == "step_time" else "KiB"
        scale = 1000.0 if key == "step_time" else 1 / 1024
        rel = f" ({fit['relative'] * 100:+.1f}% over the run)" if fit.get("relative") is not None else ""
        lines.append(f"drift {key:<15} {fit['per_step'] * scale:+.4g} {unit}/step  "
                     f"(95% CI {fit['low'] * scale:+.4g} .. {fit['high'] * scale:+.4g}){rel}")
    for failure in data["failures"]:
        lines.append(f"FAIL  {failure}")
    if data.get("hang") and data["hang"].get("stacks"):
        lines.append("stacks at the hang:")
        lines.extend("  " + line for line in data["hang"]["stacks"].splitlines()[-60:])
    if data.get("crash"):
        lines.append("stderr tail:")
        lines.extend("  " + line for line in data["crash"]["stderr_tail"].splitlines())
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    from accelport.verify.stability import soak

    command = list(args.command or [])
    if command and command[0] == "--":
        command = command[1:]
    check_range("--steps", args.steps, low=1)
    check_range("--warmup-steps", args.warmup_steps, low=0)
    check_range("--max-time-drift", args.max_time_drift, low=0, low_open=True)
    check_range("--min-time-drift-ms", args.min_time_drift_ms, low=0)
    check_range("--max-memory-growth", args.max_memory_growth, low=0, low_open=True)
    check_range("--spike-z", args.spike_z, low=0, low_open=True)
    check_range("--max-spikes", args.max_spikes, low=0)
    save = check_save_path("--save", args.save)
    limits = soak.SoakLimits(
        warmup_steps=args.warmup_steps,
        hang_timeout_s=soak.parse_duration(args.hang_timeout),
        max_time_drift=args.max_time_drift,
        min_time_drift_s=args.min_time_drift_ms / 1e3,
        max_memory_growth_bytes=int(args.max_memory_growth * 2**20),
        spike_z=args.spike_z,
        max_spikes=args.max_spikes,
    )
    duration = soak.parse_duration(args.duration) if args.duration else None
    if args.steps is None and duration is None:
        raise UserError("soak needs --steps or --duration")

    def echo(stream: str, line: str) -> None:
        (sys.stdout if stream == "stdout" else sys.stderr).write(line)

    with tempfile.TemporaryDirectory(prefix="accelport-soak-") as scratch:
        result = soak.run_command(command, Path(scratch), steps=args.steps, duration_s=duration, limits=limits,
                                  echo=None if args.quiet else echo)
    data = result.to_dict()
    save_text("--save", save, json.dumps(data, indent=2) + "\n")
    emit(json.dumps(data, indent=2) + "\n" if args.format == "json" else _render(data), args.output)
    return 0 if data["verdict"] == "pass" else 1


# Library parameters whose flag has another dest (errors.InvalidValue names the parameter; the CLI words the flag).
DEST_OF = {"duration_s": "duration"}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("soak", help="long run: hangs, OOM, NaN, spikes, leaks, drift",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, help="stop after this many steps")
    parser.add_argument("--duration", metavar="TIME", help="stop after this long: 90s, 30m, 72h")
    parser.add_argument("--hang-timeout", default="300s", metavar="TIME", help="no step for this long is a hang (default: %(default)s)")
    parser.add_argument("--warmup-steps", type=int, default=5, help="steps left out of the drift fits (default: %(default)s)")
    parser.add_argument("--max-time-drift", type=float, default=0.25, metavar="REL", help="allowed step-time growth over the run (default: %(default)s)")
    parser.add_argument(
        "--min-time-drift-ms",
        type=float,
        default=2.0,
        metavar="MS",
        help="drift below this many milliseconds per step is load noise, not a failure (default: %(default)s)",
    )
    parser.add_argument("--max-memory-growth", type=float, default=16.0, metavar="MIB", help="allowed memory growth over the run (default: %(default)s MiB)")
    parser.add_argument("--spike-z", type=float, default=6.0, help="robust z-score of a loss spike (default: %(default)s)")
    parser.add_argument("--max-spikes", type=int, default=0, help="loss spikes allowed (default: %(default)s)")
    parser.add_argument("--quiet", action="store_true", help="do not pass the program's output through")
    parser.add_argument("--save", metavar="FILE", help="save the result (with every sample) as JSON, for accept")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE instead of stdout")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the command to soak")
    parser.set_defaults(handler=run)

"""`accelport run [--device TYPE] -- COMMAND...`: run an unmodified CUDA program on the available device.

torch.cuda is redirected at run time in every Python process the command starts (torchrun
workers included): `.cuda()`, "cuda" device arguments, torch.cuda.* functions, CUDA events,
amp autocast and GradScaler, the NCCL backend. Each redirected API is logged once, with the
line that first used it, and all of them (with call sites and counts) are written as a
dynamic inventory at exit. Calls torch makes internally are not redirected. torch.jit.script
keeps working, no dtype is changed, no path or other string is rewritten.

exit codes:
  the program's own exit code (128+N when it was killed by signal N)
  2  usage error (no command, unknown device type, --inventory not writable, command not found)
"""

from __future__ import annotations

import argparse
import json
import sys

from accelport.cli._output import check_output, emit

ORDER = 25


def run(args: argparse.Namespace) -> int:
    from accelport.runtime.launcher import check_device, run_program

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    # Both are checked before the program starts: a bad value must not cost a training run.
    if args.device is not None:
        check_device(args.device)
    if args.inventory != "-":
        check_output(args.inventory, "--inventory")
    result = run_program(command, device=args.device, quiet=args.quiet)
    inventory = result.inventory()
    if args.inventory != "-":
        emit(json.dumps(inventory, indent=2) + "\n", args.inventory, option="--inventory")
    summary = inventory["summary"]
    where = f"; dynamic inventory: {args.inventory}" if args.inventory != "-" else ""
    sys.stderr.write(
        f"accelport run: {summary['apis']} CUDA API(s) redirected, {summary['calls']} call(s) in "
        f"{inventory['processes']} process(es){where}\n"
    )
    return result.exit_code


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run an unmodified CUDA program on the available device, logging every redirected call",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="accelport run [--device TYPE] [--inventory FILE] [--quiet] -- COMMAND [ARG ...]",
    )
    parser.add_argument("--device", metavar="TYPE", help="device type to run on (default: the current accelerator, else cpu)")
    parser.add_argument(
        "--inventory", default="accelport-run.json", metavar="FILE",
        help="where to write the dynamic inventory; '-' for none (default: %(default)s)",
    )
    parser.add_argument("--quiet", action="store_true", help="do not log each redirected API (the inventory still lists them)")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND", help="the program to run, after `--`")
    parser.set_defaults(handler=run)

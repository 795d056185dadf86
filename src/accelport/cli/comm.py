"""`accelport comm`: check collectives across N local processes; bandwidth in nccl-tests' layout.

    accelport comm --ranks 4 -b 8 -e 16M -f 4
    accelport comm --ranks 8 --preload torch_npu --save comm.json

Every result is compared exactly with the expected values; a wrong element
makes the verdict fail (exit 1). Uses the current device's default
torch.distributed backend (gloo on CPU) unless --backend says otherwise.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from accelport.cli._conventions import add_output_dir
from accelport.cli._output import check_range, check_save_path, emit, save_text
from accelport.errors import MissingDependency

ORDER = 64


def run(args: argparse.Namespace) -> int:
    from accelport.verify.stability import comm

    # The ranks are child processes: without torch each would fail on its own, and the
    # verdict would read as a collective that failed rather than a package not installed.
    if not _importable("torch"):
        raise MissingDependency("torch", "torch", "accelport comm")

    check_range("--ranks", args.ranks, low=2)
    check_range("--step-factor", args.step_factor, low=2)
    check_range("--iters", args.iters, low=1)
    check_range("--warmup-iters", args.warmup_iters, low=0)
    check_range("--timeout", args.timeout, low=0, low_open=True)
    save = check_save_path("--save", args.save)
    sizes = comm.sizes_between(comm.parse_size(args.min_bytes), comm.parse_size(args.max_bytes), args.step_factor)
    collectives = args.collectives.split(",") if args.collectives else list(comm.COLLECTIVES)
    with tempfile.TemporaryDirectory(prefix="accelport-comm-") as scratch:
        result = comm.run(args.ranks, collectives=collectives, sizes=sizes, dtype=args.dtype, iters=args.iters,
                          warmup=args.warmup_iters, backend=args.backend, preload=args.preload or (),
                          timeout_s=args.timeout, workdir=Path(args.output_dir or scratch))
    data = result.to_dict()
    save_text("--save", save, json.dumps(data, indent=2) + "\n")
    emit(json.dumps(data, indent=2) + "\n" if args.format == "json" else comm.render_table(result), args.output)
    return 0 if result.passed else 1


def _importable(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("comm", help="check collectives across local processes; algbw/busbw",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--ranks", type=int, default=2, help="processes (default: %(default)s)")
    parser.add_argument("-b", "--min-bytes", default="1K", help="smallest message (default: %(default)s)")
    parser.add_argument("-e", "--max-bytes", default="1M", help="largest message (default: %(default)s)")
    parser.add_argument("-f", "--step-factor", type=int, default=4, help="size multiplier (default: %(default)s)")
    parser.add_argument("--collectives", metavar="LIST", help="comma-separated subset of all_reduce,all_gather,reduce_scatter,broadcast,all_to_all")
    parser.add_argument("--dtype", default="float32", help="float32, float16, bfloat16, int32, int64, float64 (default: %(default)s)")
    parser.add_argument("--iters", type=int, default=20, help="timed iterations (default: %(default)s)")
    parser.add_argument("--warmup-iters", type=int, default=5, help="untimed iterations (default: %(default)s)")
    parser.add_argument("--backend", help="torch.distributed backend (default: the device's default)")
    parser.add_argument("--preload", action="append", metavar="MODULE", help="import MODULE in every rank first (e.g. torch_npu); repeatable")
    parser.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS", help="a rank slower than this is a hang (default: %(default)s)")
    add_output_dir(parser, "comm", "keep per-rank logs and results here (default: a temporary folder, removed)", old=("--workdir",))
    parser.add_argument("--save", metavar="FILE", help="save the result as JSON, for accept")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    parser.set_defaults(handler=run)

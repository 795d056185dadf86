"""`accelport compare REF TEST`: where do two numerics dumps differ, and where did it start?

Aligns the records of two dumps (made by `accelport dump`, on two devices or two
versions of the code), measures every tensor (max abs, max rel, mean rel, RMSE, cosine,
ULP, allclose fraction, NaN/Inf positions) against dtype-aware tolerances, and names
the first divergence: the first op whose output differs while its inputs agree. With
full tensors, ops that fail are replayed in float64 on the CPU to tell an op bug from
accumulated drift.
"""

from __future__ import annotations

import argparse
import math

from accelport.cli._output import emit
from accelport.errors import UserError

ORDER = 51

_DTYPES = ("float64", "float32", "float16", "bfloat16", "*")


def _tolerances(values: list[str]) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    for value in values:
        dtype, _, numbers = value.partition("=")
        parts = numbers.split(",")
        try:
            if dtype not in _DTYPES or len(parts) != 2:
                raise ValueError
            rtol, atol = float(parts[0]), float(parts[1])
        except ValueError:
            raise UserError(
                f"--tol {value}: write DTYPE=RTOL,ATOL with DTYPE one of {', '.join(_DTYPES)} (for example float32=1e-3,1e-3)"
            ) from None
        if not (math.isfinite(rtol) and math.isfinite(atol)) or rtol < 0 or atol < 0 or rtol + atol == 0:
            raise UserError(
                f"--tol {value}: RTOL and ATOL must be finite, not negative, and not both 0 (for example {dtype}=1e-3,1e-3)"
            )
        out[dtype] = (rtol, atol)
    return out


def run(args: argparse.Namespace) -> int:
    from accelport.verify.numerics.compare import compare_dumps
    from accelport.verify.numerics.numerics_report import RENDERERS

    result = compare_dumps(
        args.ref,
        args.test,
        mapping=args.map,
        tolerances=_tolerances(args.tol),
        criterion=args.criterion,
        replay=args.replay,
        replay_ratio=args.replay_ratio,
        allow_truncated=args.allow_truncated,
        fail_on_drift=args.fail_on_drift,
        window=args.window,
        top=args.top,
    )
    try:
        if args.format == "csv":
            _stream_csv(result, args.output)
        else:
            emit(RENDERERS[args.format](result), args.output)
        truncated = [side.upper() for side in ("ref", "test") if result.truncated[side]]
    finally:
        result.close()
    if truncated and not args.allow_truncated:
        side = truncated[0].lower()
        detail = result.truncated[f"{side}_detail"]
        path = args.ref if side == "ref" else args.test
        raise UserError(
            f"{path}: dump is truncated ({detail}); the report covers what was flushed — rerun the dump, or pass --allow-truncated to judge that part"
        )
    return 0 if result.passed else 1


def _stream_csv(result, output: str | None) -> None:
    import sys

    from accelport.fileio import atomic_open
    from accelport.verify.numerics.numerics_report import write_csv

    if output and output != "-":
        try:
            with atomic_open(output, "w") as handle:
                write_csv(result, handle)
        except OSError as exc:
            raise UserError(
                f"{output}: cannot write ({exc.strerror}); choose another -o path"
            ) from None
    else:
        write_csv(result, sys.stdout)
        sys.stdout.flush()


# Library parameters whose flag has another dest (errors.InvalidValue names the parameter; the CLI words the flag).
DEST_OF = {"tolerances": "tol"}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="compare two numerics dumps: verdict, first divergent op, per-layer errors",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="exit codes: 0 pass, 1 fail, 2 bad input or a truncated dump (without --allow-truncated)",
    )
    parser.add_argument("ref", help="reference dump folder (the trusted run, e.g. on CUDA)")
    parser.add_argument("test", help="dump folder to check (e.g. the migrated run)")
    parser.add_argument(
        "--map",
        metavar="FILE",
        help="TOML mapping of renamed ops/modules and fused op sequences (docs/compare.md)",
    )
    parser.add_argument(
        "--tol",
        action="append",
        default=[],
        metavar="DTYPE=RTOL,ATOL",
        help="override a dtype's tolerance ('*' for all); repeatable",
    )
    parser.add_argument(
        "--criterion",
        choices=("norm", "max", "elementwise"),
        default="norm",
        help="how op outputs are judged (default: %(default)s; see docs/compare.md)",
    )
    parser.add_argument(
        "--fail-on-drift",
        action="store_true",
        help="fail when records beyond tolerance are explained by replay as accumulated drift (default: count and show them)",
    )
    parser.add_argument(
        "--replay",
        choices=("failing", "all", "none"),
        default="failing",
        help="with full tensors: which ops to replay in float64 (default: %(default)s)",
    )
    parser.add_argument(
        "--replay-ratio",
        type=float,
        metavar="K",
        help="TEST's error may be K x REF's against float64 (default 2)",
    )
    parser.add_argument(
        "--allow-truncated",
        action="store_true",
        help="judge a truncated dump on the records it has",
    )
    parser.add_argument(
        "--window",
        type=int,
        default=2048,
        metavar="N",
        help="alignment window in records (default: %(default)s)",
    )
    parser.add_argument(
        "--top",
        type=int,
        default=25,
        metavar="N",
        help="worst records to list (default: %(default)s)",
    )
    parser.add_argument(
        "--format", choices=("table", "json", "csv", "markdown", "html"), default="table"
    )
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    parser.set_defaults(handler=run)

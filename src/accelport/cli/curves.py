"""`accelport curves REF TEST...`: do the training curves of migrated runs follow the reference run?

Reads loss and grad-norm curves from CSV, JSONL or TensorBoard event files, aligns
them by step and reports the relative gap per step, at the end and on average. Passes
when the judged metrics (the loss by default) stay within 1% (--tolerance), or inside
the band of several reference seeds (--seed).
"""

from __future__ import annotations

import argparse

from accelport.cli._output import emit
from accelport.errors import UserError

ORDER = 52


def _per_metric(values: list[str]) -> tuple[float | None, dict[str, float]]:
    base, per = None, {}
    for value in values:
        name, sep, number = value.rpartition("=")
        try:
            if sep:
                per[name] = float(number)
            else:
                base = float(value)
        except ValueError:
            raise UserError(
                f"--tolerance {value}: write a fraction (0.01) or METRIC=FRACTION (grad_norm=0.1)"
            ) from None
    return base, per


def run(args: argparse.Namespace) -> int:
    from accelport.verify.numerics.curves import compare_curves
    from accelport.verify.numerics.curves_report import RENDERERS

    base, per = _per_metric(args.tolerance)
    result = compare_curves(
        args.ref,
        args.tests,
        seeds=args.seed,
        metrics=args.metric or None,
        judge=args.judge or None,
        tolerance=base,
        tolerances=per,
        smooth=args.smooth,
        max_outside=args.max_outside,
        per_step=args.per_step,
    )
    if args.png:
        result.png(args.png)
    emit(RENDERERS[args.format](result), args.output)
    return 0 if result.passed else 1


# Library parameters whose flag has another dest (errors.InvalidValue names the parameter; the CLI words the flag).
DEST_OF = {"tolerances": "tolerance"}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "curves",
        help="compare loss / grad-norm curves of migrated runs with a reference run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="exit codes: 0 pass, 1 fail, 2 bad input",
    )
    parser.add_argument("ref", help="reference run log (CSV, JSONL, or TensorBoard file/folder)")
    parser.add_argument("tests", nargs="+", metavar="TEST", help="runs to check, same formats")
    parser.add_argument(
        "--seed",
        action="append",
        default=[],
        metavar="LOG",
        help="the reference run with another seed (noise band); repeatable",
    )
    parser.add_argument(
        "--metric",
        action="append",
        default=[],
        metavar="NAME",
        help="metric to compare (default: loss and grad_norm); repeatable",
    )
    parser.add_argument(
        "--judge",
        action="append",
        default=[],
        metavar="NAME",
        help="metric the verdict depends on (default: loss); repeatable",
    )
    parser.add_argument(
        "--tolerance",
        action="append",
        default=[],
        metavar="FRAC|METRIC=FRAC",
        help="relative gap allowed (default 0.01)",
    )
    parser.add_argument(
        "--smooth",
        type=float,
        default=0.0,
        metavar="ALPHA",
        help="EMA weight of the past, 0..1 (default: no smoothing)",
    )
    parser.add_argument(
        "--max-outside",
        type=float,
        default=0.05,
        metavar="FRAC",
        help="with --seed: share of steps allowed outside the band",
    )
    parser.add_argument(
        "--per-step",
        action="store_true",
        help="also require every step within the tolerance (Megatron's rule)",
    )
    parser.add_argument(
        "--png", metavar="FILE", help="also write the curves as a PNG (needs matplotlib)"
    )
    parser.add_argument("--format", choices=("table", "json", "markdown", "html"), default="table")
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    parser.set_defaults(handler=run)

"""`accelport ops MODULE:FACTORY`: which ATen operators a model runs, and which each target backend lacks.

The factory (in a dotted module or a .py file) returns (model, inputs), (model, inputs, loss_fn),
(model, inputs, loss_fn, targets), an accelport.coverage.Workload, or a step function. One
training step (forward, backward, optimizer) or one inference call is traced on the meta device,
with FakeTensorMode, or by a real CPU run, and every operator is judged against each target's
operator list, or, with --on-device, against the live dispatcher of the machine it runs on.
"""

from __future__ import annotations

import argparse

from accelport.cli._conventions import add_format
from accelport.cli._output import Style, emit, use_color

ORDER = 40
FORMATS = ("table", "json", "markdown", "html")


def run(args: argparse.Namespace) -> int:
    from accelport import coverage, knowledge
    from accelport.coverage import oplists, render
    from accelport.errors import UserError

    oplists.set_user_files(args.oplist)
    if args.lists:
        lists = [o for vendor in sorted(oplists.known_oplists()) for o in oplists.known_oplists()[vendor]]
        emit(render.render_lists(lists, args.format), args.output)
        return 0
    if not args.factory:
        raise UserError("give MODULE:FACTORY (for example examples/legacy_cuda_app/coverage_case.py:factory), or --lists")
    for target in args.target or []:
        knowledge.vendor(target.partition("@")[0])  # unknown vendor: one line listing the known ones
    if args.smoke and not args.on_device:
        raise UserError("--smoke runs operators on the device: add --on-device")
    if not args.on_device:
        # Resolve the lists before tracing, so a bad --target or --oplist fails fast.
        targets = args.target or oplists.default_targets()
        for target in targets:
            try:
                oplists.oplist_for(target)
            except oplists.NoOpList as exc:
                raise UserError(f"{exc} (--oplist FILE, or --on-device)") from None
    if args.on_device:
        trace = coverage.trace(args.factory, mode=args.mode, strategy=args.tracer, label=args.factory)
        report = coverage.check_on_device(trace, list(args.target or [None]), run_smoke=args.smoke)
    else:
        report = _check_offline(args, targets)
    style = Style(use_color() and not args.output)
    emit(render.render(report, args.format, style), args.output)
    return 1 if report.failed else 0


def _check_offline(args: argparse.Namespace, targets: list[str]):
    """Judge each target against a trace taken the way torch runs on its device type.

    Targets whose device type takes the fused transformer fast paths (cpu, cuda, xpu and
    the PrivateUse1 backends: npu, musa, mlu, ...) share one trace; the others (mps) get a
    second one with the fast paths off, so they are not told they lack a fused kernel that
    torch would never call there.
    """
    from accelport import coverage, knowledge
    from accelport.coverage.check import CoverageReport
    from accelport.coverage.tracer import takes_fastpath

    groups: dict[bool, list[str]] = {}
    for target in targets:
        groups.setdefault(takes_fastpath(knowledge.vendor(target.partition("@")[0]).torch_device), []).append(target)
    results: dict[str, object] = {}
    first = None
    for fastpath in sorted(groups, reverse=True):
        trace = coverage.trace(args.factory, mode=args.mode, strategy=args.tracer, label=args.factory, fastpath=fastpath)
        first = first or trace
        part = coverage.check(trace, groups[fastpath])
        for target, result in zip(groups[fastpath], part.targets, strict=True):
            if not fastpath and trace.mode == "infer":
                result.notes.append(f"judged on a trace with the fused transformer fast paths off: torch does not take them on "
                                    f"{knowledge.vendor(target.partition('@')[0]).torch_device}")
            results[target] = result
    return CoverageReport(first, [results[t] for t in targets])


# Library parameters whose flag has another dest (errors.InvalidValue names the parameter; the CLI words the flag).
DEST_OF = {"vendor": "target"}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ops",
        help="which ATen operators a model runs, and which a target backend lacks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="exit codes: 0 every operator covered, 1 an operator is missing or falls back, 2 usage or input error",
    )
    parser.add_argument("factory", nargs="?", metavar="MODULE:FACTORY", help="pkg.module:function or path/to/file.py:function")
    parser.add_argument("--mode", choices=("train", "infer"), help="default: train when the model is in training mode, else infer")
    parser.add_argument(
        "--target",
        action="extend",
        nargs="+",
        metavar="VENDOR",
        help="vendor key (npu, musa, mlu, xpu, mps, cuda, cpu; see `accelport backends`), optionally VENDOR@VERSION; "
        "default: every accelerator with an operator list",
    )
    parser.add_argument("--tracer", choices=("meta", "fake", "cpu"), help="use only this tracer (default: cheapest that works)")
    parser.add_argument("--oplist", action="append", default=[], metavar="FILE", help="your own operator list (JSON or text; see docs/ops.md); repeatable")
    parser.add_argument("--on-device", action="store_true", help="judge with this machine's dispatcher (imports each target's adapter)")
    parser.add_argument("--smoke", action="store_true", help="with --on-device: run each operator once per traced dtype on the device")
    parser.add_argument("--lists", action="store_true", help="list the operator lists accelport knows, and exit")
    add_format(parser, FORMATS)
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    parser.set_defaults(handler=run)

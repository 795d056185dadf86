"""`accelport inventory PATH...`: what in this tree depends on CUDA, of which kind, how hard it is to move, which route.

Scans Python files and notebooks (and, through their scanners, C/C++/CUDA sources,
build files, manifests and binaries), never matching comments, docstrings, paths
or free text. Exit codes: 0 done; 1 a --fail-on threshold was reached or files
were skipped (unless --allow-skipped); 2 usage or input error.
"""

from __future__ import annotations

import argparse
import os

from accelport.cli._conventions import (
    add_finding_filters,
    add_format,
    add_output,
    rule_filter,
    settle_finding_options,
)
from accelport.cli._output import Progress, Style, emit, positive_int, use_color
from accelport.errors import UserError

# All output is written and closed when `run` returns: the process may end at once (cli.entry).
QUICK_EXIT = True
# A scan builds no reference cycles worth collecting and ends soon: no cyclic GC (cli.main).
GC_PAUSED = True

ORDER = 10
FAIL_LEVELS = ("any", "low", "medium", "high")


def threshold_reached(report, level: str | None) -> bool:
    from accelport.findings import Effort

    if level is None:
        return False
    # A finding marked `# accelport: APxxxx` in the source is known manual work, not news.
    open_findings = [f for f in report.findings if not f.acknowledged]
    if level == "any":
        return bool(open_findings)
    minimum = Effort(level).rank
    return any(f.effort.rank >= minimum for f in open_findings)


def filtered(report, select: tuple[str, ...], ignore: tuple[str, ...]):
    """The report with only the findings --select/--ignore keep (route and effort recomputed)."""
    import dataclasses

    from accelport.inventory.engine import summarise

    if not select and not ignore:
        return report
    keep = rule_filter(select, ignore)
    findings = [f for f in report.findings if keep(f.rule_id)]
    route, effort, files = summarise(findings)
    return dataclasses.replace(report, findings=findings, route=route, effort=effort, files=files)


# The library names its own parameter in a skip reason; on the command line the flag sets it.
_SIZE_FIX = ("raise max_file_size to scan it", "raise it with --max-file-size")


def _flag_wording(report):
    """The report with skip reasons worded for the command line (the flag that lifts the size limit)."""
    import dataclasses

    if not any(_SIZE_FIX[0] in s.reason for s in report.skipped):
        return report
    skipped = [dataclasses.replace(s, reason=s.reason.replace(*_SIZE_FIX)) for s in report.skipped]
    return dataclasses.replace(report, skipped=skipped)


def run(args: argparse.Namespace) -> int:
    import logging

    from accelport.inventory import scan
    from accelport.inventory.render import RENDERERS, render_table

    select, ignore = settle_finding_options(args, FAIL_LEVELS)
    log = logging.getLogger("accelport.inventory")
    progress: Progress | None = None

    def discovered(total: int) -> None:
        nonlocal progress
        progress = Progress(total, "scanning")

    def advance(count: int) -> None:
        if progress is not None:
            progress.advance(count)

    try:
        report = scan(
            args.paths,
            target=args.target,
            excludes=args.exclude,
            jobs=args.jobs,
            respect_gitignore=not args.no_gitignore,
            max_file_size=args.max_file_size * 1024 * 1024,
            on_discovered=discovered,
            on_progress=advance,
        )
    finally:
        if progress is not None:
            progress.close()
    report = _flag_wording(report)
    if report.files_scanned == 0 and not report.skipped:
        raise UserError(f"{', '.join(args.paths)}: no files accelport scans were found; check the path and --exclude")
    if report.files_scanned == 0 and len(args.paths) == 1 and os.path.isfile(args.paths[0]):
        raise UserError(f"{args.paths[0]}: cannot be scanned: {report.skipped[0].reason}")
    report = filtered(report, select, ignore)
    for skip in report.skipped:
        log.info("skipped %s: %s", skip.path, skip.reason)
    for summary in report.files:
        log.info("%s: %d finding(s), route %s (%s)", summary.path, summary.findings, summary.route.route.value,
                 "; ".join(summary.route.reasons))
    log.info("project route %s: %s", report.route.route.value, "; ".join(report.route.reasons))
    if args.format == "table":
        to_terminal = not args.output or args.output == "-"
        text = render_table(report, Style(to_terminal and use_color()))
    else:
        text = RENDERERS[args.format](report)
    emit(text, args.output, styled=True)
    if threshold_reached(report, args.fail_on):
        return 1
    if report.skipped and not args.allow_skipped:
        return 1
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "inventory",
        help="find every CUDA dependency in a tree, classify it, recommend a route",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files or folders to scan")
    add_format(parser, ("table", "json", "sarif", "csv", "markdown", "html"))
    add_output(parser)
    parser.add_argument("--target", metavar="VENDOR", help="judge effort for this vendor (see `accelport backends`)")
    add_finding_filters(
        parser, FAIL_LEVELS,
        "exit 1 when an unmarked finding of this effort or higher exists: any, low, medium, high "
        "(findings acknowledged by an `# accelport: APxxxx` marker do not count)",
    )
    parser.add_argument(
        "--exclude", action="append", default=[], metavar="GLOB", help="gitignore-style pattern to leave out; repeatable"
    )
    parser.add_argument("--jobs", type=positive_int, metavar="N", help="worker processes (default: number of cores)")
    parser.add_argument("--no-gitignore", action="store_true", help="scan files that .gitignore excludes")
    parser.add_argument(
        "--max-file-size", type=positive_int, default=8, metavar="MiB", help="skip larger files (default: %(default)s MiB)"
    )
    parser.add_argument("--allow-skipped", action="store_true", help="exit 0 even when some files could not be scanned")
    parser.set_defaults(handler=run)

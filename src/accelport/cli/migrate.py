"""`accelport migrate PATH...`: rewrite CUDA PyTorch code into PyTorch's device-agnostic API.

Rewrites what has a portable form (torch.accelerator, torch.amp with the device type,
torch.Stream/Event, torch.get_device_module, the default distributed backend) and puts an
inline `# accelport: APxxxx: ...` marker on each line left for manual work. Comments,
docstrings, paths, identifiers and formatting elsewhere are never touched.

modes:
  --diff   (default) print a unified diff; nothing is written
  --check  print what would change; exit 1 if anything would (CI, pre-commit)
  --write  edit the files atomically and write the change list (JSON and Markdown);
           refuses a dirty git tree under PATH (or files outside git) unless --force;
           never writes through a symbolic link that leads out of PATH (reported as
           skipped); removes temporary files an interrupted --write left

exit codes:
  0  done (--check: nothing to change)
  1  --check: files would change; or files were skipped or left alone (unparsable, not UTF-8)
  2  usage or input error
"""

from __future__ import annotations

import argparse
import os
import sys

from accelport.cli._conventions import add_finding_filters, add_format, settle_finding_options
from accelport.cli._output import Progress, Style, emit, output_problem, positive_int, use_color
from accelport.errors import UserError
from accelport.textsafe import terminal

ORDER = 20
FAIL_LEVELS = ("any", "low", "medium", "high")
# Parse trees, CSTs and changes hold no reference cycles worth collecting, and a run ends
# soon: no cyclic GC (cli.main); libcst's import alone made the collector walk for a while.
GC_PAUSED = True


def run(args: argparse.Namespace) -> int:
    from accelport.migrate import Options, migrate
    from accelport.migrate.render import render_diff, render_json, render_markdown, render_summary
    from accelport.source.walk import check_excludes

    check_excludes(args.exclude)
    if args.mode == "write" and args.changes != "-":
        for path in _change_list_paths(args.changes):
            _check_writable(path)
    # Before writing, each whole file must parse; --diff and --check check the statements they change.
    if not args.helpers_module.isidentifier() or args.helpers_module.startswith("accelport"):
        raise UserError(f"--helpers-module {args.helpers_module}: not a module name; give a Python identifier such as _accelport_compat")
    select, ignore = settle_finding_options(args, FAIL_LEVELS)
    if ignore:
        from accelport import knowledge

        select = tuple(r for r in knowledge.rules() if (not select or r.startswith(select)) and not r.startswith(ignore))
        if not select:
            raise UserError("--select and --ignore leave no rule to apply; `accelport rules` lists them")
    options = Options(
        select=select, target=args.target, whole_file=args.mode == "write",
        helpers=args.helpers, helpers_module=args.helpers_module,
    )
    progress: Progress | None = None

    def discovered(total: int) -> None:
        nonlocal progress
        progress = Progress(total, "migrating")

    def advance(count: int) -> None:
        if progress is not None:
            progress.advance(count)

    try:
        result = migrate(
            args.paths,
            options=options,
            excludes=args.exclude,
            jobs=args.jobs,
            respect_gitignore=not args.no_gitignore,
            on_discovered=discovered,
            on_progress=advance,
            keep_text=args.mode != "check",
        )
    finally:
        if progress is not None:
            progress.close()
    if result.files_scanned == 0 and not result.skipped:
        raise UserError(f"{', '.join(args.paths)}: no Python files were found; check the path and --exclude")

    _log_decisions(result)
    style_out = Style(use_color())
    style_err = Style(use_color(sys.stderr))
    if args.mode == "write":
        _write(args, result, render_json, render_markdown)
        text = render_json(result) if args.format == "json" else render_summary(result, style_out, written=True)
        emit(text, None, styled=True)
    elif args.mode == "check":
        emit(render_json(result) if args.format == "json" else render_summary(result, style_out, written=False), None, styled=True)
    elif args.format == "json":
        emit(render_json(result), None)
    else:
        emit(render_diff(result), None, raw=True)  # exact, so that `git apply` takes it (paths are quoted as git does)
        sys.stderr.write(terminal(render_summary(result, style_err, written=False), styled=True))

    left_alone = bool(result.skipped or result.failed_files) and not args.allow_skipped
    if args.mode == "check" and result.changed_files:
        return 1
    if manual_work_reached(result, args.fail_on):
        return 1
    return 1 if left_alone else 0


def _log_decisions(result) -> None:
    """-v: what migrate decided for each file and each change it left for manual work."""
    import logging

    log = logging.getLogger("accelport.migrate")
    if not log.isEnabledFor(logging.INFO):
        return
    for skip in result.skipped:
        log.info("skipped %s: %s", skip.path, skip.reason)
    for migration in result.files:
        if migration.error is not None:
            log.info("%s: left alone: %s", migration.path, migration.error)
            continue
        for change in migration.changes:
            log.info("%s:%s: %s %s %s", migration.path, change.line, change.action, change.rule_id or "", change.symbol)


def manual_work_reached(result, level: str | None) -> bool:
    """Whether a change left for manual work (a marker) has the effort `level` or higher."""
    from accelport import knowledge
    from accelport.findings import Effort
    from accelport.migrate.model import MARKED, NOT_REWRITTEN

    if level is None:
        return False
    rules = knowledge.rules()
    left = [c for f in result.files for c in f.changes if c.action in (MARKED, NOT_REWRITTEN)]
    if level == "any":
        return bool(left)
    minimum = Effort(level).rank
    return any(c.rule_id in rules and rules[c.rule_id].effort.rank >= minimum for c in left)


def _change_list_paths(json_path: str) -> tuple[str, str]:
    return json_path, os.path.splitext(json_path)[0] + ".md"


def _check_writable(path: str) -> None:
    """Refuse a change-list path that cannot be written, before anything is migrated."""
    problem = output_problem(path)
    if problem:
        raise UserError(f"--changes {path}: {problem}; give a writable FILE.json, or '-' for no change list")


def _write(args: argparse.Namespace, result, render_json, render_markdown) -> None:
    from accelport.fileio import staged_writes
    from accelport.migrate.writing import remove_stale_temp, uncommitted, write_files
    from accelport.source.walk import TEMP_SUFFIX

    # A file migrate creates (the helper module) replaces nothing: no uncommitted work to protect.
    targets = [f.disk_path for f in result.changed_files if f.disk_path and not f.creates]
    if targets and not args.force:
        dirty = uncommitted(args.paths, targets)
        if dirty:
            more = f" (and {len(dirty) - 1} more)" if len(dirty) > 1 else ""
            raise UserError(
                f"{os.path.relpath(dirty[0])}: has uncommitted changes{more}; commit or stash them first "
                "so the rewrite can be reviewed and undone, or pass --force"
            )
    removed = remove_stale_temp(result.stale_temp)
    if removed:
        sys.stderr.write(f"removed {len(removed)} temporary file(s) an interrupted `migrate --write` left, "
                         f"such as {os.path.relpath(removed[0])}\n")
    # The change list is staged first: a change list that cannot be written stops the run
    # before any source is touched, and a source that cannot be written leaves no change list.
    with staged_writes(TEMP_SUFFIX) as change_list:
        if args.changes != "-":
            json_path, md_path = _change_list_paths(args.changes)
            for path, text in ((json_path, render_json(result)), (md_path, render_markdown(result))):
                try:
                    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
                    change_list.stage(path, text.encode("utf-8"))
                except OSError as exc:
                    raise UserError(
                        f"--changes {path}: cannot be written ({exc.strerror}); nothing was changed; "
                        "give a writable FILE.json, or '-' for no change list"
                    ) from None
        try:
            write_files(result.changed_files, args.paths)
        except OSError as exc:
            raise UserError(f"{exc.filename or 'a file'}: cannot be written ({exc.strerror}); nothing was changed") from None


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "migrate",
        help="rewrite CUDA PyTorch code into device-agnostic code, with markers for manual work",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files or folders to migrate")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--diff", dest="mode", action="store_const", const="diff", help="print a unified diff (default)")
    mode.add_argument("--write", dest="mode", action="store_const", const="write", help="edit the files in place")
    mode.add_argument("--check", dest="mode", action="store_const", const="check", help="exit 1 if files would change")
    parser.set_defaults(mode="diff")
    parser.add_argument("--target", metavar="VENDOR", help="also add what this vendor needs beyond portable code (see `accelport backends`)")
    add_finding_filters(parser, FAIL_LEVELS, "exit 1 when a change of this effort or higher is left for manual work "
                        "(a marker): any, low, medium, high")
    parser.add_argument("--exclude", action="append", default=[], metavar="GLOB", help="gitignore-style pattern to leave out; repeatable")
    parser.add_argument("--force", action="store_true", help="--write even over uncommitted changes or outside git")
    parser.add_argument(
        "--changes",
        default="accelport-changes.json",
        metavar="FILE.json",
        help="--write: where to put the change list (a .md beside it); '-' for none (default: %(default)s)",
    )
    parser.add_argument(
        "--helpers",
        choices=("module", "package"),
        default="module",
        help="where migrated code gets what torch has no device-agnostic API for: a generated module written "
        "into the tree, needing only torch (default), or `import accelport.compat` (package)",
    )
    parser.add_argument(
        "--helpers-module",
        default="_accelport_compat",
        metavar="NAME",
        help="name of the generated helper module (default: %(default)s)",
    )
    add_format(parser, ("table", "json"), help="table: a summary (the diff with --diff); json: the change list")
    parser.add_argument("--jobs", type=positive_int, metavar="N", help="worker processes (default: number of cores)")
    parser.add_argument("--no-gitignore", action="store_true", help="also migrate files that .gitignore excludes")
    parser.add_argument("--allow-skipped", action="store_true", help="exit 0 even when some files were skipped or left alone")
    parser.set_defaults(handler=run)

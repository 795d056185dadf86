"""The one CLI dialect every command speaks, and the old spellings kept for one release.

* `-o/--output FILE` is always a file (the command's report; `-` or absent: stdout);
* `--output-dir DIR` is always a folder;
* `--format` takes the names in FORMATS (`md` and `text` are read as `markdown` and `table`);
* commands that report findings take `--select`, `--ignore` and `--fail-on`.

`tests/cli/test_conventions.py` reads every subcommand's parser and checks these rules.
An old spelling still works for one release and says, on stderr, what replaced it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

# Every --format name any command accepts, and the older names read as one of them.
FORMATS = ("table", "json", "csv", "markdown", "html", "sarif")
FORMAT_ALIASES = {"md": "markdown", "text": "table"}

# Old option spellings: (command, old) -> new. They work for one release with a warning.
DEPRECATED: dict[tuple[str, str], str] = {}


def format_name(text: str) -> str:
    """argparse type of --format: the canonical name of `text` (md -> markdown, text -> table)."""
    return FORMAT_ALIASES.get(text, text)


def add_format(parser: argparse.ArgumentParser, choices: Sequence[str], default: str = "table",
               help: str | None = None) -> None:
    """--format with canonical names; the aliases in FORMAT_ALIASES are accepted too."""
    unknown = set(choices) - set(FORMATS)
    if unknown:
        raise ValueError(f"--format {sorted(unknown)}: not one of the shared names {FORMATS}")
    parser.add_argument("--format", type=format_name, choices=tuple(choices), default=default,
                        help=help or f"output format (default: {default})")


class _Deprecated(argparse.Action):
    """An old spelling: stores into the new option's dest and says what replaced it."""

    def __init__(self, option_strings, dest, replacement: str = "", **kwargs):
        self.replacement = replacement
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"accelport: warning: {option_string} is deprecated and will be removed in the next release; "
              f"use {self.replacement}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_deprecated(parser: argparse.ArgumentParser, command: str, old: str, new: str, dest: str,
                   metavar: str | None = None) -> None:
    """Accept `old` as a hidden alias of `new` (same dest) for one release."""
    DEPRECATED[(command, old)] = new
    parser.add_argument(old, dest=dest, action=_Deprecated, replacement=new, metavar=metavar,
                        default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def add_output(parser: argparse.ArgumentParser, what: str = "the report") -> None:
    """-o/--output FILE: where the command's report goes (written atomically); stdout without it."""
    parser.add_argument("-o", "--output", metavar="FILE", help=f"write {what} to FILE (atomically) instead of stdout")


def add_output_dir(parser: argparse.ArgumentParser, command: str, what: str, default: str | None = None,
                   old: Sequence[str] = ()) -> None:
    """--output-dir DIR, with older spellings of it kept as deprecated aliases."""
    suffix = f" (default: {default})" if default else ""
    parser.add_argument("--output-dir", default=default, metavar="DIR", help=f"{what}{suffix}")
    for spelling in old:
        add_deprecated(parser, command, spelling, "--output-dir", "output_dir", "DIR")


def add_finding_filters(parser: argparse.ArgumentParser, fail_levels: Sequence[str], fail_help: str) -> None:
    """--select/--ignore rule IDs or prefixes, and --fail-on LEVEL, for commands that report findings."""
    parser.add_argument("--select", action="append", metavar="IDS",
                        help="only these rule IDs or prefixes, comma-separated (AP1001,AP2); repeatable")
    parser.add_argument("--ignore", action="append", metavar="IDS",
                        help="leave out these rule IDs or prefixes, comma-separated; repeatable")
    parser.add_argument("--fail-on", choices=tuple(fail_levels), metavar="LEVEL", help=fail_help)


def settle_finding_options(args: argparse.Namespace, levels: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Fill unset --select/--ignore/--fail-on/--target from [tool.accelport], check them; returns (select, ignore)."""
    from accelport import config, knowledge
    from accelport.errors import UserError

    settings = config.project_settings(args.paths)
    config.apply(args, settings, ("select", "ignore", "fail-on", "target"))
    if args.fail_on is not None and args.fail_on not in levels:
        raise UserError(f"{settings.get('__file__', '--fail-on')}: fail-on {args.fail_on!r} must be one of {', '.join(levels)}")
    return knowledge.rule_prefixes(args.select, "--select"), knowledge.rule_prefixes(args.ignore, "--ignore")


def rule_filter(select: tuple[str, ...], ignore: tuple[str, ...]):
    """A predicate on rule IDs: in `select` (all when empty) and not in `ignore` (IDs or prefixes)."""
    def keep(rule_id: str | None) -> bool:
        rule = (rule_id or "").upper()
        if select and not rule.startswith(select):
            return False
        return not (ignore and rule.startswith(ignore))

    return keep

"""Render a migration: unified diff, terminal summary, and the change list as JSON and Markdown."""

from __future__ import annotations

import json

from accelport.findings import compact_encoder, json_block
from accelport.migrate.model import (
    ADDED,
    MARKED,
    NOT_REWRITTEN,
    REMOVED,
    REWRITTEN,
    MigrationResult,
)
from accelport.report.markdown import code, table

_ACTION_WORDS = {
    REWRITTEN: "rewritten",
    MARKED: "marked for manual work",
    NOT_REWRITTEN: "not rewritten (marked)",
    ADDED: "added",
    REMOVED: "removed",
}


def render_diff(result: MigrationResult) -> str:
    return "".join(f.diff() for f in result.files)


_WOULD_WORDS = {
    REWRITTEN: "to rewrite",
    MARKED: "to mark for manual work",
    NOT_REWRITTEN: "not to rewrite (to mark)",
    ADDED: "to add",
    REMOVED: "to remove",
}


def render_summary(result: MigrationResult, style=None, *, written: bool) -> str:
    """A few lines per changed file and the totals; `style` colours them (accelport.cli._output.Style).

    `written`: the files were changed (--write); otherwise the summary says what would change.
    """
    style = style or _Plain()
    words = _ACTION_WORDS if written else _WOULD_WORDS
    lines = []
    for migration in result.files:
        if migration.error is not None:
            lines.append(f"{style.red('error')}  {migration.path}: {migration.error}")
            continue
        counts = migration.counts()
        if not counts:
            continue
        parts = [f"{counts[a]} {words[a]}" for a in (REWRITTEN, MARKED, NOT_REWRITTEN, ADDED, REMOVED) if counts[a]]
        lines.append(f"{style.bold(migration.path)}: {', '.join(parts)}")
        for change in migration.changes:
            if change.action in (MARKED, NOT_REWRITTEN):
                lines.append(f"  {migration.path}:{change.line}: {style.yellow(change.rule_id or '')} {change.symbol}: left for manual work")
    for skip in result.skipped:
        lines.append(f"{style.yellow('skipped')}  {skip.path}: {skip.reason}")
    if result.not_python:
        names = ", ".join(n.path for n in result.not_python[:5]) + (" ..." if len(result.not_python) > 5 else "")
        lines.append(
            f"{len(result.not_python)} non-Python file(s) with CUDA findings are route-B work that migrate does not "
            f"rewrite (see `accelport inventory`): {names}"
        )
    summary = result.summary()
    if written:
        totals = (f"{summary['files_changed']} file(s) changed of {summary['files_with_findings']} with findings "
                  f"({summary['files_scanned']} scanned): {summary['rewritten']} rewritten, {summary['marked']} marked, "
                  f"{summary['added']} added, {summary['removed']} removed")
    else:
        totals = (f"{summary['files_changed']} file(s) would change of {summary['files_with_findings']} with findings "
                  f"({summary['files_scanned']} scanned; nothing written): would rewrite {summary['rewritten']}, "
                  f"mark {summary['marked']}, add {summary['added']}, remove {summary['removed']}")
    lines.append(totals + (f"; {summary['files_left_alone']} file(s) left alone" if summary["files_left_alone"] else ""))
    return "\n".join(lines) + "\n"


class _Plain:
    def __getattr__(self, _name):
        return lambda text: text


def render_json(result: MigrationResult) -> str:
    """The changes document: the summary indented, then each file on a line and each change on one.

    An indented dump of every change goes through json's pure-Python encoder, which was a
    sixth of `migrate --check --format json` on a large tree; compact lines use the C encoder.
    """
    data = result.to_dict()
    files = data.pop("files")
    skipped = data.pop("skipped")
    not_python = data.pop("not_python")
    head = json.dumps(data, indent=2, ensure_ascii=False)[:-2]  # drop the closing "\n}"
    compact = compact_encoder()

    def one_file(entry: dict) -> str:
        changes = entry.pop("changes")
        return compact(entry)[:-1] + ', "changes": ' + json_block([compact(c) for c in changes], "      ") + "}"

    return (
        f'{head},\n  "files": {json_block([one_file(f) for f in files])},\n'
        f'  "skipped": {json_block([compact(s) for s in skipped])},\n'
        f'  "not_python": {json_block([compact(n) for n in not_python])}\n}}\n'
    )


def _cell(text: str) -> str:
    return text.replace("\r\n", "\n").strip().replace("\n", " ⏎ ")


def render_markdown(result: MigrationResult) -> str:
    """The change list: file, line, rule, before → after."""
    summary = result.summary()
    out = [
        "# accelport migrate: change list",
        "",
        f"{summary['files_changed']} file(s) changed of {summary['files_with_findings']} with findings; "
        f"{summary['rewritten']} rewritten, {summary['marked']} marked for manual work, "
        f"{summary['added']} added, {summary['removed']} removed.",
        "",
    ]
    for migration in result.files:
        if migration.error is not None:
            out += [f"## {migration.path}", "", f"Left unchanged: {migration.error}", ""]
            continue
        if not migration.changes:
            continue
        rows = [
            (str(c.line), c.action, c.rule_id or "", c.symbol, code(_cell(c.before)) if c.before else "", code(_cell(c.after)))
            for c in migration.changes
        ]
        headers = ["line", "action", "rule", "symbol", "before", "after"]
        out += [f"## {migration.path}", "", table(headers, rows, raw_columns=(4, 5)), ""]
    if result.skipped:
        out += ["## Skipped", "", table(["file", "reason"], [(s.path, s.reason) for s in result.skipped]), ""]
    if result.not_python:
        rows = [(n.path, str(n.findings)) for n in result.not_python]
        out += ["## Not Python (route B, not rewritten)", "", table(["file", "findings"], rows), ""]
    return "\n".join(out)

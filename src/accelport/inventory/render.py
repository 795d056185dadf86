"""Render an inventory Report: terminal table, JSON, SARIF 2.1.0, CSV, Markdown, self-contained HTML."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from accelport import __version__, knowledge
from accelport.findings import Category, Effort, Finding, Report
from accelport.report import markdown

FORMATS = ("table", "json", "sarif", "csv", "markdown", "html")


def _by_file(report: Report) -> dict[str, list[Finding]]:
    grouped: dict[str, list[Finding]] = defaultdict(list)
    for finding in report.findings:
        grouped[finding.location.path].append(finding)
    return grouped


def _where(finding: Finding) -> str:
    loc = finding.location
    prefix = f"cell {loc.cell} " if loc.cell is not None else ""
    return f"{prefix}{loc.line}:{loc.column}"


def _hours(report: Report) -> str:
    return f"{report.effort.hours_low:.1f}-{report.effort.hours_high:.1f} h"


# --------------------------------------------------------------------------- table


def render_table(report: Report, style: Any = None, max_per_file: int | None = None) -> str:
    """The terminal view: summary by category and route, then findings grouped by file.

    `max_per_file` shortens each file's list (the demo); the count of the rest is shown.
    """
    bold = style.bold if style else (lambda s: s)
    dim = style.dim if style else (lambda s: s)
    effort_color: dict[Effort, Callable[[str], str]] = {
        Effort.NONE: dim,
        Effort.LOW: (style.green if style else str),
        Effort.MEDIUM: (style.yellow if style else str),
        Effort.HIGH: (style.red if style else str),
    }
    summary = report.summary()
    out = [bold(f"accelport inventory: {', '.join(report.roots)}" + (f" (target: {report.target})" if report.target else ""))]
    out.append(
        f"  {summary['files_scanned']} files scanned ({summary['lines_scanned']} lines), "
        f"{summary['files_with_findings']} with findings, {summary['files_skipped']} skipped"
    )
    categories = ", ".join(f"{Category(c).title} {n}" for c, n in summary["by_category"].items() if n)
    out.append(f"  {summary['findings']} findings" + (f": {categories}" if categories else ""))
    levels = ", ".join(f"{level} {n}" for level, n in summary["by_effort"].items())
    out.append(f"  effort: {levels}; about {_hours(report)}; {summary['autofixable']} fixed by `accelport migrate`")
    if summary["acknowledged"]:
        out.append(f"  {summary['acknowledged']} marked in the source as known manual work (`# accelport: APxxxx`)")
    out.append(bold(f"  route {report.route.route.value}: {report.route.route.title}"))
    out.extend(f"    - {reason}" for reason in report.route.reasons)
    for path, findings in _by_file(report).items():
        file_summary = next((f for f in report.files if f.path == path), None)
        route = f", route {file_summary.route.route.value}" if file_summary else ""
        out.append("")
        out.append(bold(f"{path}") + dim(f"  ({len(findings)} findings{route})"))
        shown = findings if max_per_file is None else findings[:max_per_file]
        for finding in shown:
            fix = " [auto]" if finding.autofix else ""
            if finding.acknowledged:
                fix += " [marked]"
            line = f"  {_where(finding):>9}  {finding.rule_id}  {effort_color[finding.effort](f'{finding.effort.value:<6}')}  {finding.message}{fix}"
            out.append(line)
            if finding.snippet:
                out.append(dim(f"             {finding.snippet}"))
            if finding.replacement:
                out.append(dim(f"             -> {finding.replacement}"))
        if len(shown) < len(findings):
            out.append(dim(f"  ... and {len(findings) - len(shown)} more"))
    if report.skipped:
        out.append("")
        out.append(bold(f"skipped ({len(report.skipped)}):"))
        out.extend(f"  {s.path}: {s.reason}" for s in report.skipped)
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- json / csv


def render_json(report: Report) -> str:
    return report.to_json()


CSV_COLUMNS = (
    "path",
    "cell",
    "line",
    "column",
    "end_line",
    "end_column",
    "rule_id",
    "category",
    "family",
    "symbol",
    "effort",
    "route",
    "autofix",
    "acknowledged",
    "message",
    "replacement",
    "snippet",
)


def render_csv(report: Report) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for f in report.findings:
        loc = f.location
        writer.writerow(
            [
                loc.path,
                loc.cell if loc.cell is not None else "",
                loc.line,
                loc.column,
                loc.end_line,
                loc.end_column,
                f.rule_id,
                f.category.value,
                f.family,
                f.symbol,
                f.effort.value,
                f.route.value,
                "yes" if f.autofix else "no",
                "yes" if f.acknowledged else "no",
                f.message,
                f.replacement or "",
                f.snippet,
            ]
        )
    return buffer.getvalue()


# --------------------------------------------------------------------------- markdown


def render_markdown(report: Report) -> str:
    summary = report.summary()
    out = [f"# accelport inventory: {', '.join(report.roots)}", ""]
    out.append(
        f"{summary['files_scanned']} files scanned ({summary['lines_scanned']} lines), "
        f"{summary['files_with_findings']} with findings, {summary['files_skipped']} skipped. "
        f"**{summary['findings']} findings**, {summary['autofixable']} fixed by `accelport migrate`."
    )
    out.append("")
    out.append(f"## Route {report.route.route.value}: {report.route.route.title}")
    out.append("")
    out.extend(f"- {markdown.escape(r)}" for r in report.route.reasons)
    out.append("")
    out.append(f"Effort: about {_hours(report)}.")
    out.append("")
    out.append(markdown.table(["effort", "findings"], list(summary["by_effort"].items())))
    out.append(markdown.table(["category", "findings"], [(Category(c).title, n) for c, n in summary["by_category"].items() if n]))
    out.append("## Findings")
    out.append("")
    rows = [
        (
            f"{f.location.path}:{_where(f)}",
            f.rule_id,
            f.effort.value,
            f.message,
            markdown.code(f.snippet) if f.snippet else "",
            markdown.code(f.replacement) if f.replacement else "",
        )
        for f in report.findings
    ]
    out.append(markdown.table(["where", "rule", "effort", "what", "code", "suggested"], rows, raw_columns=(4, 5)))
    if report.skipped:
        out.append("## Skipped files")
        out.append("")
        out.append(markdown.table(["file", "reason"], [(s.path, s.reason) for s in report.skipped]))
    return "\n".join(out)


# --------------------------------------------------------------------------- html


def render_html(report: Report) -> str:
    summary = report.summary()
    from accelport.report.html import HtmlPage

    page = HtmlPage(
        f"accelport inventory: {', '.join(report.roots)}",
        f"accelport {report.tool_version}" + (f" · target {report.target}" if report.target else ""),
    )
    page.cards(
        [
            ("findings", summary["findings"]),
            ("files scanned", summary["files_scanned"]),
            ("with findings", summary["files_with_findings"]),
            ("skipped", summary["files_skipped"]),
            ("auto-fixable", summary["autofixable"]),
            ("route", f"{report.route.route.value}: {report.route.route.title}"),
            ("effort", _hours(report)),
        ]
    )
    page.heading("Route")
    page.table(["reason"], [(r,) for r in report.route.reasons])
    page.heading("By category")
    page.table(["category", "findings"], [(Category(c).title, n) for c, n in summary["by_category"].items()])
    page.heading("By effort")
    page.table(["effort", "findings"], list(summary["by_effort"].items()))
    page.heading("Files")
    page.table(
        ["file", "findings", "route", "hours"],
        [(f.path, f.findings, f.route.route.value, f"{f.effort.hours_low:.1f}-{f.effort.hours_high:.1f}") for f in report.files],
    )
    page.heading("Findings")
    for path, findings in _by_file(report).items():
        page.heading(path, level=3)
        page.table(
            ["where", "rule", "effort", "what", "code", "suggested"],
            [(_where(f), f.rule_id, f.effort.value, f.message, f.snippet, f.replacement or "") for f in findings],
            code_columns=(4, 5),
        )
    if report.skipped:
        page.heading("Skipped files")
        page.table(["file", "reason"], [(s.path, s.reason) for s in report.skipped])
    return page.render()


# --------------------------------------------------------------------------- sarif

_SARIF_LEVEL = {Effort.NONE: "note", Effort.LOW: "note", Effort.MEDIUM: "warning", Effort.HIGH: "error"}


def repository_root(start: str | None = None) -> Path:
    """The nearest folder at or above `start` (default: the working folder) holding `.git`; else `start` itself."""
    here = Path(os.path.abspath(start or os.getcwd()))
    for folder in (here, *here.parents):
        if (folder / ".git").exists():
            return folder
    return here


def _artifact(path: str, root: Path) -> dict[str, str]:
    """A SARIF artifactLocation: relative to SRCROOT (the repository root) when the file is inside it, else a file:// URI.

    Paths are made absolute as written (`..` folded, links not followed) so `.tools/t.py`
    keeps its dot, `../train.py` is not mistaken for `train.py` and `/tmp/x` stays absolute.
    """
    member = ""
    if "!" in path and not os.path.exists(path):  # FILE!PART: a member of an archive
        path, member = path.split("!", 1)
    absolute = Path(os.path.normpath(os.path.abspath(path)))
    suffix = quote(f"!{member}") if member else ""
    try:
        relative = absolute.relative_to(root)
    except ValueError:
        return {"uri": absolute.as_uri() + suffix}
    return {"uri": quote(relative.as_posix()) + suffix, "uriBaseId": "SRCROOT"}


def _folder_uri(folder: Path) -> str:
    uri = folder.as_uri()
    return uri if uri.endswith("/") else uri + "/"  # SARIF: a base URI ends with a slash


def _fingerprints(findings: list[Finding], uris: list[str]) -> list[str]:
    """Stable across runs and line moves: rule + path + the line's text with its spacing normalised (+ occurrence)."""
    seen: dict[str, int] = {}
    out = []
    for finding, uri in zip(findings, uris, strict=True):
        text = " ".join(finding.snippet.split())
        cell = f"#cell{finding.location.cell}" if finding.location.cell is not None else ""
        digest = hashlib.sha256(f"{finding.rule_id}\0{uri}{cell}\0{text}".encode()).hexdigest()[:32]
        seen[digest] = seen.get(digest, 0) + 1
        out.append(f"{digest}:{seen[digest]}")  # the same line twice in a file: two results, told apart in order
    return out


def render_sarif(report: Report, root: str | Path | None = None) -> str:
    """SARIF 2.1.0: one run, every rule that fired as a reportingDescriptor, skipped files as notifications.

    URIs are relative to `root` (default: the repository holding the working folder, else
    the working folder), named by `originalUriBaseIds` SRCROOT; files outside it get
    absolute file:// URIs. Each result carries a partial fingerprint for code-scanning
    tools that track a finding across commits.
    """
    root = Path(os.path.normpath(os.path.abspath(root))) if root is not None else repository_root()
    rules = knowledge.rules()
    used = sorted({f.rule_id for f in report.findings})
    index = {rule_id: i for i, rule_id in enumerate(used)}
    descriptors = []
    for rule_id in used:
        rule = rules[rule_id]
        descriptors.append(
            {
                "id": rule.id,
                "name": rule.name,
                "shortDescription": {"text": rule.summary},
                "fullDescription": {"text": rule.why},
                "help": {
                    "text": f"{rule.why}\n\nBefore:\n{rule.before}\n\nAfter:\n{rule.after}\n\n{rule.fix}",
                    "markdown": f"{rule.why}\n\nBefore:\n```python\n{rule.before}\n```\n\nAfter:\n```python\n{rule.after}\n```\n\n{rule.fix}",
                },
                "defaultConfiguration": {"level": _SARIF_LEVEL[rule.effort]},
                "properties": {
                    "category": rule.category.value,
                    "family": rule.family,
                    "effort": rule.effort.value,
                    "autofix": rule.autofix,
                    "route": rule.route.value,
                    "tags": list(dict.fromkeys([rule.category.value, rule.family])),  # SARIF tags are a set
                },
            }
        )
    results = []
    locations = [_artifact(f.location.path, root) for f in report.findings]
    fingerprints = _fingerprints(report.findings, [a["uri"] for a in locations])
    for f, artifact, fingerprint in zip(report.findings, locations, fingerprints, strict=True):
        loc = f.location
        region: dict[str, Any] = {
            "startLine": loc.line,
            "startColumn": loc.column,
            "endLine": loc.end_line,
            "endColumn": loc.end_column,
        }
        if f.snippet:
            region["snippet"] = {"text": f.snippet}
        properties: dict[str, Any] = {
            "category": f.category.value,
            "effort": f.effort.value,
            "route": f.route.value,
            "autofix": f.autofix,
            "symbol": f.symbol,
            "backends": {k: v.value for k, v in f.backends.items()},
        }
        if loc.cell is not None:
            properties["notebookCell"] = loc.cell
        result: dict[str, Any] = {
            "ruleId": f.rule_id,
            "ruleIndex": index[f.rule_id],
            "level": _SARIF_LEVEL[f.effort],
            "message": {"text": f.message + (f" Suggested: {f.replacement}" if f.replacement else "")},
            "locations": [{"physicalLocation": {"artifactLocation": artifact, "region": region}}],
            "partialFingerprints": {"accelportFinding/v1": fingerprint},
            "properties": properties,
        }
        results.append(result)
    notifications = [
        {
            "level": "warning",
            "message": {"text": f"skipped: {s.reason}"},
            "locations": [{"physicalLocation": {"artifactLocation": _artifact(s.path, root)}}],
        }
        for s in report.skipped
    ]
    log = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "accelport",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "informationUri": "https://accelport.dev",
                        "rules": descriptors,
                    }
                },
                "originalUriBaseIds": {"SRCROOT": {"uri": _folder_uri(root)}},
                "invocations": [
                    {"executionSuccessful": not report.skipped, "toolExecutionNotifications": notifications}
                ],
                "results": results,
                "properties": {"route": report.route.to_dict(), "effort": report.effort.to_dict()},
            }
        ],
    }
    return json.dumps(log, indent=2) + "\n"


RENDERERS: dict[str, Callable[[Report], str]] = {
    "json": render_json,
    "sarif": render_sarif,
    "csv": render_csv,
    "markdown": render_markdown,
    "html": render_html,
}

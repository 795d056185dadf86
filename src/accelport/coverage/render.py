"""Render a coverage report as a terminal table, JSON, Markdown or a self-contained HTML page."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from accelport.coverage.check import CoverageReport, OpVerdict, Status, TargetResult
from accelport.coverage.oplists import OpList
from accelport.coverage.records import Trace
from accelport.report import markdown
from accelport.report.html import HtmlPage
from accelport.report.table import text_table

SUMMARY_HEADERS = ["target", "checked against", "native", "via .out", "composite", "unknown", "fallback", "missing"]
PROBLEM_HEADERS = ["target", "operator", "status", "calls", "share", "phase", "module", "source"]
_BADGE = {
    Status.NATIVE: "pass",
    Status.DELEGATE: "pass",
    Status.COMPOSITE: "info",
    Status.UNKNOWN: "warn",
    Status.FALLBACK: "fail",
    Status.MISSING: "fail",
}


def headline(trace: Trace) -> str:
    size = f"{trace.model}, {trace.parameters:,} parameters" if trace.model else "step function"
    return (
        f"{trace.mode} step of {trace.spec} ({size}) traced with {trace.describe_strategy()} "
        f"in {trace.seconds:.2f} s: {len(trace.judged())} operators, {trace.total_calls} calls"
    )


def _summary_rows(report: CoverageReport) -> list[list[object]]:
    rows: list[list[object]] = []
    for target in report.targets:
        counts = target.summary()
        rows.append(
            [
                target.vendor,
                target.label,
                counts["native"],
                counts["delegate"],
                counts["composite"],
                counts["unknown"],
                counts["fallback"],
                counts["missing"],
            ]
        )
    return rows


def problems(report: CoverageReport) -> list[tuple[TargetResult, OpVerdict]]:
    """Missing and falling-back operators (and failed smoke runs), most called first."""
    found = []
    for target in report.targets:
        for verdict in target.verdicts:
            if verdict.status in (Status.MISSING, Status.FALLBACK) or verdict.smoke_failed:
                found.append((target, verdict))
    return sorted(found, key=lambda tv: (-(tv[1].record.calls if tv[1].record else 0), tv[0].vendor, tv[1].op))


def _problem_row(report: CoverageReport, target: TargetResult, verdict: OpVerdict) -> list[object]:
    record = verdict.record
    calls = record.calls if record else 0
    total = report.trace.total_calls or 1
    site = record.first_site if record else None
    phases = ", ".join(sorted(record.phases)) if record else ""
    status = verdict.status.value if verdict.status in (Status.MISSING, Status.FALLBACK) else "smoke failed"
    return [target.vendor, verdict.op, status, calls, f"{100 * calls / total:.1f}%", phases, site.module if site else "", site.location if site else ""]


def _explanations(verdict: OpVerdict) -> list[str]:
    lines = []
    if verdict.detail:
        lines.append(verdict.detail)
    record = verdict.record
    if record and len(record.sites) > 1:
        more = [f"{s.module or '-'} {s.location}".strip() for s, _ in record.sites.most_common()[1:4]]
        lines.append("also called from: " + "; ".join(more))
    if verdict.advice:
        lines.append(f"replacement: {verdict.advice}")
    if verdict.decomposition:
        parts = ", ".join(f"{op} ({status.value})" for op, status in verdict.decomposition)
        lines.append(f"torch._decomp decomposes it into: {parts}")
    failed = {dtypes: result for dtypes, result in verdict.smoke.items() if result.startswith("error")}
    for dtypes, result in failed.items():
        lines.append(f"smoke run [{dtypes}]: {result}")
    return lines


def _matrix(report: CoverageReport) -> tuple[list[str], list[list[object]]]:
    headers = ["operator", "calls", "phases", "dtypes"] + [t.vendor for t in report.targets]
    by_target = [{v.op: v for v in t.verdicts} for t in report.targets]
    rows = []
    for record in report.trace.judged():
        cells: list[object] = [record.op, record.calls, ",".join(sorted(record.phases)), " ".join(record.dtypes[:2])]
        for verdicts in by_target:
            verdict = verdicts.get(record.op)
            cell = verdict.status.value if verdict else ""
            if verdict and verdict.status is Status.DELEGATE:
                cell = "via " + verdict.via[0]
            if verdict and verdict.smoke_failed:
                cell += " (smoke failed)"
            cells.append(cell)
        rows.append(cells)
    return headers, rows


def _notes(report: CoverageReport) -> list[str]:
    notes = list(report.trace.notes)
    folded = report.trace.folded()
    if folded:
        names = sorted({r.op for r in folded})
        notes.append(
            f"scaled_dot_product_attention is judged as the call itself: on {report.trace.device} it ran "
            f"{', '.join(names)}; an accelerator runs its own fused kernel or the math path"
        )
    host = report.trace.host()
    if host:
        notes.append(
            "ran on the CPU (tensors on the host, as an optimizer's step counters are on any machine), not judged: "
            + ", ".join(f"{r.op} ({r.calls})" for r in host)
        )
    for target in report.targets:
        notes.extend(f"{target.vendor}: {note}" for note in target.notes)
        if target.count(Status.MISSING) and target.unlisted:
            notes.append(f"{target.vendor}: without a kernel an operator {target.unlisted}")
    return notes


def summary_table(report: CoverageReport) -> str:
    """One row per target: how many operators are native, via .out, composite, unknown, fallback, missing."""
    return text_table(SUMMARY_HEADERS, _summary_rows(report))


def render_table(report: CoverageReport, style: Any = None) -> str:
    out = [headline(report.trace), ""]
    out.append(summary_table(report))
    found = problems(report)
    if found:
        out.append("\nMissing or falling back (a backend without a kernel errors out or copies to the CPU):")
        rows = [_problem_row(report, t, v) for t, v in found]
        table = text_table(PROBLEM_HEADERS, rows, max_width=48).splitlines()
        out.extend(table[:2])
        for line, (_, verdict) in zip(table[2:], found, strict=True):
            out.append(line)
            out.extend(f"    {text}" for text in _explanations(verdict))
        out.append("")
    headers, rows = _matrix(report)
    out.append("\nOperators:")
    out.append(text_table(headers, rows, max_width=48))
    notes = _notes(report)
    if notes:
        out.append("\nNotes:")
        out.extend(f"  - {note}" for note in notes)
    if report.failed:
        verdict = "FAIL: operators missing or falling back"
        verdict = style.red(verdict) if style else verdict
    else:
        verdict = "ok: every operator has a kernel, a delegate or a composite"
        verdict = style.green(verdict) if style else verdict
    out.append(f"\n{verdict}")
    return "\n".join(out) + "\n"


def render_json(report: CoverageReport) -> str:
    return json.dumps(report.to_dict(), indent=2) + "\n"


def render_markdown(report: CoverageReport) -> str:
    out = ["# Operator coverage", "", headline(report.trace), ""]
    out.append(markdown.table(SUMMARY_HEADERS, _summary_rows(report)))
    found = problems(report)
    if found:
        out += ["", "## Missing or falling back", ""]
        rows = []
        for target, verdict in found:
            row = _problem_row(report, target, verdict)
            row[1] = markdown.code(verdict.op)
            rows.append([*row, markdown.escape("; ".join(_explanations(verdict)))])
        out.append(markdown.table([*PROBLEM_HEADERS, "details"], rows, raw_columns=(1, 8)))
    headers, rows = _matrix(report)
    out += ["", "## Operators", ""]
    out.append(markdown.table(headers, [[markdown.code(r[0]), *r[1:]] for r in rows], raw_columns=(0,)))
    notes = _notes(report)
    if notes:
        out += ["", "## Notes", ""]
        out.extend(f"- {markdown.escape(note)}" for note in notes)
    out += ["", f"**Verdict:** {'fail' if report.failed else 'pass'}", ""]
    return "\n".join(out)


def render_html(report: CoverageReport) -> str:
    trace = report.trace
    page = HtmlPage("Operator coverage", headline(trace))
    page.cards(
        [
            ("verdict", "fail" if report.failed else "pass"),
            ("operators", len(trace.judged())),
            ("calls", trace.total_calls),
            ("traced with", trace.strategy),
            ("trace seconds", f"{trace.seconds:.2f}"),
        ]
    )
    page.heading("Targets")
    page.table(SUMMARY_HEADERS, _summary_rows(report))
    found = problems(report)
    if found:
        page.heading("Missing or falling back")
        rows = []
        for target, verdict in found:
            row = _problem_row(report, target, verdict)
            row[2] = page.badge(str(row[2]), "fail")
            rows.append([*row, "; ".join(_explanations(verdict))])
        page.table([*PROBLEM_HEADERS, "details"], rows, raw_columns=(2,), code_columns=(1, 7))
    page.heading("Operators")
    headers, rows = _matrix(report)
    status_columns = range(4, len(headers))
    badge_rows = []
    for row in rows:
        cells = list(row)
        for i in status_columns:
            text = str(cells[i])
            status = next((s for s in Status if text.startswith(s.value)), Status.DELEGATE if text.startswith("via") else None)
            kind = "fail" if "smoke failed" in text else _BADGE.get(status, "info") if status else "info"
            cells[i] = page.badge(text, kind) if text else ""
        badge_rows.append(cells)
    page.table(headers, badge_rows, raw_columns=tuple(status_columns), code_columns=(0,))
    folded = trace.folded()
    if folded:
        page.heading("Folded into scaled_dot_product_attention")
        page.paragraph(f"What the trace device ({trace.device}) ran inside the call; not judged.")
        page.table(["operator", "calls"], [[r.op, r.calls] for r in folded], code_columns=(0,))
    page.heading("Operator lists")
    page.table(
        ["target", "list", "complete", "source", "licence"],
        [_list_row(t) for t in report.targets],
    )
    notes = _notes(report)
    if notes:
        page.heading("Notes")
        page.table(["note"], [[n] for n in notes])
    return page.render()


def _list_row(target: TargetResult) -> list[object]:
    oplist = target.oplist
    if oplist is None:
        return [target.vendor, target.label, "live", "this machine's dispatcher", ""]
    return [target.vendor, f"{oplist.label} ({oplist.origin})", "yes" if oplist.complete else "partial", oplist.source, oplist.licence]


def render(report: CoverageReport, fmt: str, style: Any = None) -> str:
    if fmt == "table":
        return render_table(report, style)
    return {"json": render_json, "markdown": render_markdown, "html": render_html}[fmt](report)


def render_lists(lists: Sequence[OpList], fmt: str) -> str:
    """The operator lists accelport knows (shipped and user-given)."""
    if fmt == "json":
        return json.dumps([o.to_dict() for o in lists], indent=2) + "\n"
    headers = ["vendor", "backend", "version", "torch", "ops", "complete", "file", "source"]
    rows = [[o.vendor, o.backend, o.version, o.torch_version or "-", len(o.ops), "yes" if o.complete else "partial", o.origin, o.source] for o in lists]
    if fmt == "markdown":
        return markdown.table(headers, rows)
    if fmt == "html":
        page = HtmlPage("Operator lists")
        page.table(headers, rows)
        return page.render()
    return text_table(headers, rows, max_width=70)

"""Render a `CompareResult`: terminal summary and table, CSV (every row), Markdown, self-contained HTML."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping
from typing import Any

from accelport.report import markdown, svg
from accelport.report.html import HtmlPage
from accelport.report.table import text_table
from accelport.textsafe import one_line
from accelport.verify.numerics.compare import CompareResult

CSV_COLUMNS = (
    "row", "status", "kind", "step", "phase", "module", "op", "call_index", "source_line", "dtype_ref", "dtype_test",
    "shape", "inputs_ok", "score", "max_abs", "max_rel", "mean_rel", "rmse", "cosine", "max_ulp", "allclose",
    "rel_l2", "nan_mismatch", "inf_mismatch", "source", "reason",
)  # fmt: skip


def _num(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _fmt(value: Any) -> str:
    value = _num(value)
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isinf(value):
            return "inf"
        return f"{value:.3g}"
    return str(value)


def where(item: Mapping[str, Any]) -> str:
    """`op` in `module` (call N, step S, phase) at file:line, in one line."""
    module = item.get("module") or "(top level)"
    text = f"{item.get('op')} in {module} (call {item.get('call_index')}, step {item.get('step')}, {item.get('phase')})"
    if item.get("source_line"):
        text += f" at {item['source_line']}"
    return text


def summary_lines(result: CompareResult) -> list[str]:
    data = result.to_dict()
    counts = data["counts"]
    drift = data.get("drift") or {"count": counts.get("drift", 0), "fails": False, "first": None}
    verdict = data["verdict"].upper()
    if drift["count"]:
        verdict += f" with {drift['count']} DRIFT"
    lines = [
        f"verdict: {verdict}   REF {data['ref']} ({data['modes']['ref']})   TEST {data['test']} ({data['modes']['test']})",
        f"aligned {counts['matched']} records; {counts['failed']} differ beyond tolerance; "
        f"{counts['drift']} beyond tolerance but explained as drift by replay; "
        f"{counts['only_ref']} only in REF, {counts['only_test']} only in TEST ({counts['benign_extra']} of them casts, copies or views)",
        f"parameters: {data['params']['checked']} checked, {len(data['params']['failed'])} differ; "
        f"model inputs: {data['inputs']['checked']} checked, {len(data['inputs']['failed'])} differ",
    ]
    if drift["count"]:
        effect = "fails the verdict (--fail-on-drift)" if drift["fails"] else "does not fail the verdict (--fail-on-drift makes it)"
        lines.append(
            f"DRIFT: {drift['count']} records beyond tolerance that replay explains as accumulated drift; {effect}"
        )
        if drift.get("first"):
            lines.append("  first drift: " + where(drift["first"]))
    for side in ("ref", "test"):
        if data["truncated"][side]:
            lines.append(
                f"TRUNCATED: {side.upper()} dump: {data['truncated'][side + '_detail']}; compared what was flushed"
            )
    if counts["after_truncation"]:
        lines.append(
            f"{counts['after_truncation']} records of the other dump were not compared (past the truncation)"
        )
    for reason in data["reasons"]:
        lines.append(f"reason: {reason}")
    first = data["first_divergence"]
    if first:
        lines.append("first divergence: " + where(first))
        lines.append(f"  cause: {first.get('cause')}")
        replay = first.get("replay") or {}
        if first.get("reason") and first.get("reason") != replay.get("summary"):
            lines.append(f"  {first['reason']}")
        if first.get("args_ref") is not None:
            lines.append(
                f"  arguments differ: REF {json.dumps(first['args_ref'])}  TEST {json.dumps(first['args_test'])}"
            )
        if first.get("first_failing_record"):
            lines.append("  first failing record after it: " + where(first["first_failing_record"]))
        if replay.get("status") == "done":
            lines.append(f"  replay: {replay['summary']}")
        elif replay:
            lines.append(f"  replay: {replay.get('status')} ({replay.get('why', '')})")
    elif not result.passed:
        lines.append("first divergence: none found among aligned records")
    return lines


def _row_cells(item: Mapping[str, Any]) -> list[Any]:
    m = item.get("metrics") or {}
    return [
        item.get("status", "fail"),
        item.get("phase"),
        item.get("module") or "(top level)",
        item.get("op"),
        item.get("call_index"),
        _num(item.get("score")),
        _num(m.get("max_abs", m.get("max_abs_lower_bound"))),
        _num(m.get("rel_l2")),
        _num(m.get("cosine")),
        item.get("reason", ""),
    ]


_HEADERS = [
    "status",
    "phase",
    "module",
    "op",
    "call",
    "score",
    "max_abs",
    "rel_l2",
    "cosine",
    "reason",
]


def render_text(result: CompareResult) -> str:
    out = "\n".join(one_line(line) for line in summary_lines(result)) + "\n"
    if result.worst:
        out += "\nworst records (score = error / allowed error; > 1 fails):\n"
        out += text_table(_HEADERS, [_row_cells(w) for w in result.worst], max_width=48)
    for side in ("ref", "test"):
        extra = result.only[side]
        if extra:
            out += f"\nops only in {side.upper()} that change values:\n"
            out += text_table(
                ["phase", "module", "op", "call", "why"],
                [[e["phase"], e["module"], e["op"], e["call_index"], e["reason"]] for e in extra],
            )
    return out


def render_json(result: CompareResult) -> str:
    return json.dumps(result.to_dict(), indent=2, allow_nan=False) + "\n"


def write_csv(result: CompareResult, handle: Any) -> None:
    """Every row, streamed from the spool to `handle` (memory does not grow with the dump)."""
    writer = csv.writer(handle)
    writer.writerow(CSV_COLUMNS)
    for row in result.rows():
        merged = {**row, **(row.get("metrics") or {})}
        writer.writerow([_csv_cell(merged.get(c)) for c in CSV_COLUMNS])


def _csv_cell(value: Any) -> Any:
    """Module names and source lines come from the user's code: control characters escaped."""
    if value is None:
        return ""
    return one_line(value) if isinstance(value, str) else value


def render_csv(result: CompareResult) -> str:
    buffer = io.StringIO()
    write_csv(result, buffer)
    return buffer.getvalue()


def render_markdown(result: CompareResult) -> str:
    lines = [f"# accelport compare: {result.verdict.upper()}", ""]
    lines += [f"- {markdown.escape(line)}" for line in summary_lines(result)]
    lines.append("")
    if result.worst:
        lines.append("## Worst records")
        lines.append("")
        lines.append(
            markdown.table(
                _HEADERS,
                [_markdown_cells(_row_cells(w)) for w in result.worst],
                raw_columns=(2, 3),
            )
        )
    if result.params["failed"]:
        lines.append("## Parameters that differ")
        lines.append("")
        lines.append(
            markdown.table(
                ["module", "parameter", "score", "reason"],
                [
                    [markdown.code(p["module"]), markdown.code(p["op"]), _fmt(p.get("score")), p.get("reason")]
                    for p in result.params["failed"]
                ],
                raw_columns=(0, 1),
            )
        )
    return "\n".join(lines) + "\n"


def _markdown_cells(cells: list[Any]) -> list[Any]:
    """A worst-records row for Markdown: module and op (names from the user's code) as code spans."""
    out = [_fmt(c) if isinstance(c, float) else c for c in cells]
    out[2], out[3] = markdown.code(out[2]), markdown.code(out[3])
    return out


def layer_chart(result: CompareResult) -> str:
    """Worst error/tolerance per module in execution order (log scale); the line at 1 is the tolerance."""
    points = []
    for index, module in enumerate(result.modules):
        score = _num(module["max_score"])
        points.append(
            (
                float(index),
                max(float(score), 1e-6)
                if isinstance(score, float) and math.isfinite(score)
                else 1e6,
            )
        )
    series = {"worst error / allowed per module": points}
    if points:
        series["tolerance"] = [(0.0, 1.0), (float(len(points) - 1), 1.0)]
    return svg.line_chart(
        series,
        title="Error per layer (execution order)",
        x_label="module index",
        y_label="error / allowed",
        log_y=True,
    )


def render_html(result: CompareResult) -> str:
    data = result.to_dict()
    page = HtmlPage(
        f"accelport compare: {result.verdict.upper()}",
        f"REF {data['ref']}  vs  TEST {data['test']}",
    )
    page.raw(page.badge(result.verdict.upper(), "pass" if result.passed else "fail"))
    counts = data["counts"]
    page.cards(
        [
            ("aligned records", counts["matched"]),
            ("differ", counts["failed"]),
            ("drift (explained)", counts["drift"]),
            ("only in REF", counts["only_ref"]),
            ("only in TEST", counts["only_test"]),
            (
                "truncated",
                ", ".join(s.upper() for s in ("ref", "test") if data["truncated"][s]) or "no",
            ),
        ]
    )
    page.heading("Summary")
    page.code_block("\n".join(summary_lines(result)))
    page.heading("Error per layer")
    page.svg(
        layer_chart(result), "worst (error / allowed error) of each module's records; above 1 fails"
    )
    if result.worst:
        page.heading("Worst records")
        page.table(_HEADERS, [_row_cells(w) for w in result.worst], code_columns=(2, 3))
    page.heading("Modules")
    page.table(
        ["module", "records", "differ", "worst score", "worst rel L2"],
        [
            [
                m["module"] or "(top level)",
                m["records"],
                m["failed"],
                _num(m["max_score"]),
                m["max_rel_l2"],
            ]
            for m in result.modules
        ],
        code_columns=(0,),
    )
    page.heading("Environment")
    page.code_block(json.dumps(data["environment"], indent=2))
    return page.render()


RENDERERS = {
    "table": render_text,
    "json": render_json,
    "csv": render_csv,
    "markdown": render_markdown,
    "html": render_html,
}

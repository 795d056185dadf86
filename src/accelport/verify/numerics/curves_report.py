"""Render a `CurvesResult`: terminal table, JSON, Markdown, and self-contained HTML with the curves overlaid."""

from __future__ import annotations

import json

from accelport.report import markdown
from accelport.report.html import HtmlPage
from accelport.report.table import text_table
from accelport.textsafe import one_line
from accelport.verify.numerics.curves import CurvesResult

_HEADERS = [
    "metric",
    "run",
    "judged",
    "verdict",
    "steps",
    "final gap",
    "mean gap",
    "max gap",
    "outside band",
]


def _rows(result: CurvesResult) -> list[list[object]]:
    rows: list[list[object]] = []
    for m in result.metrics:
        for name in m.tests:
            rows.append(
                [
                    m.metric,
                    name,
                    "yes" if m.judged else "no",
                    ("pass" if m.passed else "fail")
                    if m.judged
                    else ("within" if not m.reasons else "outside") + " (info)",
                    len(m.steps),
                    f"{m.final_gap[name]:.3%}",
                    f"{m.mean_gap[name]:.3%}",
                    f"{m.max_gap[name]:.3%}",
                    f"{m.outside[name]:.0%}" if m.band is not None else "-",
                ]
            )
    return rows


def _lines(result: CurvesResult) -> list[str]:
    lines = [
        f"verdict: {result.verdict.upper()}   REF {result.ref}   tolerance {result.options['tolerance']:.2%}"
    ]
    if result.seeds:
        lines.append(
            f"noise band from {len(result.seeds) + 1} reference runs: "
            + ", ".join(str(s) for s in [result.ref, *result.seeds])
        )
    for m in result.metrics:
        lines += [f"reason: {m.metric}: {r}" for r in m.reasons if m.judged]
    for path, count in result.options.get("duplicate_steps_kept_last", {}).items():
        lines.append(
            f"note: {path}: {count} repeated steps (appended runs?); the last value of each step was used"
        )
    return lines


def render_text(result: CurvesResult) -> str:
    return "\n".join(one_line(line) for line in _lines(result)) + "\n\n" + text_table(_HEADERS, _rows(result))


def render_json(result: CurvesResult) -> str:
    return json.dumps(result.to_dict(), indent=2, allow_nan=False) + "\n"


def render_markdown(result: CurvesResult) -> str:
    out = [f"# accelport curves: {result.verdict.upper()}", ""]
    out += [f"- {markdown.escape(line)}" for line in _lines(result)]
    out += ["", markdown.table(_HEADERS, _rows(result))]
    return "\n".join(out)


def render_html(result: CurvesResult) -> str:
    page = HtmlPage(
        f"accelport curves: {result.verdict.upper()}",
        f"REF {result.ref}  vs  " + ", ".join(str(t) for t in result.tests),
    )
    page.raw(page.badge(result.verdict.upper(), "pass" if result.passed else "fail"))
    page.code_block("\n".join(_lines(result)))
    page.table(_HEADERS, _rows(result))
    for m in result.metrics:
        page.heading(m.metric)
        page.svg(
            result.svg(m.metric),
            f"{m.metric} per step" + (" (EMA-smoothed)" if result.options["smooth"] else ""),
        )
    return page.render()


RENDERERS = {
    "table": render_text,
    "json": render_json,
    "markdown": render_markdown,
    "html": render_html,
}

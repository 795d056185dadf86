"""The diff and the single-trace breakdown as a text table, an HTML page, and their one-line summaries."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from accelport.verify.perf.breakdown import OpStats, TraceProfile
from accelport.verify.perf.profile_diff import (
    FAMILY_ALPHA,
    MIN_ROWS,
    MIN_STEPS,
    NOISE,
    SIGNIFICANT,
    STRUCTURAL,
    UNKNOWN,
    DiffRow,
    ProfileDiff,
    top_rows,
)


def format_ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000.0:.3f}"


def describe_sides(result: ProfileDiff) -> list[tuple[str, str]]:
    def side(p: TraceProfile) -> str:
        where = p.device or ("host only" if not p.has_device else "device")
        if p.kept_steps < p.steps:
            steps = (f"{p.kept_steps} of {p.steps} steps from {p.step_source} ({p.steps_used}; "
                     f"all steps: {format_ms(p.all_steps_total)} ms)")
        else:
            steps = f"{p.steps} step(s) from {p.step_source}"
        name = p.path if len(p.captures) < 2 else f"{p.path} and {len(p.captures) - 1} more capture(s)"
        return f"{name} ({where}; {steps}; {p.events} events)"

    return [("base", side(result.base)), ("test", side(result.test))]


def row_cells(row: DiffRow) -> list[object]:
    def get(stats: OpStats | None, attr: str) -> float | None:
        return getattr(stats, attr) if stats is not None else None

    ratio = row.ratio
    return [
        row.module or "-",
        row.op,
        _pair(get(row.base, "calls"), get(row.test, "calls"), "{:.3g}"),
        format_ms(get(row.base, "time")),
        format_ms(get(row.test, "time")),
        f"{row.delta / 1000.0:+.3f}",
        "-" if ratio is None else f"{ratio:.2f}x",
        f"{row.share * 100:.1f}%",
        _pair(row.base.kernels_per_call if row.base else None, row.test.kernels_per_call if row.test else None, "{:.3g}"),
        _pair(get(row.base, "self_time"), get(row.test, "self_time"), "{:.3f}", scale=1000.0),
        ((row.test or row.base).shapes if (row.test or row.base) else "")[:48],
        ",".join(row.why),
        _change(row),
    ]


def _change(row: DiffRow) -> str:
    """The significance cell: what kind of change the row is, and how sure."""
    if row.significance == SIGNIFICANT and row.p_value is not None:
        return f"significant (p={row.p_value:.1g})"
    return "-" if row.significance == UNKNOWN else row.significance


ROW_HEADERS = (
    "module",
    "op",
    "calls b/t",
    "base ms",
    "test ms",
    "delta ms",
    "ratio",
    "share",
    "kernels/call b/t",
    "self ms b/t",
    "input shapes",
    "why",
    "change",
)


def _pair(base: float | None, test: float | None, fmt: str, scale: float = 1.0) -> str:
    def one(value: float | None) -> str:
        return "-" if value is None else fmt.format(value / scale)

    return f"{one(base)}/{one(test)}"


def as_rows(rows: Sequence[DiffRow]) -> list[list[object]]:
    return [row_cells(r) for r in rows]


def add_diff_to_page(page: Any, result: ProfileDiff, limit: int = 25) -> None:
    """Cards, the waterfall of the delta and the row table, appended to an `HtmlPage`."""
    from accelport.report.waterfall import waterfall_chart

    ratio = result.ratio
    page.cards(
        [
            ("base ms/step", f"{result.base.total / 1000:.3f}"),
            ("test ms/step", f"{result.test.total / 1000:.3f}"),
            ("delta ms/step", f"{result.total_delta / 1000:+.3f}"),
            ("test/base", "-" if ratio is None else f"{ratio:.2f}x"),
        ]
    )
    page.table(["side", "trace"], describe_sides(result), code_columns=(1,))
    page.paragraph(significance_line(result))
    shown = top_rows(result, min(limit, 15))
    page.svg(
        waterfall_chart(
            ("base step", result.base.total / 1000),
            [(f"{r.module} {r.op}".strip(), r.delta / 1000) for r in shown],
            "test step",
            title="Where the step-time delta comes from",
            unit="ms",
        ),
        caption="Each bar is one op in one module; red adds time, green saves it. Bars add up to the test step time.",
    )
    page.table(list(ROW_HEADERS), as_rows(top_rows(result, limit)), code_columns=(0, 1, 10))


def render_html(result: ProfileDiff, limit: int = 25) -> str:
    from accelport.report.html import HtmlPage

    page = HtmlPage("accelport profile-diff", "per-op time per profiled step; rows add up to the end-to-end delta")
    add_diff_to_page(page, result, limit)
    return page.render()


def render_text(result: ProfileDiff, limit: int = 25) -> str:
    from accelport.report.table import text_table

    lines = [f"{name}: {text}" for name, text in describe_sides(result)]
    ratio = result.ratio
    lines.append(
        f"step time: base {format_ms(result.base.total)} ms, test {format_ms(result.test.total)} ms, "
        f"delta {result.total_delta / 1000:+.3f} ms ({'-' if ratio is None else f'{ratio:.2f}x'}); "
        f"rows add up to {sum(r.delta for r in result.rows) / 1000:+.3f} ms"
    )
    lines.append(significance_line(result))
    return "\n".join(lines) + "\n\n" + text_table(ROW_HEADERS, as_rows(top_rows(result, limit)))


def significance_line(result: ProfileDiff) -> str:
    """One sentence on which rows are real changes and which are noise."""
    count = {kind: sum(1 for r in result.rows if r.significance == kind) for kind in (STRUCTURAL, SIGNIFICANT, NOISE, UNKNOWN)}
    steps = min(result.base.steps, result.test.steps)
    if count[UNKNOWN] and not (count[SIGNIFICANT] or count[NOISE]) and steps < MIN_STEPS:
        timing = (f"changed times not tested: {steps} step(s) per side, a per-step comparison needs "
                  f"{MIN_STEPS} (profile {max(MIN_STEPS, 8)} or more steps on each side)")
    elif count[UNKNOWN] and not (count[SIGNIFICANT] or count[NOISE]):
        timing = (f"changed times not tested: {count[UNKNOWN]} row(s) on both sides, judging one row's change "
                  f"against the others' needs {MIN_ROWS}")
    else:
        shift = "" if result.shift is None else f"; the median row took {result.shift:.2f}x, capture-wide"
        if result.replicated:
            against = f"each row's own drift between captures ({result.captures[0]} base, {result.captures[1]} test)"
            caveat = ""
        else:
            against = "how rows move between captures"
            caveat = ("; one capture per side, so a row's own drift between captures is assumed from the other "
                      "rows, not measured: profile each side 3 times before acting on a significant row"
                      if count[SIGNIFICANT] else "")
        timing = (f"{count[SIGNIFICANT]} row(s) changed significantly beyond {against}, "
                  f"{count[NOISE]} within noise (family-wise alpha {FAMILY_ALPHA}){shift}{caveat}")
    return f"changes: {count[STRUCTURAL]} structural (ops added, gone or called a different number of times); {timing}"


def render_single(profile: TraceProfile, limit: int = 15) -> str:
    """The breakdown of one trace: its largest rows."""
    from accelport.report.table import text_table

    rows = sorted(profile.rows.items(), key=lambda item: -item[1].time)
    shown = [
        [key[0] or "-", key[1], f"{s.calls:.3g}", format_ms(s.time), f"{s.time / profile.total * 100:.1f}%" if profile.total else "-",
         f"{s.kernels_per_call:.3g}", s.shapes[:48]]
        for key, s in rows[:limit]
    ]
    used = f"the {profile.steps_used} ({profile.kept_steps}) of " if profile.kept_steps < profile.steps else ""
    head = f"{profile.path}: {format_ms(profile.total)} ms per step over {used}{profile.steps} step(s) ({profile.step_source})\n\n"
    return head + text_table(["module", "op", "calls", "ms/step", "share", "kernels/call", "input shapes"], shown)



"""Demo step: which ATen operators TinyLM runs, and whether npu, musa, mlu and xpu implement each."""

from __future__ import annotations

from accelport.fileio import atomic_write_text

TITLE = "operator coverage: TinyLM's training step and inference on npu, musa, mlu, xpu"
TARGETS = ("npu", "musa", "mlu", "xpu")


def run(ctx) -> bool:
    from accelport.coverage import Status, check, trace
    from accelport.coverage.render import (
        headline,
        problems,
        render_html,
        render_json,
        summary_table,
    )
    from accelport.errors import UserError

    case = ctx.app / "coverage_case.py"
    reports = {}
    for mode, factory in (("train", "factory"), ("infer", "inference")):
        try:
            traced = trace(f"{case}:{factory}")
        except UserError as exc:
            ctx.say(ctx.style.red(f"{mode}: {exc}"))
            return False
        report = check(traced, TARGETS)
        reports[mode] = report
        ctx.say(headline(traced))
        ctx.say(summary_table(report).rstrip())
        for target, verdict in problems(report):
            site = verdict.record.first_site if verdict.record else None
            where = f" ({site.module} {site.location})" if site else ""
            ctx.say(ctx.style.red(f"  {target.vendor}: {verdict.op} {verdict.status.value}{where}"))
        for target in report.targets:
            unknown = target.count(Status.UNKNOWN)
            if target.failed:
                continue
            if unknown:
                ctx.say(ctx.style.yellow(f"  {target.vendor}: nothing missing among the listed, {unknown} operators not in its partial list"))
            else:
                ctx.say(ctx.style.green(f"  {target.vendor}: every operator is native, via .out or composite"))
        ctx.say("")
        atomic_write_text(ctx.workdir / f"ops-{mode}.json", render_json(report))
        atomic_write_text(ctx.workdir / f"ops-{mode}.html", render_html(report))
    ctx.results["ops"] = reports
    ctx.say(f"reports: {ctx.workdir / 'ops-train.html'}, {ctx.workdir / 'ops-infer.html'} (and .json)")
    return True

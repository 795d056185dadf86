"""Demo step: inventory the legacy CUDA example and recommend a route."""

from __future__ import annotations

from accelport.fileio import atomic_write_text

TITLE = "inventory: what in examples/legacy_cuda_app depends on CUDA?"


def run(ctx) -> bool:
    from accelport.inventory import scan
    from accelport.inventory.render import render_html, render_table

    report = scan([str(ctx.app)])
    ctx.results["inventory"] = report
    ctx.say(render_table(report, ctx.style, max_per_file=3).rstrip())
    atomic_write_text(ctx.workdir / "inventory.json", report.to_json())
    atomic_write_text(ctx.workdir / "inventory.html", render_html(report))
    ctx.say(f"\nreports: {ctx.workdir / 'inventory.json'}, {ctx.workdir / 'inventory.html'}")
    return not report.skipped

"""Imports: record aliases for name resolution; report CUDA APIs and CUDA-only packages at the import."""

from __future__ import annotations

import ast

from accelport.inventory.python.context import (
    PyContext,
    lookup_api,
    lookup_package,
    package_statuses,
)
from accelport.inventory.python.rules import on


def report_package(ctx: PyContext, node: ast.AST, module: str, entry: dict, via: str | None = None) -> None:
    alternatives = entry.get("alternatives", {})
    hints = [f"{vendor}: {what}" for vendor, what in alternatives.items()]
    if entry.get("portable"):
        hints.insert(0, f"portable: {entry['portable']}")
    message = f"{module}: {entry['summary']}"
    if via:
        message += f" (used as {via})"
    ctx.report(
        "AP8001",
        node,
        module,
        message=message,
        replacement="; ".join(hints) or None,
        backends=package_statuses(entry),
        effort=entry.get("effort"),
    )


def _report_imported(ctx: PyContext, alias: ast.alias, qualname: str) -> None:
    found = lookup_api(qualname)
    if found is not None:
        _symbol, entry = found
        if entry.get("kind") == "module" and qualname.startswith("torch.backends."):
            # `import torch.backends.cudnn as cudnn`: a namespace of switches, each judged where it is used.
            return
        ctx.report(entry["rule"], alias, qualname, replacement=entry.get("replacement"), entry=entry)
        return
    package = lookup_package(qualname)
    if package is not None:
        report_package(ctx, alias, package[0], package[1])


@on(ast.Import)
def import_modules(ctx: PyContext, node: ast.Import) -> None:
    for alias in node.names:
        if alias.asname:
            ctx.bind(alias.asname, alias.name)
            _report_imported(ctx, alias, alias.name)
        else:
            # `import torch.cuda` binds `torch`; the uses below it are what matter.
            top = alias.name.split(".")[0]
            ctx.bind(top, top)
            package = lookup_package(alias.name)
            if package is not None:
                report_package(ctx, alias, package[0], package[1])


@on(ast.ImportFrom)
def import_names(ctx: PyContext, node: ast.ImportFrom) -> None:
    if node.level or not node.module:
        return  # relative imports name the project's own modules
    for alias in node.names:
        if alias.name == "*":
            continue
        qualname = f"{node.module}.{alias.name}"
        ctx.bind(alias.asname or alias.name, qualname)
        _report_imported(ctx, alias, qualname)

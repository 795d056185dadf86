"""Imports: record aliases for name resolution; report CUDA APIs and CUDA-only packages at the import."""

from __future__ import annotations

import ast
import os
import re

from accelport.inventory.python.context import PyContext, package_statuses
from accelport.inventory.python.rules import on
from accelport.source.names import lookup_api, lookup_package


def report_package(ctx: PyContext, node: ast.AST, module: str, entry: dict, via: str | None = None, effort: str | None = None) -> None:
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
        effort=effort or entry.get("effort"),
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


# A top-level module named after CUDA (`fused_layer_norm_cuda`, `cudnn_gbn_lib`, `_apex_nccl_allocator`).
_EXTENSION_NAME = re.compile(r"(?:^|_)(?:cuda|cudnn|cublas|cublaslt|nccl|nvtx)(?:_|\d|$)")


def _extension_import(ctx: PyContext, alias: ast.alias | ast.ImportFrom, module: str) -> None:
    """Report `import X` of the project's compiled CUDA extension: no X.py or X/ next to the file or above it."""
    if "." in module or module == "cuda" or not _EXTENSION_NAME.search(module) or lookup_package(module) is not None:
        return
    folder = os.path.dirname(os.path.abspath(ctx.source.display))
    for _ in range(8):
        if os.path.exists(os.path.join(folder, module + ".py")) or os.path.isdir(os.path.join(folder, module)):
            return  # the project's own Python module
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    ctx.report("AP8002", alias, module, message=f"{module}: a compiled CUDA extension (no {module}.py in the tree; built by setup.py?)")


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
        _extension_import(ctx, alias, alias.name)


@on(ast.ImportFrom)
def import_names(ctx: PyContext, node: ast.ImportFrom) -> None:
    if node.level or not node.module:
        return  # relative imports name the project's own modules
    if node.names and "." not in node.module:
        _extension_import(ctx, node, node.module)
    for alias in node.names:
        if alias.name == "*":
            continue
        qualname = f"{node.module}.{alias.name}"
        ctx.bind(alias.asname or alias.name, qualname)
        _report_imported(ctx, alias, qualname)

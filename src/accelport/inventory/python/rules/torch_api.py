"""Attribute chains and imported names that resolve to CUDA-specific torch APIs or CUDA-only packages."""

from __future__ import annotations

import ast
import re

from accelport.inventory.python.context import PyContext
from accelport.inventory.python.rules import on
from accelport.inventory.python.rules.imports import report_package
from accelport.source.names import lookup_api, lookup_package


def _is_outermost(ctx: PyContext, node: ast.AST) -> bool:
    parent = ctx.parent(node)
    return not (isinstance(parent, ast.Attribute) and parent.value is node)


@on(ast.Attribute, ast.Name)
def api_chain(ctx: PyContext, node: ast.Attribute | ast.Name) -> None:
    if type(node) is ast.Name:
        base = ctx.aliases.get(node.id)
        if base is None or "." not in base:
            return  # the common case: a local name, or a plain `import torch` binding
    elif node.attr == "is_cuda":
        ctx.report("AP1005", node, "is_cuda", replacement="x.device.type == device.type")
        return
    if not _is_outermost(ctx, node):
        return
    qualname = ctx.qualname(node)
    if qualname is None or "." not in qualname:
        return
    if isinstance(node, ast.Name) and "." not in ctx.aliases.get(node.id, "."):
        return
    found = lookup_api(qualname)
    if found is None and isinstance(node, ast.Attribute) and _CHAINED.search(qualname):
        # A CUDA object used through a further attribute: `torch.version.cuda.split(".")`,
        # `torch.backends.cudnn.version().split` — report the CUDA part of the chain.
        node, qualname, found = _cuda_prefix(node, qualname)
    if found is not None:
        _symbol, entry = found
        if isinstance(node, ast.Attribute) or _bound_by_from_import(ctx, node):
            ctx.report(entry["rule"], node, qualname, replacement=entry.get("replacement"), entry=entry)
        return
    package = lookup_package(qualname)
    if package is None:
        return
    module, entry = package
    # Report a use only when it reaches into the CUDA part from a parent import
    # (`import numba; numba.cuda.jit`); a plain `import cupy` was reported at the import.
    base = _binding(ctx, node)
    if base is not None and len(module) > len(base) and not base.startswith(module):
        report_package(ctx, node, module, entry, via=qualname)
    elif base == module and isinstance(node, ast.Attribute) and _CHAINED.search(qualname):
        # The package's CUDA namespace used directly (`cupy.cuda.Device(0).use()`): each use is
        # a device call to review; the import carries the package's porting effort.
        report_package(ctx, node, module, entry, via=qualname, effort="low")


# Chains that may hold a catalogued CUDA object before their last attribute.
_CHAINED = re.compile(r"\.(?:cuda|cudnn|nccl|nvtx)\b")


def _cuda_prefix(node: ast.Attribute, qualname: str) -> tuple[ast.AST, str, tuple[str, dict] | None]:
    """The longest leading part of an attribute chain that the catalogue knows, as (node, name, entry)."""
    while isinstance(node.value, ast.Attribute):
        node = node.value
        qualname = qualname.rsplit(".", 1)[0]
        found = lookup_api(qualname)
        if found is not None:
            return node, qualname, found
    return node, qualname, None


def _root_name(node: ast.AST) -> ast.Name | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node if isinstance(node, ast.Name) else None


def _binding(ctx: PyContext, node: ast.AST) -> str | None:
    root = _root_name(node)
    return ctx.aliases.get(root.id) if root is not None else None


def _bound_by_from_import(ctx: PyContext, node: ast.Name) -> bool:
    # Names bound by `from torch.cuda.amp import autocast` are reported where used;
    # module aliases (`import torch.cuda.amp as amp`) are reported through attributes.
    return isinstance(getattr(node, "ctx", None), ast.Load)

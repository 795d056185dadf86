"""Distributed: the default collective backend for the current device; DDP device_ids only on accelerators."""

from __future__ import annotations

import ast

import libcst as cst

from accelport.migrate.codemods import (
    already_guarded,
    codemod,
    expr_edit,
    in_value_position,
    parse,
    replace_with,
)
from accelport.migrate.context import FileContext
from accelport.migrate.edits import Edit, code
from accelport.migrate.source import Site


@codemod("AP1301")
def nccl_backend(site: Site, ctx: FileContext) -> Edit | None:
    """backend="nccl" -> backend=dist.get_default_backend_for_device(DEVICE)"""
    node = site.node
    if (isinstance(node, ast.Constant) and node.value == "nccl") or (isinstance(node, ast.Attribute) and node.attr == "NCCL"):
        return replace_with(site, node, f"{ctx.dist()}.get_default_backend_for_device({ctx.device(site)})")
    return None


@codemod("AP9001")
def nccl_when_available(site: Site, ctx: FileContext) -> Edit | None:
    """"nccl" if torch.cuda.is_available() else "gloo" -> the accelerator's default backend in that branch.

    Only where the value is reached with an accelerator available (that branch, or the body of
    `if torch.cuda.is_available():`): there "nccl" names the collective library of the device in
    use. Anywhere else "nccl" stays, with its marker.
    """
    node = site.node
    if not (isinstance(node, ast.Constant) and node.value == "nccl") or not in_value_position(site):
        return None
    if not already_guarded(site, ctx):
        return None
    return replace_with(site, node, f"{ctx.dist()}.get_default_backend_for_device({ctx.module_device(site)})")


@codemod("AP1302")
def ddp_device_ids(site: Site, ctx: FileContext) -> Edit | None:
    """device_ids=[local_rank] -> device_ids=[local_rank] if DEVICE.type != "cpu" else None; output_device alike.

    DDP refuses both for a module on the CPU.
    """
    node = site.node
    if not isinstance(site.parent, ast.keyword):
        return None
    device_type = ctx.device_type(site)
    quote = site.quote

    def only_on_accelerators(value: cst.BaseExpression) -> cst.BaseExpression:
        # The value may itself be a conditional by now (a rewritten torch.cuda.current_device()).
        text = code(value)
        if isinstance(value, cst.IfExp | cst.Lambda | cst.NamedExpr) and not value.lpar:
            text = f"({text})"
        return parse(f"{text} if {device_type} != {quote}cpu{quote} else None")

    edit = expr_edit(site, node, only_on_accelerators)
    edit.wraps = True  # output_device=torch.cuda.current_device(): the call's own rewrite goes inside
    return edit

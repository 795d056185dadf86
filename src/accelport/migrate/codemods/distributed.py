"""Distributed: the default collective backend for the current device; DDP device_ids only on accelerators."""

from __future__ import annotations

import ast

import libcst as cst

from accelport.migrate.codemods import codemod, expr_edit, parse, replace_with
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

    Only the branch taken when an accelerator is available: there "nccl" names the collective
    library of the device in use. Anywhere else "nccl" stays, with its marker.
    """
    node, parent = site.node, site.parent
    if not (isinstance(node, ast.Constant) and node.value == "nccl" and isinstance(parent, ast.IfExp)):
        return None
    test, negated = parent.test, False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, negated = test.operand, True
    if not (isinstance(test, ast.Call) and not test.args and ctx.qualname(test.func) in _AVAILABILITY):
        return None
    if (parent.orelse if negated else parent.body) is not node:
        return None
    return replace_with(site, node, f"{ctx.dist()}.get_default_backend_for_device({ctx.module_device(site)})")


_AVAILABILITY = frozenset({"torch.cuda.is_available", "torch.accelerator.is_available"})


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

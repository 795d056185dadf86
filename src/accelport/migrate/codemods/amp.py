"""torch.cuda.amp → torch.amp with the device type (GradScaler defaults to "cuda", so it is always passed)."""

from __future__ import annotations

import ast

import libcst as cst

from accelport.migrate.codemods import (
    append_args,
    called,
    codemod,
    expr_edit,
    fail,
    new_arg,
    parse,
    positional_to_keywords,
    prepend_args,
    replace_with,
)
from accelport.migrate.context import FileContext
from accelport.migrate.edits import Edit
from accelport.migrate.source import Site

AMP_MODULE = "torch.cuda.amp"
# Names torch.amp offers under the same name: an import of them moves from torch.cuda.amp to torch.amp.
PORTABLE_NAMES = frozenset({"autocast", "GradScaler", "custom_fwd", "custom_bwd"})
# torch.cuda.amp.autocast(enabled, dtype, cache_enabled): torch.amp.autocast takes the device type first.
_AUTOCAST_ARGS = ("enabled", "dtype", "cache_enabled")


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node


def _spelled(site: Site, ctx: FileContext, portable: str) -> str:
    """How the rewritten callable is spelled: unchanged when it goes through a name imported from
    torch.cuda.amp (that import moves to torch.amp), else the full torch.amp path."""
    root = _root(site.node)
    if isinstance(root, ast.Name) and ctx.aliases.get(root.id, "").startswith(AMP_MODULE):
        return site.text()
    return ctx.path(portable)


def _short(symbol: str) -> str:
    return symbol.rsplit(".", 1)[1]


@codemod("AP1201")
def autocast(site: Site, ctx: FileContext) -> Edit | None:
    if not isinstance(site.node, ast.Attribute | ast.Name) or _short(site.symbol) != "autocast":
        return None
    call = called(site)
    if call is None:
        return None
    func = _spelled(site, ctx, "torch.amp.autocast")
    device_type = ctx.device_type(site)

    def rewrite(node: cst.BaseExpression) -> cst.BaseExpression:
        args = positional_to_keywords(node, _AUTOCAST_ARGS)
        node = node.with_changes(func=parse(func), args=args)
        return prepend_args(node, new_arg(device_type))

    return expr_edit(site, call, rewrite)


@codemod("AP1202")
def grad_scaler(site: Site, ctx: FileContext) -> Edit | None:
    device_type = ctx.device_type(site)
    if isinstance(site.node, ast.Call):  # torch.amp.GradScaler() without a device
        return expr_edit(site, site.node, lambda node: prepend_args(node, new_arg(device_type)))
    if not isinstance(site.node, ast.Attribute | ast.Name) or _short(site.symbol) != "GradScaler":
        return None
    func = _spelled(site, ctx, "torch.amp.GradScaler")
    call = called(site)
    if call is None:
        return None if func == site.text() else replace_with(site, site.node, func)
    if any(k.arg == "device" for k in call.keywords):
        return replace_with(site, site.node, func)
    return expr_edit(site, call, lambda node: prepend_args(node.with_changes(func=parse(func)), new_arg(device_type)))


@codemod("AP1203")
def custom_fwd_bwd(site: Site, ctx: FileContext) -> Edit | None:
    """@torch.cuda.amp.custom_fwd -> @torch.amp.custom_fwd(device_type=DEVICE.type)"""
    name = _short(site.symbol)
    if not isinstance(site.node, ast.Attribute | ast.Name) or name not in ("custom_fwd", "custom_bwd"):
        return None
    func = _spelled(site, ctx, f"torch.amp.{name}")
    device_type = ctx.device_type(site)
    parent = site.parent
    if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef) and any(d is site.node for d in parent.decorator_list):
        return replace_with(site, site.node, f"{func}(device_type={device_type})")
    call = called(site)
    if call is None or any(k.arg == "device_type" for k in call.keywords):
        return None

    def rewrite(node: cst.BaseExpression) -> cst.BaseExpression:
        if not isinstance(node, cst.Call):
            fail("expected a call")
        node = node.with_changes(func=parse(func))
        if not node.args:
            return node.with_changes(args=[new_arg(device_type, keyword="device_type")])
        return append_args(node, new_arg(device_type, keyword="device_type"))

    return expr_edit(site, call, rewrite)

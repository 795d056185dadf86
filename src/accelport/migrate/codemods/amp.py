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
from accelport.migrate.edits import Edit, code
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


_ATOMS = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.SimpleString, cst.Integer)


def enabled_only_on_accelerators(call: cst.Call, device_type: str, quote: str) -> cst.Call:
    """Add `enabled=DEVICE.type != "cpu"` (or `and` it to the given one).

    CUDA autocast and GradScaler disable themselves where CUDA is missing; the CPU's are real
    (autocast computes in bfloat16, GradScaler scales by 65536). So on a machine without an
    accelerator the migrated code keeps them off, as the original was, and on any accelerator on.
    """
    on_accelerator = f"{device_type} != {quote}cpu{quote}"
    args = list(call.args)
    for index, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == "enabled":
            value = arg.value
            if isinstance(value, cst.Name) and value.value in ("True", "False"):
                if value.value == "True":
                    args[index] = arg.with_changes(value=parse(on_accelerator))
                return call.with_changes(args=args)
            text = code(value) if isinstance(value, _ATOMS) or value.lpar else f"({code(value)})"
            args[index] = arg.with_changes(value=parse(f"{text} and {on_accelerator}"))
            return call.with_changes(args=args)
    if any(arg.star for arg in args):
        fail("arguments unpacked with * or **: cannot tell whether `enabled` is given")
    return append_args(call, new_arg(on_accelerator, keyword="enabled")) if args else call.with_changes(
        args=[new_arg(on_accelerator, keyword="enabled")]
    )


@codemod("AP1201")
def autocast(site: Site, ctx: FileContext) -> Edit | None:
    if not isinstance(site.node, ast.Attribute | ast.Name) or _short(site.symbol) != "autocast":
        return None
    call = called(site)
    if call is None:
        return None
    func = _spelled(site, ctx, "torch.amp.autocast")
    device_type = ctx.device_type(site)

    quote = site.quote

    def rewrite(node: cst.BaseExpression) -> cst.BaseExpression:
        args = positional_to_keywords(node, _AUTOCAST_ARGS)
        node = enabled_only_on_accelerators(node.with_changes(func=parse(func), args=args), device_type, quote)
        return prepend_args(node, new_arg(device_type))

    return expr_edit(site, call, rewrite)


@codemod("AP1202")
def grad_scaler(site: Site, ctx: FileContext) -> Edit | None:
    device_type = ctx.device_type(site)
    quote = site.quote

    def scaler(node: cst.BaseExpression, func: str | None = None) -> cst.BaseExpression:
        if func is not None:
            node = node.with_changes(func=parse(func))
        if sum(1 for a in node.args if a.keyword is None) >= 5:
            fail("enabled given by position")
        return prepend_args(enabled_only_on_accelerators(node, device_type, quote), new_arg(device_type))

    if isinstance(site.node, ast.Call):  # torch.amp.GradScaler() without a device
        return expr_edit(site, site.node, scaler)
    if not isinstance(site.node, ast.Attribute | ast.Name) or _short(site.symbol) != "GradScaler":
        return None
    func = _spelled(site, ctx, "torch.amp.GradScaler")
    call = called(site)
    if call is None:
        return None if func == site.text() else replace_with(site, site.node, func)
    if any(k.arg == "device" for k in call.keywords):
        return replace_with(site, site.node, func)
    return expr_edit(site, call, lambda node: scaler(node, func))


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

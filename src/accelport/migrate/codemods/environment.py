"""Environment: CUDA_VISIBLE_DEVICES reads and writes → the current vendor's variable via accelport.compat."""

from __future__ import annotations

import ast

from accelport.migrate.codemods import codemod, replace_with
from accelport.migrate.context import FileContext
from accelport.migrate.edits import Edit
from accelport.migrate.source import Site

_ENV_METHODS = frozenset({"get", "setdefault", "pop", "__getitem__", "__setitem__", "__delitem__", "__contains__"})
_ENV_FUNCTIONS = frozenset({"os.getenv", "os.putenv", "os.unsetenv", "os.environ.get", "os.environ.setdefault", "os.environ.pop"})


def _is_environ(ctx: FileContext, node: ast.AST) -> bool:
    qualname = ctx.qualname(node)
    if qualname is not None:
        return qualname in ("os.environ", "os.environb")
    return isinstance(node, ast.Attribute | ast.Name) and (getattr(node, "attr", None) or getattr(node, "id", "")).endswith("environ")


def _environment_access(site: Site, ctx: FileContext) -> bool:
    """Is the variable name used to read or write the process environment here?"""
    node, parent = site.node, site.parent
    if isinstance(parent, ast.Subscript) and parent.slice is node:
        return _is_environ(ctx, parent.value)
    if isinstance(parent, ast.Call) and parent.args and parent.args[0] is node:
        func = parent.func
        if ctx.qualname(func) in _ENV_FUNCTIONS:
            return True
        return isinstance(func, ast.Attribute) and func.attr in _ENV_METHODS and _is_environ(ctx, func.value)
    if isinstance(parent, ast.Compare) and parent.left is node and len(parent.ops) == 1:
        return isinstance(parent.ops[0], ast.In | ast.NotIn) and _is_environ(ctx, parent.comparators[0])
    # env={"CUDA_VISIBLE_DEVICES": ...} for a subprocess
    return isinstance(parent, ast.Dict) and any(k is node for k in parent.keys)


@codemod("AP1601")
def visible_devices(site: Site, ctx: FileContext) -> Edit | None:
    """os.environ["CUDA_VISIBLE_DEVICES"] -> os.environ[accelport.compat.visible_devices_var()]"""
    node = site.node
    if not (isinstance(node, ast.Constant) and node.value == "CUDA_VISIBLE_DEVICES"):
        return None
    if not _environment_access(site, ctx):
        return None
    return replace_with(site, node, f"{ctx.compat()}.visible_devices_var()")

"""Device values held by names: assignments, parameter defaults, config dictionaries, dataclass fields."""

from __future__ import annotations

import ast

from accelport.inventory.python.context import PyContext
from accelport.inventory.python.rules import on
from accelport.inventory.python.rules.calls import check_device_value
from accelport.source.names import BACKEND_NAME_RE, DEVICE_NAME_RE


def _target_name(target: ast.AST) -> str | None:
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute):
        return target.attr
    if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant) and isinstance(target.slice.value, str):
        return target.slice.value  # config["device"] = "cuda"
    return None


def _check_named_value(ctx: PyContext, name: str | None, value: ast.AST | None, rule_id: str) -> None:
    if name is None or value is None:
        return
    if DEVICE_NAME_RE.fullmatch(name):
        check_device_value(ctx, value, rule_id)
    elif BACKEND_NAME_RE.fullmatch(name) and isinstance(value, ast.Constant) and value.value == "nccl":
        ctx.report("AP1301", value, "nccl", replacement="torch.distributed.get_default_backend_for_device(device)")


def _in_class_body(ctx: PyContext, node: ast.AST) -> bool:
    return isinstance(ctx.parent(node), ast.ClassDef)


@on(ast.Assign)
def assignment(ctx: PyContext, node: ast.Assign) -> None:
    rule_id = "AP1003" if _in_class_body(ctx, node) else "AP1001"
    for target in node.targets:
        _check_named_value(ctx, _target_name(target), node.value, rule_id)


@on(ast.AnnAssign)
def annotated_assignment(ctx: PyContext, node: ast.AnnAssign) -> None:
    # `device: str = "cuda"` in a dataclass or config class is a configuration default.
    rule_id = "AP1003" if _in_class_body(ctx, node) else "AP1001"
    _check_named_value(ctx, _target_name(node.target), node.value, rule_id)


@on(ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
def parameter_defaults(ctx: PyContext, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    for arg, default in zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True):
        _check_named_value(ctx, arg.arg, default, "AP1003")
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        _check_named_value(ctx, arg.arg, default, "AP1003")


@on(ast.Dict)
def config_dict(ctx: PyContext, node: ast.Dict) -> None:
    for key, value in zip(node.keys, node.values, strict=True):
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            _check_named_value(ctx, key.value, value, "AP1003")


@on(ast.keyword)
def keyword_default(ctx: PyContext, node: ast.keyword) -> None:
    # dict(device="cuda"), Config(device="cuda"), SimpleNamespace(backend="nccl"): named device values.
    if node.arg is not None and node.arg not in ("device", "map_location", "device_type", "backend", "default"):
        _check_named_value(ctx, node.arg, node.value, "AP1003")

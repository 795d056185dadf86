"""Comparisons and conditionals that depend on the device being CUDA or the backend being NCCL."""

from __future__ import annotations

import ast

from accelport.inventory.python.context import PyContext
from accelport.inventory.python.rules import on
from accelport.source.names import is_device_string

_CUDA_AVAILABLE = frozenset({"torch.cuda.is_available"})


@on(ast.Compare)
def device_comparison(ctx: PyContext, node: ast.Compare) -> None:
    operands = [node.left, *node.comparators]
    for operand in operands:
        if is_device_string(operand):
            ctx.report("AP1006", operand, operand.value, replacement="device.type")
        elif isinstance(operand, ast.Constant) and operand.value == "nccl":
            ctx.report("AP9001", operand, "nccl")


def _is_cuda_available(ctx: PyContext, node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return _is_cuda_available(ctx, node.operand)
    return isinstance(node, ast.Call) and ctx.qualname(node.func) in _CUDA_AVAILABLE


def _is_cpu(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and node.value == "cpu":
        return True
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute | ast.Name)
        and getattr(node.func, "attr", getattr(node.func, "id", "")) == "device"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == "cpu"
    )


@on(ast.IfExp)
def silent_cpu_fallback(ctx: PyContext, node: ast.IfExp) -> None:
    if _is_cuda_available(ctx, node.test) and (_is_cpu(node.body) or _is_cpu(node.orelse)):
        ctx.report(
            "AP9002",
            node,
            "cuda-or-cpu",
            replacement='torch.accelerator.current_accelerator() or torch.device("cpu")',
        )


@on(ast.If)
def silent_cpu_fallback_statement(ctx: PyContext, node: ast.If) -> None:
    if not _is_cuda_available(ctx, node.test) or not node.orelse:
        return
    for child in ast.walk(ast.Module(body=node.orelse, type_ignores=[])):
        if _is_cpu(child):
            ctx.report(
                "AP9002",
                node.test,
                "cuda-or-cpu",
                replacement='torch.accelerator.current_accelerator() or torch.device("cpu")',
            )
            return

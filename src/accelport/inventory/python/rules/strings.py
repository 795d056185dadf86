"""String literals: CUDA environment variables anywhere, and device strings left over after the walk."""

from __future__ import annotations

import ast
import re

from accelport.inventory.python.context import PyContext
from accelport.inventory.python.rules import after_walk, on
from accelport.source.names import DEVICE_RE

ENV_RE = re.compile(
    r"(?:CUDA|NCCL|CUDNN|CUBLAS|CUBLASLT|CUFFT|NVIDIA|NVTE|PYTORCH_CUDA|TORCH_CUDA|TORCH_NCCL|TORCH_CUDNN)_[A-Z0-9_]+"
)


def _is_docstring(ctx: PyContext, node: ast.Constant) -> bool:
    return isinstance(ctx.parent(node), ast.Expr)


def env_rule(name: str) -> str:
    if name == "CUDA_VISIBLE_DEVICES":
        return "AP1601"
    if name.startswith(("NCCL_", "TORCH_NCCL_")):
        return "AP1602"
    return "AP1603"


def _access(ctx: PyContext, node: ast.Constant) -> str:
    parent = ctx.parent(node)
    if isinstance(parent, ast.Subscript):
        return "written" if isinstance(parent.ctx, ast.Store | ast.Del) else "read"
    if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute):
        if parent.func.attr in ("setdefault", "putenv", "update", "__setitem__"):
            return "written"
        if parent.func.attr in ("pop", "unsetenv"):
            return "removed"
    if isinstance(parent, ast.Dict):
        return "set"
    return "read"


@on(ast.Constant)
def string_literal(ctx: PyContext, node: ast.Constant) -> None:
    value = node.value
    if not isinstance(value, str) or len(value) > 64 or _is_docstring(ctx, node):
        return
    if isinstance(ctx.parent(node), ast.JoinedStr):
        return  # a piece of an f-string; the f-string is judged as a whole
    if ENV_RE.fullmatch(value):
        ctx.report(env_rule(value), node, value, message=f"{value} is {_access(ctx, node)}: {_ENV_WHY[env_rule(value)]}")
    elif DEVICE_RE.fullmatch(value) or value == "nccl" or _DEVICE_TEMPLATE.fullmatch(value):
        ctx.strings.append(node)
    elif value == "CUDA":
        # `torch.library.impl(lib, "op", "CUDA")`, `_dispatch_has_kernel_for_dispatch_key(op, "CUDA")`
        ctx.report("AP1007", node, value, message='"CUDA" names the CUDA dispatch key or device type; other accelerators register under their own')


# "cuda:{}".format(i), "cuda:%d" % i: a device string built at run time, wherever it goes.
_DEVICE_TEMPLATE = re.compile(r"cuda:(?:\{\w*\}|%[ds])")

_ENV_WHY = {
    "AP1601": "each vendor restricts visible devices with its own variable",
    "AP1602": "NCCL settings do not reach HCCL, oneCCL, MCCL or CNCL",
    "AP1603": "a CUDA runtime, allocator or toolkit setting that other backends ignore",
}


@on(ast.JoinedStr)
def fstring_literal(ctx: PyContext, node: ast.JoinedStr) -> None:
    head = node.values[0] if node.values else None
    if isinstance(head, ast.Constant) and isinstance(head.value, str) and head.value.startswith("cuda:"):
        ctx.strings.append(node)


@after_walk
def leftover_strings(ctx: PyContext) -> None:
    for node in ctx.strings:
        if id(node) in ctx.consumed:
            continue
        if isinstance(node, ast.JoinedStr):
            ctx.report("AP1007", node, "cuda:{...}")
        elif _DEVICE_TEMPLATE.fullmatch(node.value):
            ctx.report("AP1002", node, "cuda:{...}", replacement="torch.device(device.type, index)")
        elif node.value == "nccl":
            ctx.report("AP9001", node, "nccl", message="\"nccl\" names the NVIDIA collective library; other accelerators use their own backend")
        else:
            ctx.report("AP1007", node, node.value)

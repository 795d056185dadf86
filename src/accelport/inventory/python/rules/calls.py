"""Calls: `.cuda()`, device arguments, distributed backends, amp scalers, extension builds, pinning."""

from __future__ import annotations

import ast
import re

from accelport.inventory.python.context import PyContext
from accelport.inventory.python.rules import on
from accelport.source.names import DEVICE_RE, is_device_string

# Keyword arguments that take a device (torch factories, Module.to, torch.load, DataLoader, DDP).
DEVICE_KEYWORDS = frozenset({"device", "map_location", "device_type", "pin_memory_device", "output_device"})
# Calls whose first positional argument is a device.
DEVICE_FIRST_ARG = frozenset(
    {
        "torch.device",
        "torch.autocast",
        "torch.amp.autocast",
        "torch.amp.autocast_mode.autocast",
        "torch.amp.GradScaler",
        "torch.GradScaler",
        "torch.get_device_module",
        "torch.Stream",
        "torch.Event",
        "torch.set_default_device",
        "torch.accelerator.device_index",
        "torch.load",  # map_location is positional in torch.load(f, map_location)
    }
)
GRAD_SCALERS = frozenset({"torch.amp.GradScaler", "torch.GradScaler", "torch.amp.grad_scaler.GradScaler"})
DDP = frozenset(
    {
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.parallel.distributed.DistributedDataParallel",
        "torch.nn.DistributedDataParallel",
    }
)
PROCESS_GROUP = frozenset(
    {
        "torch.distributed.init_process_group",
        "torch.distributed.new_group",
        "torch.distributed.distributed_c10d.init_process_group",
        "deepspeed.init_distributed",
    }
)
CPP_EXTENSION_LOAD = frozenset({"torch.utils.cpp_extension.load"})
CPP_EXTENSION_INLINE = frozenset({"torch.utils.cpp_extension.load_inline"})
PROFILERS = frozenset({"torch.autograd.profiler.profile", "torch.profiler.profile", "torch.autograd.profiler.record_function"})
# Calls judged by qualified name: a line that uses one under an alias (`DDP(...)`) must be walked.
RESOLVED_CALLS = DDP | CPP_EXTENSION_LOAD | CPP_EXTENSION_INLINE | PROFILERS | GRAD_SCALERS | PROCESS_GROUP


def check_device_value(ctx: PyContext, node: ast.AST | None, rule_id: str = "AP1001") -> bool:
    """Report a CUDA device value (string, f-string, concatenation, conditional) held by `node`."""
    if node is None:
        return False
    if is_device_string(node):
        ctx.report(rule_id, node, node.value, replacement="device")
        return True
    if isinstance(node, ast.JoinedStr):
        head = node.values[0] if node.values else None
        if isinstance(head, ast.Constant) and isinstance(head.value, str) and head.value.startswith("cuda:"):
            ctx.report("AP1002", node, "cuda:{...}", replacement="torch.device(device.type, index)")
            return True
        return False
    if isinstance(node, ast.BinOp) and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
        if node.left.value.startswith("cuda:") and isinstance(node.op, ast.Add | ast.Mod):
            ctx.report("AP1002", node, "cuda:{...}", replacement="torch.device(device.type, index)")
            ctx.consume(node.left)
            return True
        return False
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        target = node.func.value
        if isinstance(target, ast.Constant) and isinstance(target.value, str) and target.value.startswith("cuda:"):
            ctx.report("AP1002", node, "cuda:{...}", replacement="torch.device(device.type, index)")
            ctx.consume(target)
            return True
        return False
    if isinstance(node, ast.IfExp):
        found = check_device_value(ctx, node.body, rule_id)
        return check_device_value(ctx, node.orelse, rule_id) or found
    if isinstance(node, ast.BoolOp):
        found = False
        for value in node.values:
            found = check_device_value(ctx, value, rule_id) or found
        return found
    if isinstance(node, ast.Dict):  # map_location={"cuda:0": device}
        # Keys name where the checkpoint's tensors were saved (a fact about the file, right
        # as written); only the values choose a device on this machine.
        found = False
        for key in node.keys:
            if key is not None and is_device_string(key):
                ctx.consume(key)
        for part in node.values:
            found = check_device_value(ctx, part, rule_id) or found
        return found
    return False


_AVAILABILITY = frozenset({"torch.cuda.is_available", "torch.accelerator.is_available"})
# Names that hold a device index (a local rank), never a dtype or a device.
_INDEX_NAME = re.compile(r"(?i)(?:.*_)?(?:rank|gpu|gpu_id|gpu_index|device_id|device_index|device_ordinal|ordinal)")


def _names_an_index(node: ast.AST) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
    return isinstance(name, str) and _INDEX_NAME.fullmatch(name) is not None


def _tests_availability(ctx: PyContext, test: ast.AST) -> bool:
    """`torch.cuda.is_available()` / `torch.accelerator.is_available()`, alone or as an `and` operand."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_tests_availability(ctx, value) for value in test.values)
    return isinstance(test, ast.Call) and not test.args and ctx.qualname(test.func) in _AVAILABILITY


def _tests_absence(ctx: PyContext, test: ast.AST) -> bool:
    return isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and _tests_availability(ctx, test.operand)


def only_with_accelerator(ctx: PyContext, node: ast.AST) -> bool:
    """Is `node` evaluated only when an accelerator is available (`x.pin_memory() if torch.accelerator.is_available() else x`)?"""
    child, parent = node, ctx.parent(node)
    while parent is not None and not isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
        if isinstance(parent, ast.If | ast.IfExp) and child is not parent.test:
            in_body = child is parent.body or (isinstance(parent.body, list) and any(child is s for s in parent.body))
            if in_body and _tests_availability(ctx, parent.test):
                return True
            if not in_body and _tests_absence(ctx, parent.test):
                return True
        if isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.And):
            position = next((i for i, v in enumerate(parent.values) if v is child), 0)
            if any(_tests_availability(ctx, v) for v in parent.values[:position]):
                return True
        child, parent = parent, ctx.parent(parent)
    return False


def _keyword(node: ast.Call, name: str) -> ast.expr | None:
    for keyword in node.keywords:
        if keyword.arg == name:
            return keyword.value
    return None


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _none_off_accelerator(node: ast.AST) -> bool:
    """`[rank] if device.type != "cpu" else None`: device ids already given only on accelerators."""
    return isinstance(node, ast.IfExp) and (_is_none(node.body) or _is_none(node.orelse))


def _string_args(node: ast.Call) -> list[str]:
    return [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]


@on(ast.Call)
def device_arguments(ctx: PyContext, node: ast.Call) -> None:
    func = node.func
    qualname = ctx.qualname(func)
    for keyword in node.keywords:
        if keyword.arg in DEVICE_KEYWORDS:
            check_device_value(ctx, keyword.value)
    if qualname in DEVICE_FIRST_ARG and node.args:
        check_device_value(ctx, node.args[0])
    if isinstance(func, ast.Attribute) and qualname is None:
        if func.attr in ("to", "to_empty") and node.args:
            if not check_device_value(ctx, node.args[0]) and _names_an_index(node.args[0]):
                # x.to(local_rank): an int device is an accelerator index (none on a CPU-only machine).
                ctx.report("AP1001", node.args[0], ".to(index)", replacement="torch.device(device.type, index)")
        elif func.attr == "cuda":
            ctx.report("AP1004", func, ".cuda()", replacement=".to(device)")
        elif func.attr == "pin_memory" and not node.args and not only_with_accelerator(ctx, node):
            ctx.report("AP1605", func, ".pin_memory()")
        elif func.attr == "startswith" and node.args and isinstance(node.args[0], ast.Constant):
            value = node.args[0].value
            if isinstance(value, str) and DEVICE_RE.fullmatch(value.rstrip(":")):
                ctx.report("AP1006", node, f'.startswith("{value}")', replacement="device.type == accelerator type")
                ctx.consume(node.args[0])


@on(ast.Call)
def amp_and_distributed(ctx: PyContext, node: ast.Call) -> None:
    qualname = ctx.qualname(node.func)
    if qualname in GRAD_SCALERS:
        device_arg = node.args[0] if node.args else _keyword(node, "device")
        if device_arg is None:
            ctx.report(
                "AP1202",
                node,
                qualname,
                message="GradScaler() without a device defaults to \"cuda\" and disables itself elsewhere",
                replacement="torch.amp.GradScaler(device.type)",
            )
    backend = _keyword(node, "backend")
    if backend is None and qualname in PROCESS_GROUP and node.args:
        backend = node.args[0]
    if isinstance(backend, ast.Constant) and backend.value == "nccl":
        ctx.report("AP1301", backend, "nccl", replacement="torch.distributed.get_default_backend_for_device(device)")
    if qualname in DDP or (isinstance(node.func, ast.Name) and ctx.aliases.get(node.func.id, "").endswith("DistributedDataParallel")):
        device_ids = _keyword(node, "device_ids")
        if device_ids is not None and not _is_none(device_ids) and not _none_off_accelerator(device_ids):
            ctx.report("AP1302", device_ids, "device_ids", replacement='device_ids if device.type != "cpu" else None')
        output_device = _keyword(node, "output_device")
        if output_device is not None and not _is_none(output_device) and not _none_off_accelerator(output_device):
            # DDP refuses an output_device for a CPU module, as it refuses device_ids.
            ctx.report("AP1302", output_device, "output_device", replacement='output_device if device.type != "cpu" else None')
    if qualname in PROFILERS:
        use_cuda = _keyword(node, "use_cuda")
        if isinstance(use_cuda, ast.Constant) and use_cuda.value:
            ctx.report("AP1501", use_cuda, "use_cuda=True", replacement="torch.profiler.supported_activities()")
    pin = _keyword(node, "pin_memory")
    if isinstance(pin, ast.Constant) and pin.value is True:
        ctx.report("AP1605", pin, "pin_memory=True")


@on(ast.Call)
def argparse_defaults(ctx: PyContext, node: ast.Call) -> None:
    func = node.func
    if not (isinstance(func, ast.Attribute) and func.attr == "add_argument"):
        return
    names = _string_args(node) + [v for k in node.keywords if k.arg == "dest" for v in [getattr(k.value, "value", "")]]
    default = _keyword(node, "default")
    if default is None:
        return
    if any("device" in str(n).lower() for n in names):
        check_device_value(ctx, default, "AP1003")
    elif any("backend" in str(n).lower() for n in names) and isinstance(default, ast.Constant) and default.value == "nccl":
        ctx.report("AP1301", default, "nccl", replacement="torch.distributed.get_default_backend_for_device(device)")


def _mentions_cuda_source(node: ast.AST | None) -> bool:
    if node is None:
        return False
    for child in ast.walk(node):
        if isinstance(child, ast.Constant) and isinstance(child.value, str) and child.value.endswith((".cu", ".cuh")):
            return True
    return False


@on(ast.Call)
def extension_builds(ctx: PyContext, node: ast.Call) -> None:
    qualname = ctx.qualname(node.func)
    if qualname in CPP_EXTENSION_LOAD:
        sources = _keyword(node, "sources") or (node.args[1] if len(node.args) > 1 else None)
        with_cuda = _keyword(node, "with_cuda")
        if _mentions_cuda_source(sources) or (isinstance(with_cuda, ast.Constant) and with_cuda.value is True):
            ctx.report("AP6001", node, "torch.utils.cpp_extension.load", message="a CUDA extension is JIT-compiled with nvcc")
    elif qualname in CPP_EXTENSION_INLINE:
        cuda_sources = _keyword(node, "cuda_sources") or (node.args[2] if len(node.args) > 2 else None)
        if cuda_sources is not None and not (isinstance(cuda_sources, ast.Constant) and cuda_sources.value is None):
            ctx.report("AP6001", node, "torch.utils.cpp_extension.load_inline", message="CUDA sources are JIT-compiled with nvcc")

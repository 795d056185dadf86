"""Profiling: ProfilerActivity.CUDA → the activities this machine supports; NVTX ranges → record_function."""

from __future__ import annotations

import ast

import libcst as cst

from accelport.migrate.codemods import (
    called,
    codemod,
    expr_edit,
    fail,
    new_arg,
    replace_with,
)
from accelport.migrate.context import FileContext
from accelport.migrate.edits import Edit
from accelport.migrate.source import Site

_ACTIVITIES = frozenset({"CPU", "CUDA", "XPU", "MTIA", "HPU", "PrivateUse1"})


@codemod("AP1501")
def profiler_activity(site: Site, ctx: FileContext) -> Edit | None:
    node, parent = site.node, site.parent
    supported = f"{ctx.path('torch.profiler.supported_activities')}()"
    if isinstance(node, ast.Attribute) and isinstance(parent, ast.List | ast.Tuple | ast.Set):
        # [ProfilerActivity.CPU, ProfilerActivity.CUDA] -> torch.profiler.supported_activities()
        if all(isinstance(e, ast.Attribute) and e.attr in _ACTIVITIES for e in parent.elts):
            return replace_with(site, parent, supported)
        return None
    if isinstance(node, ast.Constant) and node.value is True and isinstance(parent, ast.keyword) and parent.arg == "use_cuda":
        call = site.parents[1] if len(site.parents) > 1 else None
        if not isinstance(call, ast.Call):
            return None
        qualname = ctx.qualname(call.func) or ""
        if qualname.startswith("torch.autograd.profiler"):
            # use_device="cpu" warns ("not a valid device option"): the CPU is profiled anyway.
            device_type, quote = ctx.device_type(site), site.quote
            replacement = new_arg(f"{device_type} if {device_type} != {quote}cpu{quote} else None", keyword="use_device")
        elif any(k.arg == "activities" for k in call.keywords):
            replacement = None
        else:
            replacement = new_arg(supported, keyword="activities")

        def swap(expr: cst.BaseExpression) -> cst.BaseExpression:
            if not isinstance(expr, cst.Call):
                fail("expected a profiler call")
            args = []
            for arg in expr.args:
                if arg.keyword is not None and arg.keyword.value == "use_cuda":
                    if replacement is not None:
                        args.append(replacement.with_changes(comma=arg.comma))
                    continue
                args.append(arg)
            if args and replacement is None:
                args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return expr.with_changes(args=args)

        return expr_edit(site, call, swap)
    return None


@codemod("AP1502")
def nvtx_range(site: Site, ctx: FileContext) -> Edit | None:
    """with torch.cuda.nvtx.range("step"): -> with torch.profiler.record_function("step"):"""
    if not isinstance(site.node, ast.Attribute | ast.Name) or not site.symbol.endswith("nvtx.range"):
        return None
    call = called(site)
    if call is None or len(call.args) != 1 or call.keywords or isinstance(call.args[0], ast.Starred):
        return None  # nvtx.range(msg, *args) formats msg; record_function takes a finished name
    return replace_with(site, site.node, ctx.path("torch.profiler.record_function"))

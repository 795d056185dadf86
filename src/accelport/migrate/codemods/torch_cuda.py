"""torch.cuda.* → torch.accelerator, torch.Stream/Event, torch.manual_seed, torch.get_device_module.

Driven by the API catalogue (knowledge/torch_api.toml): an entry's `replacement` names the
portable function, `guard` says torch.accelerator raises without an accelerator (so the
call goes behind `torch.accelerator.is_available()`), `fallback` is what a guarded call
stands for in an expression, and `fallback_call` is used where the backend's module lacks
the function (`getattr(torch.get_device_module(device), "name", fallback)`).
"""

from __future__ import annotations

import ast
import re

import libcst as cst

from accelport.migrate.codemods import (
    already_guarded,
    called,
    codemod,
    expr_edit,
    fail,
    maybe_parens,
    needs_parens,
    new_arg,
    parse,
    prepend_args,
    replace_with,
    statement_call,
    stmt_edit,
)
from accelport.migrate.context import COMPAT_MODULE, FileContext
from accelport.migrate.edits import Edit, code
from accelport.migrate.source import Site
from accelport.source.names import lookup_api

# Calls that need the device as their first argument once they leave torch.cuda.
_STREAM = "torch.cuda.Stream"
_EVENT = "torch.cuda.Event"
_STREAM_CONTEXTS = ("torch.cuda.stream", "torch.cuda.StreamContext")


def catalogue_entry(site: Site) -> tuple[str, dict] | None:
    found = lookup_api(site.symbol)
    if found is None or found[1].get("autofix") is False:
        return None
    return found


def portable_path(entry: dict) -> str | None:
    """'torch.accelerator.set_device_index(index)' -> 'torch.accelerator.set_device_index'."""
    replacement = entry.get("replacement") or ""
    match = re.fullmatch(r"(.+)\([^()]*\)", replacement)
    path = match.group(1) if match else replacement
    if not path or " " in path:
        return None
    return path


@codemod("AP1101", "AP1102", "AP1103", "AP1104", "AP1105", "AP1106", "AP1107", "AP1108", "AP1114")
def torch_cuda_api(site: Site, ctx: FileContext) -> Edit | None:
    if not isinstance(site.node, ast.Attribute | ast.Name):
        return None  # imports are handled by the imports codemod
    found = catalogue_entry(site)
    if found is None:
        return None
    symbol, entry = found
    call = called(site)
    if symbol == _STREAM:
        return _with_device_first(site, ctx, call, ctx.path("torch.Stream"), keyword="device")
    if symbol == _EVENT:
        return _with_device_first(site, ctx, call, f"{ctx.compat()}.Event", keyword=None)
    if symbol in _STREAM_CONTEXTS:
        if call is None or len(call.args) != 1 or call.keywords:
            return None
        return expr_edit(site, call, lambda c: c.args[0].value)
    if symbol == "torch.cuda.device":
        return _device_index(site, ctx, call)
    if symbol == "torch.cuda.device_of":
        if call is None or len(call.args) != 1:
            return None
        return expr_edit(site, call, lambda c: parse(f"{ctx.path('torch.accelerator.device_index')}({code(c.args[0].value)}.device.index)"))
    if symbol == "torch.cuda.is_bf16_supported":
        if call is None:
            return None
        # torch.cuda's answer without CUDA is False; the helper's (True on the CPU) only with an accelerator.
        device = ctx.device(site)
        func = f"{ctx.compat()}.is_bf16_supported"
        available = f"{ctx.path('torch.accelerator.is_available')}()"

        def bf16(c: cst.BaseExpression) -> cst.BaseExpression:
            checked = prepend_args(c.with_changes(func=parse(func)), new_arg(device))
            if already_guarded(site, ctx):
                return checked
            return maybe_parens(site, call, parse(f"{code(checked)} if {available} else False"), "ifexp")

        return expr_edit(site, call, bf16)
    if "fallback_call" in entry:
        return _device_module_call(site, ctx, call, symbol, entry)
    if symbol in ("torch.cuda.manual_seed", "torch.cuda.manual_seed_all") and call is not None:
        dropped = _repeated_seed(site, ctx, call)
        if dropped is not None:
            return dropped
        return _accelerator_seed(site, ctx, call, symbol.rsplit(".", 1)[1])
    path = portable_path(entry)
    if path is None:
        return None
    if path.startswith(COMPAT_MODULE + "."):
        path = ctx.compat() + path[len(COMPAT_MODULE) :]
    if "get_device_module(device)" in path:
        path = path.replace("torch.get_device_module(device)", f"{ctx.path('torch.get_device_module')}({ctx.device(site)})")
    new_func = ctx.path(path)
    if call is None:
        # A reference, not a call (`except torch.cuda.OutOfMemoryError`): rename, unless the
        # portable function raises without an accelerator and needs its guard at the call.
        if entry.get("guard"):
            return None
        return replace_with(site, site.node, new_func)
    if not entry.get("guard"):
        return replace_with(site, site.node, new_func)
    return _guarded(site, ctx, call, new_func, entry)


_SEEDS = frozenset({"torch.manual_seed", "torch.random.manual_seed", "torch.cuda.manual_seed", "torch.cuda.manual_seed_all"})


def _seed_call(ctx: FileContext, statement: ast.stmt | None) -> tuple[str, str] | None:
    """(qualified name, argument text) of a statement that is only a seeding call."""
    if not isinstance(statement, ast.Expr) or not isinstance(statement.value, ast.Call):
        return None
    call = statement.value
    name = ctx.qualname(call.func)
    if name not in _SEEDS or len(call.args) != 1 or call.keywords:
        return None
    return name, ast.dump(call.args[0])


def _repeated_seed(site: Site, ctx: FileContext, call: ast.Call) -> Edit | None:
    """Drop `torch.cuda.manual_seed_all(s)` next to `torch.manual_seed(s)`, which seeds every device already.

    Only for adjacent statements with the same argument (nothing runs between them, so one call
    does what the two did) and a line without a comment (a comment is never dropped).
    """
    statement = statement_call(site, call)
    this = _seed_call(ctx, statement)
    if this is None or not site.source.alone_on_its_lines(statement):
        return None
    parent = site.source.statement_parent(statement)
    if isinstance(parent, ast.Module):
        # The parse may hold only the top-level statements with findings: ask the whole file.
        siblings = ctx.whole().body
        index = next((i for i, s in enumerate(siblings) if s.lineno == statement.lineno), None)
        if index is None:
            return None
    else:
        siblings = next((v for _f, v in ast.iter_fields(parent) if isinstance(v, list) and any(s is statement for s in v)), [])
        index = next(i for i, s in enumerate(siblings) if s is statement)
    before = _seed_call(ctx, siblings[index - 1]) if index > 0 else None
    after = _seed_call(ctx, siblings[index + 1]) if index + 1 < len(siblings) else None
    # Only torch.manual_seed(s) itself (it seeds every device) makes the accelerator's seeding redundant.
    repeated = any(
        other is not None and other[1] == this[1] and not other[0].startswith("torch.cuda.") for other in (before, after)
    )
    if not repeated:
        return None
    _start, end = site.source.line_span(statement.lineno, statement.end_lineno)
    if "#" in site.source.text[site.source.end(statement) : end]:
        return None
    return stmt_edit(site, statement, lambda line: [])


def _accelerator_seed(site: Site, ctx: FileContext, call: ast.Call, name: str) -> Edit | None:
    """torch.cuda.manual_seed_all(s) -> the accelerator's own generators seeded, behind is_available().

    Not torch.manual_seed(s): that also reseeds the CPU generator, which torch.cuda's never did
    (without CUDA it does nothing at all), so the CPU's random numbers would change.
    """
    module = f"{ctx.path('torch.get_device_module')}({ctx.device(site)})"
    quote = site.quote
    seed = f"getattr({module}, {quote}{name}{quote}, {ctx.path('torch.manual_seed')})" if name == "manual_seed_all" else f"{module}.{name}"
    return _guarded(site, ctx, call, seed, {"guard": True, "fallback": "None"})


def _guarded(site: Site, ctx: FileContext, call: ast.Call, new_func: str, entry: dict) -> Edit | None:
    """torch.cuda.X(...) -> torch.accelerator.Y(...) behind torch.accelerator.is_available()."""
    if already_guarded(site, ctx):
        return replace_with(site, site.node, new_func)
    available = f"{ctx.path('torch.accelerator.is_available')}()"
    statement = statement_call(site, call)
    if statement is not None and site.source.alone_on_its_lines(statement) and site.source.start(statement) == site.source.start(site.node):
        # The statement's lines, its call renamed and indented under the guard. Written as text, not
        # through libcst: the call's own arguments (already rewritten inside) are kept as they are.
        source = site.source
        indent = source.indentation(statement.lineno)
        func = source.text_of(site.node)

        def guard(fragment: str, layout) -> str:
            if not fragment.startswith(indent + func):
                fail("expected the statement to start with the call")
            rest = fragment[len(indent) + len(func) :]
            return f"{indent}if {available}:{layout.newline}{indent}{layout.indent_unit}{new_func}{rest}"

        start, end = source.line_span(statement.lineno, statement.end_lineno)
        return Edit(start, end, "text", transform=guard, site=site, indent=indent, header=f"if {available}:")
    fallback = entry.get("fallback")
    if fallback is None:
        return replace_with(site, site.node, new_func)
    if entry.get("fallback_import"):
        ctx.module(entry["fallback_import"])

    # As text: the call's own arguments (rewritten inside already) stay as they are; only the name changes.
    func, parens = site.source.text_of(site.node), needs_parens(site, call, "ifexp")

    def conditional(fragment: str, _layout) -> str:
        if not fragment.startswith(func):
            fail("expected the call to start with its function")
        text = f"{new_func}{fragment[len(func):]} if {available} else {fallback}"
        return f"({text})" if parens else text

    return Edit(site.source.start(call), site.source.end(call), "text", transform=conditional, site=site)


def _device_index(site: Site, ctx: FileContext, call: ast.Call | None) -> Edit | None:
    """with torch.cuda.device(i): -> with torch.accelerator.device_index(i if torch.accelerator.is_available() else None):

    torch.accelerator.device_index raises for an index without an accelerator; None makes it a no-op.
    """
    func = ctx.path("torch.accelerator.device_index")
    if call is None:
        return replace_with(site, site.node, func)
    if len(call.args) != 1 or call.keywords or isinstance(call.args[0], ast.Starred):
        return None
    index = call.args[0]
    if isinstance(index, ast.Constant) and index.value is None:
        return expr_edit(site, call, lambda c: c.with_changes(func=parse(func)))
    available = f"{ctx.path('torch.accelerator.is_available')}()"

    def rewrite(node: cst.BaseExpression) -> cst.BaseExpression:
        argument = node.args[0].value
        guarded = parse(f"{code(argument)} if {available} else None")
        if isinstance(argument, cst.IfExp | cst.Lambda | cst.NamedExpr) and not argument.lpar:
            guarded = parse(f"({code(argument)}) if {available} else None")
        return node.with_changes(func=parse(func), args=[node.args[0].with_changes(value=guarded)])

    return expr_edit(site, call, rewrite)


def _with_device_first(site: Site, ctx: FileContext, call: ast.Call | None, new_func: str, keyword: str | None) -> Edit | None:
    """torch.cuda.Stream(...) -> torch.Stream(device, ...); torch.cuda.Event(...) -> accelport.compat.Event(device, ...)."""
    if call is None:
        if keyword is None:
            return replace_with(site, site.node, ctx.path("torch.Event"))  # isinstance checks and the like
        return replace_with(site, site.node, new_func)
    has_device = bool(call.args) or any(k.arg == keyword for k in call.keywords if keyword)
    device = None if has_device else ctx.device(site)

    def rewrite(node: cst.BaseExpression) -> cst.BaseExpression:
        node = node.with_changes(func=parse(new_func))
        return node if device is None else prepend_args(node, new_arg(device))

    return expr_edit(site, call, rewrite)


def _device_module_call(site: Site, ctx: FileContext, call: ast.Call | None, symbol: str, entry: dict) -> Edit | None:
    """torch.cuda.get_rng_state() -> getattr(torch.get_device_module(DEVICE), "get_rng_state", torch.get_rng_state)()."""
    if call is None:
        return None
    name = symbol.rsplit(".", 1)[1]
    device = ctx.device(site, typed="{device}" in entry["fallback_call"])
    fallback = entry["fallback_call"].format(torch=ctx.torch, device=device)
    quote = site.quote
    func = f"getattr({ctx.path('torch.get_device_module')}({device}), {quote}{name}{quote}, {fallback})"
    return expr_edit(site, call, lambda c: c.with_changes(func=parse(func)))

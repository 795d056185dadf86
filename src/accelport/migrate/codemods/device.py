"""Device selection: "cuda" strings, f"cuda:{rank}", defaults, `.cuda()`, `is_cuda`, comparisons, CPU fallbacks."""

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
    in_value_position,
    maybe_parens,
    new_arg,
    parse,
    prepend_args,
    replace_with,
)
from accelport.migrate.context import FileContext
from accelport.migrate.edits import Edit, code
from accelport.migrate.source import Site
from accelport.source.names import DEVICE_NAME_RE

# Calls whose first argument is a device *type* string, not a device.
_TYPE_FIRST_ARG = frozenset({"torch.autocast", "torch.amp.autocast", "torch.amp.GradScaler", "torch.GradScaler"})
_TYPE_KEYWORDS = frozenset({"device_type", "pin_memory_device"})
# Names that look like a device index when passed to `.cuda(i)`.
_INDEX_NAME = re.compile(r"(?i)(?:.*_)?(?:rank|idx|index|id|gpu|gpu_id|device_id|ordinal|i|n)")


def _index(value: str) -> str:
    """'cuda:3' -> '3'; 'cuda' -> ''."""
    return value.partition(":")[2]


def _string_form(site: Site, ctx: FileContext, value: str) -> str:
    """A device string with the same meaning on the selected device: `DEVICE.type`, f"{DEVICE.type}:1"."""
    device_type = ctx.device_type(site)
    index = _index(value)
    if not index:
        return device_type
    quote = site.quote
    return f"f{quote}{{{device_type}}}:{index}{quote}"


def _device_argument(site: Site, ctx: FileContext) -> str | None:
    """'device' / 'type' when the string is an argument that takes a device / a device type; else None."""
    node, parent = site.node, site.parent
    if isinstance(parent, ast.keyword):
        call = site.parents[1] if len(site.parents) > 1 else None
        if parent.arg in _TYPE_KEYWORDS:
            return "type"
        if parent.arg in ("device", "map_location", "output_device") and isinstance(call, ast.Call):
            return "device"
        return None
    if isinstance(parent, ast.Call) and parent.args and parent.args[0] is node:
        qualname = ctx.qualname(parent.func)
        if qualname in _TYPE_FIRST_ARG:
            return "type"
        if qualname == "torch.device" and (len(parent.args) > 1 or parent.keywords):
            return "type"  # torch.device("cuda", index)
        if isinstance(parent.func, ast.Attribute) and qualname is None and parent.func.attr in ("to", "to_empty"):
            return "device"
        if qualname in ("torch.device", "torch.load", "torch.Stream", "torch.Event", "torch.get_device_module", "torch.set_default_device"):
            return "device"
    if isinstance(parent, ast.Call) and len(parent.args) > 1 and parent.args[1] is node and ctx.qualname(parent.func) == "torch.load":
        return "device"  # torch.load(f, map_location)
    return None


_AMP_CALLS = frozenset({"torch.autocast", "torch.amp.autocast", "torch.amp.GradScaler", "torch.GradScaler"})


def _amp_call(site: Site, ctx: FileContext) -> ast.Call | None:
    """The autocast / GradScaler call whose device type the string is (first argument or `device_type=`)."""
    parent = site.parent
    if isinstance(parent, ast.keyword) and parent.arg == "device_type" and len(site.parents) > 1:
        parent = site.parents[1]
    if isinstance(parent, ast.Call) and ctx.qualname(parent.func) in _AMP_CALLS:
        return parent
    return None


def _amp_device_type(site: Site, ctx: FileContext, call: ast.Call) -> Edit:
    """torch.autocast("cuda") -> torch.autocast(DEVICE.type, enabled=DEVICE.type != "cpu") (see amp.py)."""
    from accelport.migrate.codemods.amp import enabled_only_on_accelerators

    device_type, quote = ctx.device_type(site), site.quote
    position = next((i for i, a in enumerate(call.args) if a is site.node), None)
    keyword = None if position is not None else "device_type"

    def retype(expr: cst.BaseExpression) -> cst.BaseExpression:
        if not isinstance(expr, cst.Call):
            fail("expected an autocast or GradScaler call")
        args = list(expr.args)
        for index, arg in enumerate(args):
            if (keyword is None and index == position) or (arg.keyword is not None and arg.keyword.value == keyword):
                args[index] = arg.with_changes(value=parse(device_type))
        return enabled_only_on_accelerators(expr.with_changes(args=args), device_type, quote)

    return expr_edit(site, call, retype)


def _torch_device_call(site: Site, ctx: FileContext) -> ast.Call | None:
    """`torch.device("cuda")`, the string its only argument."""
    parent = site.parent
    if (
        isinstance(parent, ast.Call)
        and ctx.qualname(parent.func) == "torch.device"
        and len(parent.args) == 1
        and parent.args[0] is site.node
        and not parent.keywords
    ):
        return parent
    return None


@codemod("AP1001", "AP1003")
def device_string(site: Site, ctx: FileContext) -> Edit | None:
    node = site.node
    if site.symbol == ".to(index)" and isinstance(node, ast.Name | ast.Attribute):
        # x.to(local_rank) -> x.to(torch.device(DEVICE.type, local_rank)): the accelerator with that index, or the CPU.
        return replace_with(site, node, f"{ctx.path('torch.device')}({ctx.device_type(site)}, {site.text()})")
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return None
    value = node.value
    index = _index(value)
    whole_call = _torch_device_call(site, ctx)
    if whole_call is not None:
        # torch.device("cuda") -> DEVICE; torch.device("cuda:1") -> torch.device(DEVICE.type, 1)
        if index:
            return replace_with(site, whole_call, f"{ctx.path('torch.device')}({ctx.device_type(site)}, {index})")
        return replace_with(site, whole_call, ctx.device(site, typed=True))
    position = _device_argument(site, ctx) if site.rule_id == "AP1001" else None
    amp_call = _amp_call(site, ctx) if position == "type" and value == "cuda" else None
    if amp_call is not None:
        return _amp_device_type(site, ctx, amp_call)
    if position == "device":
        if index:
            return replace_with(site, node, f"{ctx.path('torch.device')}({ctx.device_type(site)}, {index})")
        return replace_with(site, node, ctx.device(site))
    return replace_with(site, node, _string_form(site, ctx, value))


@codemod("AP1002", "AP1007")
def device_fstring(site: Site, ctx: FileContext) -> Edit | None:
    """f"cuda:{rank}" -> f"{DEVICE.type}:{rank}" (AP1007: an f-string of that shape anywhere: it names a device)."""
    node = site.node
    if site.rule_id == "AP1007" and not isinstance(node, ast.JoinedStr):
        return _device_string_with_accelerator(site, ctx)
    device_type = ctx.device_type(site)
    parent = site.parent
    if isinstance(node, ast.JoinedStr):
        values = node.values
        simple_index = (
            len(values) == 2
            and isinstance(values[0], ast.Constant)
            and values[0].value == "cuda:"
            and isinstance(values[1], ast.FormattedValue)
            and values[1].conversion == -1
            and values[1].format_spec is None
        )
        if (
            simple_index
            and isinstance(parent, ast.Call)
            and ctx.qualname(parent.func) == "torch.device"
            and len(parent.args) == 1
            and not parent.keywords
        ):
            # torch.device(f"cuda:{rank}") -> torch.device(DEVICE.type, rank)
            def to_device_call(call: cst.BaseExpression) -> cst.BaseExpression:
                fstring = call.args[0].value
                if not isinstance(fstring, cst.FormattedString):
                    fail("expected an f-string")
                index = fstring.parts[1].expression
                return call.with_changes(args=[new_arg(device_type).with_changes(
                    comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), cst.Arg(value=index)])

            return expr_edit(site, parent, to_device_call)

        def retype_fstring(fstring: cst.BaseExpression) -> cst.BaseExpression:
            if not isinstance(fstring, cst.FormattedString) or not fstring.parts:
                fail("expected an f-string")
            head = fstring.parts[0]
            if not isinstance(head, cst.FormattedStringText) or not head.value.startswith("cuda"):
                fail("f-string does not start with cuda")
            parts = [cst.FormattedStringExpression(expression=parse(device_type))]
            rest = head.value[len("cuda") :]
            if rest:
                parts.append(cst.FormattedStringText(rest))
            return fstring.with_changes(parts=[*parts, *fstring.parts[1:]])

        return expr_edit(site, node, retype_fstring)
    if isinstance(node, ast.BinOp) and isinstance(node.left, ast.Constant):
        return replace_with(site, node.left, _fstring_literal(site, node.left, device_type))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Constant):
        template = node.func.value.value
        rest = template[len("cuda") :]
        if re.search(r"\{[^{}]+\}", rest) is None and not node.keywords and not any(isinstance(a, ast.Starred) for a in node.args):
            # "cuda:{}".format(rank) -> "{}:{}".format(DEVICE.type, rank)
            literal = site.text(node.func.value)
            prefix = literal[: len(literal) - len(literal.lstrip("rRuU"))]
            quoted = literal[len(prefix) :]
            quote = quoted[:3] if quoted[:3] in ('"""', "'''") else quoted[0]
            body = quoted[len(quote) : len(quoted) - len(quote)]
            if not body.startswith("cuda"):
                return None
            new_template = f"{prefix}{quote}{{}}{body[len('cuda'):]}{quote}"

            def retemplate(call: cst.BaseExpression) -> cst.BaseExpression:
                func = call.func.with_changes(value=parse(new_template))
                return prepend_args(call.with_changes(func=func), new_arg(device_type))

            return expr_edit(site, node, retemplate)
        return replace_with(site, node.func.value, _fstring_literal(site, node.func.value, device_type))
    return None


def _device_string_with_accelerator(site: Site, ctx: FileContext) -> Edit | None:
    """"cuda" as a value reached only with an accelerator (`if torch.cuda.is_available(): d = "cuda"`) -> DEVICE.type."""
    node = site.node
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str) and _CUDA_INDEX.fullmatch(node.value)):
        return None
    if not in_value_position(site) or not already_guarded(site, ctx):
        return None
    device_type, index, quote = f"{ctx.module_device(site)}.type", _index(node.value), site.quote
    return replace_with(site, node, f"f{quote}{{{device_type}}}:{index}{quote}" if index else device_type)


def _fstring_literal(site: Site, literal: ast.Constant, device_type: str) -> str:
    """'cuda:%d' -> f'{DEVICE.type}:%d' (braces in the rest doubled), keeping the quotes."""
    text = site.text(literal)
    prefix = text[: len(text) - len(text.lstrip("rRuU"))]
    quoted = text[len(prefix) :]
    quote = quoted[:3] if quoted[:3] in ('"""', "'''") else quoted[0]
    body = quoted[len(quote) : len(quoted) - len(quote)]
    if not body.startswith("cuda"):
        fail("literal does not start with cuda")
    rest = body[len("cuda") :].replace("{", "{{").replace("}", "}}")
    return f"{prefix.replace('u', '').replace('U', '')}f{quote}{{{device_type}}}{rest}{quote}"


@codemod("AP1004")
def cuda_method(site: Site, ctx: FileContext) -> Edit | None:
    """x.cuda() -> x.to(device); x.cuda(rank) -> x.to(torch.device(device.type, rank)); non_blocking kept."""
    call = called(site)
    if call is None or not isinstance(site.node, ast.Attribute):
        return None
    index_node = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "device"), None)
    if len(call.args) > 1 or any(k.arg not in ("device", "non_blocking", "memory_format") for k in call.keywords):
        return None
    if index_node is not None and isinstance(index_node, ast.Constant) and index_node.value is None:
        index_node = None
    if index_node is not None and _names_a_device(index_node):
        # x.cuda(device) with a device (not an index) -> x.to(device)
        return expr_edit(site, call, lambda node: node.with_changes(func=node.func.with_changes(attr=cst.Name("to"))))
    if index_node is not None and not _looks_like_index(index_node):
        return None
    device = ctx.device(site) if index_node is None else None
    torch_device = ctx.path("torch.device")
    device_type = ctx.device_type(site) if index_node is not None else ""

    def to_call(node: cst.BaseExpression) -> cst.BaseExpression:
        if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
            fail("expected x.cuda(...)")
        index = None
        rest = []
        for arg in node.args:
            if arg.keyword is None or arg.keyword.value == "device":
                index = arg.value
            else:
                rest.append(arg)
        if index is None or (isinstance(index, cst.Name) and index.value == "None"):
            target = new_arg(device)
        else:
            target = cst.Arg(value=parse(f"{torch_device}({device_type}, {_code(index)})"))
        if rest:
            rest[-1] = rest[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            head = target.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            args = [head, *rest]
        else:
            args = [target]
        return node.with_changes(func=node.func.with_changes(attr=cst.Name("to")), args=args)

    return expr_edit(site, call, to_call)


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _names_a_device(node: ast.AST) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
    return isinstance(name, str) and DEVICE_NAME_RE.fullmatch(name) is not None


def _looks_like_index(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
    return name is not None and _INDEX_NAME.fullmatch(name) is not None


@codemod("AP1005")
def is_cuda(site: Site, ctx: FileContext) -> Edit | None:
    """x.is_cuda -> x.device.type == DEVICE.type and DEVICE.type != "cpu" (on an accelerator, as is_cuda is on CUDA)."""
    node = site.node
    if not isinstance(node, ast.Attribute) or not isinstance(node.ctx, ast.Load):
        return None
    device_type = ctx.device_type(site)
    cpu = f"{site.quote}cpu{site.quote}"
    # `assert x.is_cuda` can only fail without CUDA: there it checks that x is where migrate moved it.
    asserted = _asserted(site)

    def compare(attribute: cst.BaseExpression) -> cst.BaseExpression:
        if not isinstance(attribute, cst.Attribute):
            fail("expected x.is_cuda")
        receiver = _code(attribute.value)
        if asserted:
            return maybe_parens(site, node, parse(f"{receiver}.device.type == {device_type}"), "compare")
        return maybe_parens(site, node, parse(f"{receiver}.device.type == {device_type} and {device_type} != {cpu}"), "and")

    return expr_edit(site, node, compare)


def _asserted(site: Site) -> bool:
    """Is the node what an `assert` requires (its test, or an operand of an `and` that is)?"""
    child = site.node
    for parent in site.parents:
        if isinstance(parent, ast.Assert):
            return parent.test is child
        if not (isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.And)):
            return False
        child = parent
    return False


_NEGATED = (ast.NotEq, ast.NotIn, ast.IsNot)


@codemod("AP1006")
def device_comparison(site: Site, ctx: FileContext) -> Edit | None:
    """x.device.type == "cuda" -> (x.device.type == DEVICE.type and DEVICE.type != "cpu")."""
    node = site.node
    device_type = f"{ctx.module_device(site)}.type"
    quote = site.quote
    cpu = f"{quote}cpu{quote}"
    if isinstance(node, ast.Call):  # s.startswith("cuda")
        literal = node.args[0]
        replacement = device_type if not _index(literal.value.rstrip(":")) and literal.value.endswith("cuda") else None
        if replacement is None:
            replacement = f"f{quote}{{{device_type}}}{literal.value[len('cuda'):]}{quote}"

        def startswith(call: cst.BaseExpression) -> cst.BaseExpression:
            inner = call.with_changes(args=[call.args[0].with_changes(value=parse(replacement))])
            return maybe_parens(site, node, parse(f"{_code(inner)} and {device_type} != {cpu}"), "and")

        return expr_edit(site, node, startswith)
    compare = site.parent
    if not isinstance(compare, ast.Compare) or not isinstance(node, ast.Constant):
        return None
    operands = [compare.left, *compare.comparators]
    position = next(i for i, operand in enumerate(operands) if operand is node)
    replacement = _string_form(site, ctx, node.value) if _index(node.value) else device_type
    single = len(compare.ops) == 1
    negated = single and isinstance(compare.ops[0], _NEGATED)

    def retarget(expr: cst.BaseExpression) -> cst.BaseExpression:
        if not isinstance(expr, cst.Comparison):
            fail("expected a comparison")
        if position == 0:
            expr = expr.with_changes(left=parse(replacement))
        else:
            targets = list(expr.comparisons)
            targets[position - 1] = targets[position - 1].with_changes(comparator=parse(replacement))
            expr = expr.with_changes(comparisons=targets)
        if not single:
            return expr
        if negated:
            return maybe_parens(site, compare, parse(f"{_code(expr)} or {device_type} == {cpu}"), "or")
        return maybe_parens(site, compare, parse(f"{_code(expr)} and {device_type} != {cpu}"), "and")

    return expr_edit(site, compare, retarget)


def _is_cuda_available_test(ctx: FileContext, test: ast.AST) -> bool | None:
    """True for `torch.cuda.is_available()`, False for `not torch.cuda.is_available()`, else None."""
    negated = False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        negated, test = True, test.operand
    if isinstance(test, ast.Call) and ctx.qualname(test.func) == "torch.cuda.is_available":
        return not negated
    return None


@codemod("AP9002")
def silent_cpu_fallback(site: Site, ctx: FileContext) -> Edit | None:
    """"cuda" if torch.cuda.is_available() else "cpu" -> DEVICE.type; torch.device forms -> DEVICE.

    The module's device is the accelerator when there is one and the CPU otherwise, which is
    exactly what the conditional picks on CUDA and on a CPU-only machine. Other shapes keep the
    conditional, test the accelerator instead, and name its type in the accelerator branch:
    `"cuda:0" if ... else "cpu"` -> `f"{DEVICE.type}:0" if torch.accelerator.is_available() else "cpu"`.
    """
    node = site.node
    if not isinstance(node, ast.IfExp):
        return None  # the statement form is fixed by its parts (availability test, device strings)
    positive = _is_cuda_available_test(ctx, node.test)
    if positive is None:
        return None
    accelerator_branch, cpu_branch = (node.body, node.orelse) if positive else (node.orelse, node.body)
    accelerator_kind, cpu_kind = _device_literal_kind(ctx, accelerator_branch), _cpu_kind(ctx, cpu_branch)
    device = ctx.module_device(site)
    if accelerator_kind == cpu_kind == "string":
        return replace_with(site, node, f"{device}.type")
    if accelerator_kind == cpu_kind == "device":
        return replace_with(site, node, device)
    available = f"{ctx.path('torch.accelerator.is_available')}()"
    retype = _Retype(f"{device}.type", ctx.path("torch.device"), site.quote)

    def pick(expr: cst.BaseExpression) -> cst.BaseExpression:
        if not isinstance(expr, cst.IfExp):
            fail("expected a conditional expression")
        test = parse(available if positive else f"not {available}")
        if positive:
            return expr.with_changes(test=test, body=expr.body.visit(retype))
        return expr.with_changes(test=test, orelse=expr.orelse.visit(retype))

    return expr_edit(site, node, pick)


def _device_literal_kind(ctx: FileContext, node: ast.AST) -> str | None:
    """'string' for "cuda", 'device' for torch.device("cuda"); None for anything else (indexed ones too)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return "string" if node.value == "cuda" else None
    if isinstance(node, ast.Call) and ctx.qualname(node.func) == "torch.device" and len(node.args) == 1 and not node.keywords:
        return "device" if _device_literal_kind(ctx, node.args[0]) == "string" else None
    return None


def _cpu_kind(ctx: FileContext, node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and node.value == "cpu":
        return "string"
    if isinstance(node, ast.Call) and ctx.qualname(node.func) == "torch.device" and len(node.args) == 1 and not node.keywords:
        return "device" if _cpu_kind(ctx, node.args[0]) == "string" else None
    return None


_CUDA_INDEX = re.compile(r"cuda(?::(\d+))?")


class _Retype(cst.CSTTransformer):
    """In a branch only taken when an accelerator is available, "cuda" names that accelerator's type."""

    def __init__(self, device_type: str, torch_device: str, quote: str) -> None:
        super().__init__()
        self.device_type, self.torch_device, self.quote = device_type, torch_device, quote

    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString) -> cst.BaseExpression:
        if "b" in updated.prefix.lower():
            return updated
        match = _CUDA_INDEX.fullmatch(updated.evaluated_value)
        if match is None:
            return updated
        if match.group(1) is None:
            return parse(self.device_type)
        return parse(f"f{self.quote}{{{self.device_type}}}:{match.group(1)}{self.quote}")

    def leave_FormattedString(self, original: cst.FormattedString, updated: cst.FormattedString) -> cst.BaseExpression:
        head = updated.parts[0] if updated.parts else None
        if not isinstance(head, cst.FormattedStringText) or not head.value.startswith("cuda:"):
            return updated
        parts = [cst.FormattedStringExpression(expression=parse(self.device_type)), cst.FormattedStringText(head.value[len("cuda") :])]
        return updated.with_changes(parts=[*parts, *updated.parts[1:]])


@codemod("AP1605")
def pin_memory(site: Site, ctx: FileContext) -> Edit | None:
    """pin_memory=True -> pin_memory=torch.accelerator.is_available(); x.pin_memory() -> pinned only with an accelerator.

    Pinning needs an accelerator: without one `Tensor.pin_memory()` raises and DataLoader warns
    and does not pin. The receiver is written twice, but only one branch runs, so it is
    evaluated once, as before.
    """
    node = site.node
    available = f"{ctx.path('torch.accelerator.is_available')}()"
    if isinstance(node, ast.Constant) and node.value is True and isinstance(site.parent, ast.keyword):
        return replace_with(site, node, available)
    call = called(site)
    if call is None or call.args or call.keywords or not isinstance(node, ast.Attribute):
        return None

    def conditional(expr: cst.BaseExpression) -> cst.BaseExpression:
        if not isinstance(expr, cst.Call) or not isinstance(expr.func, cst.Attribute):
            fail("expected x.pin_memory()")
        receiver = expr.func.value
        unpinned = code(receiver) if not _needs_own_parens(receiver) else f"({code(receiver)})"
        return maybe_parens(site, call, parse(f"{code(expr)} if {available} else {unpinned}"), "ifexp")

    return expr_edit(site, call, conditional)


def _needs_own_parens(expr: cst.BaseExpression) -> bool:
    """Does the receiver, written as the `else` branch, need parentheses (a lambda, a conditional, a walrus)?"""
    return isinstance(expr, cst.Lambda | cst.IfExp | cst.NamedExpr) and not expr.lpar

"""Codemods, one module per API family, registered by the rule IDs whose findings they rewrite.

A codemod is `(site, ctx) -> Edit | None`. The site is an inventory finding with the
AST node it was reported at; the codemod decides what span to rewrite (the node, its
call, or its statement) and returns an Edit whose libcst transform does the rewrite.
None means "not this form": the finding stays and gets a marker. Adding a rule's
rewrite is adding one function here; no codemod knows about another.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

import libcst as cst

from accelport.migrate.context import FileContext
from accelport.migrate.edits import Edit, EditFailed, ExprTransform, StmtTransform, parse_expression
from accelport.migrate.source import Site

Codemod = Callable[[Site, FileContext], "Edit | None"]
REGISTRY: dict[str, Codemod] = {}


def codemod(*rule_ids: str) -> Callable[[Codemod], Codemod]:
    def register(func: Codemod) -> Codemod:
        for rule_id in rule_ids:
            if rule_id in REGISTRY:
                raise RuntimeError(f"two codemods for {rule_id}")
            REGISTRY[rule_id] = func
        return func

    return register


def load() -> dict[str, Codemod]:
    """Import every module of this package (each registers its codemods): a new file is picked up, none drops out."""
    import importlib
    import pkgutil

    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")
    return REGISTRY


# --------------------------------------------------------------------------- edits


def expr_edit(site: Site, node: ast.AST, transform: ExprTransform) -> Edit:
    """Rewrite the expression `node` (by its exact span)."""
    source = site.source
    return Edit(source.start(node), source.end(node), "expr", transform=transform, site=site)


def replace_with(site: Site, node: ast.AST, text: str) -> Edit:
    """Replace the expression `node` with generated code `text` (checked by libcst's parser)."""
    source = site.source
    return Edit(source.start(node), source.end(node), "replace", text=text, site=site)


def stmt_edit(site: Site, statement: ast.stmt, transform: StmtTransform) -> Edit | None:
    """Rewrite the simple statement `statement` (its whole lines); None when it shares a line."""
    source = site.source
    if not source.alone_on_its_lines(statement):
        return None
    start, end = source.line_span(statement.lineno, statement.end_lineno)
    return Edit(start, end, "stmt", transform=transform, site=site, indent=source.indentation(statement.lineno))


def parse(text: str) -> cst.BaseExpression:
    return parse_expression(text)


def fail(why: str) -> None:
    raise EditFailed(why)


# --------------------------------------------------------------------------- precedence

# Where any expression fits without parentheses: the node is this field of its parent.
_ALWAYS_SAFE = {
    (ast.Assign, "value"),
    (ast.AnnAssign, "value"),
    (ast.AugAssign, "value"),
    (ast.Return, "value"),
    (ast.Expr, "value"),
    (ast.If, "test"),
    (ast.While, "test"),
    (ast.Assert, "test"),
    (ast.Assert, "msg"),
    (ast.keyword, "value"),
    (ast.Call, "args"),
    (ast.List, "elts"),
    (ast.Tuple, "elts"),
    (ast.Set, "elts"),
    (ast.Dict, "values"),
    (ast.Dict, "keys"),
    (ast.FormattedValue, "value"),
    (ast.Lambda, "body"),
    (ast.Subscript, "slice"),
    (ast.withitem, "context_expr"),
    (ast.ListComp, "elt"),
    (ast.SetComp, "elt"),
    (ast.GeneratorExp, "elt"),
    (ast.Yield, "value"),
    (ast.NamedExpr, "value"),
}
# A comparison or an `and`/`or` also fits as an operand of these (a conditional or a lambda does not:
# `[x for x in xs if a if b else c]` does not parse).
_BOOLEAN_SAFE = {
    (ast.comprehension, "iter"),
    (ast.comprehension, "ifs"),
    (ast.BoolOp, "values"),
    (ast.IfExp, "test"),
    (ast.IfExp, "body"),
    (ast.IfExp, "orelse"),
    (ast.UnaryOp, "operand"),  # only `not`; checked below
}


def _field_of(parent: ast.AST, node: ast.AST) -> str | None:
    for name, value in ast.iter_fields(parent):
        if value is node or (isinstance(value, list) and any(v is node for v in value)):
            return name
    return None


def needs_parens(site: Site, node: ast.AST, kind: str) -> bool:
    """Does an expression of `kind` ('atom', 'compare', 'and', 'or', 'ifexp') need parentheses in place of `node`?"""
    if kind == "atom":
        return False
    chain = [site.node, *site.parents]
    index = next((i for i, n in enumerate(chain) if n is node), None)
    parent = chain[index + 1] if index is not None and index + 1 < len(chain) else site.source.parents.get(id(node))
    if parent is None:
        return False
    field = _field_of(parent, node)
    if (type(parent), field) in _ALWAYS_SAFE:
        return False
    if kind in ("compare", "and", "or") and (type(parent), field) in _BOOLEAN_SAFE:
        if isinstance(parent, ast.UnaryOp):
            return not isinstance(parent.op, ast.Not) or kind in ("and", "or")
        if isinstance(parent, ast.BoolOp) and kind == "or":
            return isinstance(parent.op, ast.And)
        return False
    return True


def parenthesize(expr: cst.BaseExpression) -> cst.BaseExpression:
    return expr.with_changes(lpar=[cst.LeftParen(), *expr.lpar], rpar=[*expr.rpar, cst.RightParen()])


def maybe_parens(site: Site, node: ast.AST, expr: cst.BaseExpression, kind: str) -> cst.BaseExpression:
    return parenthesize(expr) if needs_parens(site, node, kind) else expr


# --------------------------------------------------------------------------- reached only with an accelerator


_AVAILABILITY = frozenset({"torch.cuda.is_available", "torch.accelerator.is_available"})


def _tests_availability(ctx: FileContext, test: ast.AST) -> bool:
    """`torch.cuda.is_available()` / `torch.accelerator.is_available()`, alone or as an `and` operand."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_tests_availability(ctx, value) for value in test.values)
    return isinstance(test, ast.Call) and not test.args and ctx.qualname(test.func) in _AVAILABILITY


def already_guarded(site: Site, ctx: FileContext) -> bool:
    """Is the site only reached when an accelerator is available (inside `if ...is_available():` and the like)?

    Then the rewrite needs no guard of its own; adding one doubled the test, and a second
    migration of migrated code added it again.
    """
    child: ast.AST = site.node
    for parent in site.parents:
        if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            return False
        if isinstance(parent, ast.If | ast.IfExp | ast.While) and child is not parent.test:
            body = parent.body if isinstance(parent.body, list) else [parent.body]
            orelse = parent.orelse if isinstance(parent.orelse, list) else [parent.orelse]
            if any(child is s for s in body) and _tests_availability(ctx, parent.test):
                return True
            test = parent.test
            negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
            if negated and any(child is s for s in orelse) and _tests_availability(ctx, test.operand):
                return True
        if isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.And):
            position = next(i for i, v in enumerate(parent.values) if v is child)
            if any(_tests_availability(ctx, v) for v in parent.values[:position]):
                return True
        child = parent
    return False


# Where an expression is a value (assigned, returned, passed), not a key, a comparand or a name.
_VALUE_POSITIONS = {
    (ast.Assign, "value"), (ast.AnnAssign, "value"), (ast.Return, "value"), (ast.keyword, "value"),
    (ast.Call, "args"), (ast.Tuple, "elts"), (ast.List, "elts"), (ast.NamedExpr, "value"),
    (ast.IfExp, "body"), (ast.IfExp, "orelse"), (ast.Lambda, "body"), (ast.Dict, "values"),
}  # fmt: skip


def in_value_position(site: Site) -> bool:
    parent = site.parent
    return parent is not None and (type(parent), _field_of(parent, site.node)) in _VALUE_POSITIONS


# --------------------------------------------------------------------------- call shapes


def called(site: Site) -> ast.Call | None:
    """The call whose function is the site's node (`torch.cuda.synchronize` in `torch.cuda.synchronize()`)."""
    parent = site.parent
    if isinstance(parent, ast.Call) and parent.func is site.node:
        return parent
    return None


def statement_call(site: Site, call: ast.Call) -> ast.Expr | None:
    """The expression statement that is exactly this call, if any."""
    parent = site.source.parents.get(id(call))
    if isinstance(parent, ast.Expr) and parent.value is call:
        return parent
    return None


def positional_to_keywords(call: cst.Call, names: tuple[str, ...]) -> list[cst.Arg]:
    """Arguments with positionals turned into keywords (for APIs whose positional order changes)."""
    args = []
    position = 0
    for arg in call.args:
        if arg.keyword is None and not arg.star:
            if position >= len(names):
                fail("more positional arguments than the API takes")
            args.append(arg.with_changes(keyword=cst.Name(names[position]), equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))))
            position += 1
        else:
            args.append(arg)
    return args


def new_arg(text: str, keyword: str | None = None) -> cst.Arg:
    value = parse(text)
    if keyword is None:
        return cst.Arg(value=value)
    return cst.Arg(
        value=value,
        keyword=cst.Name(keyword),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )


def with_comma(arg: cst.Arg) -> cst.Arg:
    """`arg` followed by `, ` (for putting it before existing arguments)."""
    return arg.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))


def prepend_args(call: cst.Call, *new: cst.Arg) -> cst.Call:
    args = list(call.args)
    if args:
        new = tuple(with_comma(a) for a in new)
    else:
        new = (*(with_comma(a) for a in new[:-1]), new[-1])
    return call.with_changes(args=[*new, *args])


def append_args(call: cst.Call, *new: cst.Arg) -> cst.Call:
    args = list(call.args)
    if args:
        last = args[-1]
        if last.comma is cst.MaybeSentinel.DEFAULT or last.comma is None:
            args[-1] = with_comma(last)
        elif isinstance(last.comma, cst.Comma) and not _has_space_after(last.comma):
            args[-1] = last.with_changes(comma=last.comma.with_changes(whitespace_after=cst.SimpleWhitespace(" ")))
    body = [*(with_comma(a) for a in new[:-1]), new[-1]]
    return call.with_changes(args=[*args, *body])


def _has_space_after(comma: cst.Comma) -> bool:
    ws = comma.whitespace_after
    return not (isinstance(ws, cst.SimpleWhitespace) and ws.value == "")


def string_literal(text: str, quote: str) -> str:
    return f"{quote}{text}{quote}"

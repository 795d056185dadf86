"""Backend switches: TF32 → torch.set_float32_matmul_precision.

`torch.backends.cudnn.deterministic` is not rewritten: torch.use_deterministic_algorithms is broader
(every backend, and it raises on ops without a deterministic kernel), and the cuDNN flag is
harmless where there is no cuDNN. It keeps a marker (AP1402).
"""

from __future__ import annotations

import ast

from accelport.migrate.codemods import codemod, maybe_parens, parse
from accelport.migrate.context import FileContext
from accelport.migrate.edits import Edit
from accelport.migrate.source import Site


def _assigned(site: Site) -> ast.Assign | None:
    """The `flag = value` statement when the site is its only target."""
    parent = site.parent
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and parent.targets[0] is site.node:
        return parent
    return None


def _set_from_value(site: Site, assign: ast.Assign, make_call) -> Edit | None:
    """Turn `flag = value` into the call `make_call(value_code, value_node)` returns (as text: the
    statement's span becomes the call; what follows on its line, a comment, stays)."""
    source = site.source
    start, value_at = source.start(assign), source.start(assign.value) - source.start(assign)

    def rewrite(fragment: str, _layout) -> str:
        return make_call(fragment[value_at:], assign.value)

    return Edit(start, source.end(assign), "text", transform=rewrite, site=site)


def _is_constant(node: ast.AST, value: bool) -> bool:
    return isinstance(node, ast.Constant) and node.value is value


@codemod("AP1401")
def tf32(site: Site, ctx: FileContext) -> Edit | None:
    """torch.backends.cuda.matmul.allow_tf32 = True -> torch.set_float32_matmul_precision("high")

    Only the matmul flag: torch.backends.cudnn.allow_tf32 governs convolutions, which
    set_float32_matmul_precision does not, so it is kept (its catalogue entry says autofix = false).
    """
    if not isinstance(site.node, ast.Attribute) or site.symbol != "torch.backends.cuda.matmul.allow_tf32":
        return None
    quote = site.quote
    high, highest = f"{quote}high{quote}", f"{quote}highest{quote}"
    setter = ctx.path("torch.set_float32_matmul_precision")
    assign = _assigned(site)
    if assign is not None:

        def call(value: str, node: ast.AST) -> str:
            if _is_constant(node, True):
                return f"{setter}({high})"
            if _is_constant(node, False):
                return f"{setter}({highest})"
            return f"{setter}({high} if {value} else {highest})"

        return _set_from_value(site, assign, call)
    if isinstance(site.node.ctx, ast.Load):
        text = f"{ctx.path('torch.get_float32_matmul_precision')}() != {highest}"
        return _compare(site, text)
    return None


def _compare(site: Site, text: str) -> Edit:
    from accelport.migrate.codemods import expr_edit

    return expr_edit(site, site.node, lambda _old: maybe_parens(site, site.node, parse(text), "compare"))

"""Imports: `from torch.cuda.amp import X` → `from torch.amp import X`; CUDA imports left unused are removed.

Findings reported at an import alias are grouped per import statement (one edit each).
Removal is decided after the other rewrites, from the rewritten code itself: an alias
bound from torch.cuda whose name was used before migration and is not used after it
goes; an alias still in use stays (and keeps its finding).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

import libcst as cst

from accelport.migrate.codemods import fail, parse, stmt_edit
from accelport.migrate.codemods.amp import AMP_MODULE, PORTABLE_NAMES
from accelport.migrate.context import FileContext
from accelport.migrate.edits import Edit
from accelport.migrate.source import Site, SourceIndex, iter_statements
from accelport.source.names import lookup_api


def _moved_names(statement: ast.Import | ast.ImportFrom) -> tuple[str, set[str]] | None:
    """(new module, names that move there) for imports of what torch.amp offers under the same name."""
    if isinstance(statement, ast.ImportFrom):
        if statement.level or not statement.module:
            return None
        names = {a.name for a in statement.names}
        if statement.module == AMP_MODULE or statement.module.startswith(AMP_MODULE + "."):
            moving = names & PORTABLE_NAMES
            return ("torch.amp", moving) if moving else None
        if statement.module == "torch.cuda" and "amp" in names:
            return "torch", {"amp"}
        return None
    moving = {a.name for a in statement.names if a.name == AMP_MODULE and a.asname}
    return ("torch.amp", moving) if moving else None


def import_edits(sites: Iterable[Site], ctx: FileContext) -> list[Edit]:
    """One edit per import statement: what exists in torch.amp is imported from there."""
    by_statement: dict[int, tuple[ast.stmt, Site]] = {}
    for site in sites:
        statement = site.parent
        if isinstance(statement, ast.Import | ast.ImportFrom):
            by_statement.setdefault(id(statement), (statement, site))
    edits = []
    for statement, site in by_statement.values():
        moved = _moved_names(statement)
        if moved is None:
            continue
        target, moving = moved

        def move(line: cst.SimpleStatementLine, target: str = target, moving: set[str] = moving):
            node = line.body[0]
            if not isinstance(node, cst.Import | cst.ImportFrom) or isinstance(node.names, cst.ImportStar):
                fail("expected an import")
            going = [a for a in node.names if _dotted(a.name) in moving]
            staying = [a for a in node.names if _dotted(a.name) not in moving]
            going[-1] = going[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            if isinstance(node, cst.ImportFrom):
                moved_node = node.with_changes(module=parse(target), names=going)
            else:
                moved_node = node.with_changes(names=[a.with_changes(name=parse(target)) for a in going])
            if not staying:
                return line.with_changes(body=[moved_node])
            staying[-1] = staying[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            # The names that stay keep the original line (and its comment); the moved ones follow.
            kept = line.with_changes(body=[node.with_changes(names=staying)])
            return [kept, cst.SimpleStatementLine(body=[moved_node])]

        edit = stmt_edit(site, statement, move)
        if edit is not None:
            edits.append(edit)
    return edits


def _dotted(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return node.value


def _is_cuda_import(qualname: str) -> bool:
    found = lookup_api(qualname)
    return found is not None and found[0].startswith("torch.cuda")


_CUDA_IMPORT_LINE = re.compile(r"^[ \t]*(?:from[ \t]+torch\.cuda\b|import[ \t]+torch\.cuda\b|from[ \t]+torch[ \t]+import\b.*\bcuda\b)", re.M)


def _mentions(text: str, name: str, outside: tuple[int, int]) -> bool:
    """Does `name` appear as a word in `text` outside the span `outside`? Over-approximates uses
    (a mention in a comment counts), which errs on the side of keeping an import."""
    for match in re.finditer(rf"(?<![\w.]){re.escape(name)}\b", text):
        if not outside[0] <= match.start() < outside[1]:
            return True
    return False


def unused_import_edits(before: str, after_text: str, path: str = "<source>") -> list[Edit]:
    """Remove torch.cuda imports whose names the rewrites have stopped using."""
    # Every line the pattern matches holds "cuda"; most rewritten files hold none, and the
    # line-anchored search tries every position of the text.
    if "cuda" not in after_text or _CUDA_IMPORT_LINE.search(after_text) is None:
        return []
    lines = {after_text.count("\n", 0, m.start()) + 1 for m in _CUDA_IMPORT_LINE.finditer(after_text)}
    from accelport.migrate.engine import partial_tree

    after = SourceIndex.from_tree(after_text, partial_tree(after_text, path, lines))
    edits = []
    for node in iter_statements(after.tree):
        if not isinstance(node, ast.Import | ast.ImportFrom) or node.lineno not in lines:
            continue
        if isinstance(node, ast.ImportFrom) and (node.level or not node.module):
            continue
        span = (after.start(node), after.end(node))
        drop = set()
        for alias in node.names:
            if isinstance(node, ast.Import):
                if not alias.asname:
                    continue  # `import torch.cuda` binds `torch`
                qualname, bound = alias.name, alias.asname
            else:
                qualname, bound = f"{node.module}.{alias.name}", alias.asname or alias.name
            if not _is_cuda_import(qualname) or _mentions(after_text, bound, span):
                continue
            if _mentions(before, bound, _import_span(before, node, after)):
                drop.add(bound)
        if drop:
            edit = _removal(after, node, drop)
            if edit is not None:
                edits.append(edit)
    return edits


def _import_span(before: str, node: ast.stmt, after: SourceIndex) -> tuple[int, int]:
    """Where the same import statement sits in the text before the rewrites."""
    text = after.text_of(node)
    start = before.find(text)
    return (start, start + len(text)) if start >= 0 else (0, 0)


def _removal(source: SourceIndex, statement: ast.Import | ast.ImportFrom, drop: set[str]) -> Edit | None:
    parent = source.statement_parent(statement)
    siblings = next((v for _f, v in ast.iter_fields(parent) if isinstance(v, list) and any(s is statement for s in v)), [])
    keep_pass = len(siblings) == 1

    def remove(line: cst.SimpleStatementLine):
        node = line.body[0]
        if not isinstance(node, cst.Import | cst.ImportFrom) or isinstance(node.names, cst.ImportStar):
            fail("expected an import")
        names = [a for a in node.names if _bound(a) not in drop]
        if names:
            names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return line.with_changes(body=[node.with_changes(names=names)])
        if keep_pass:
            return line.with_changes(body=[cst.Pass()])
        return []

    site = Site(finding=None, node=statement, parents=source.parent_chain(statement), source=source)  # type: ignore[arg-type]
    return stmt_edit(site, statement, remove)


def _bound(alias: cst.ImportAlias) -> str:
    if alias.asname is not None:
        return alias.asname.name.value
    name = alias.name
    while isinstance(name, cst.Attribute):
        name = name.value
    return name.value

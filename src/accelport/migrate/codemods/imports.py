"""Imports: `from torch.cuda.amp import X` → `from torch.amp import X`; CUDA imports left unused are removed.

Findings reported at an import alias are grouped per import statement (one edit each).
Removal is decided after the other rewrites, from the rewritten code itself: an alias
bound from torch.cuda whose name was used before migration and is not used after it
goes; an alias still in use stays (and keeps its finding).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

import libcst as cst

from accelport.inventory.python.context import lookup_api
from accelport.migrate.codemods import fail, parse, stmt_edit
from accelport.migrate.codemods.amp import AMP_MODULE, PORTABLE_NAMES
from accelport.migrate.context import FileContext
from accelport.migrate.edits import Edit
from accelport.migrate.source import Site, SourceIndex


def _moved_module(statement: ast.Import | ast.ImportFrom) -> str | None:
    """Where this import goes when all it imports exists in torch.amp under the same name."""
    if isinstance(statement, ast.ImportFrom):
        if statement.level or not statement.module:
            return None
        names = {a.name for a in statement.names}
        if statement.module == AMP_MODULE or statement.module.startswith(AMP_MODULE + "."):
            return "torch.amp" if names <= PORTABLE_NAMES else None
        if statement.module == "torch.cuda" and names == {"amp"}:
            return "torch"
        return None
    if all(a.name == AMP_MODULE and a.asname for a in statement.names):
        return "torch.amp"
    return None


def import_edits(sites: Iterable[Site], ctx: FileContext) -> list[Edit]:
    """One edit per import statement whose findings can move to torch.amp."""
    by_statement: dict[int, tuple[ast.stmt, Site]] = {}
    for site in sites:
        statement = site.parent
        if isinstance(statement, ast.Import | ast.ImportFrom):
            by_statement.setdefault(id(statement), (statement, site))
    edits = []
    for statement, site in by_statement.values():
        target = _moved_module(statement)
        if target is None:
            continue

        def move(line: cst.SimpleStatementLine, target: str = target) -> cst.SimpleStatementLine:
            node = line.body[0]
            if isinstance(node, cst.ImportFrom):
                return line.with_changes(body=[node.with_changes(module=parse(target))])
            if isinstance(node, cst.Import):
                names = [a.with_changes(name=parse(target)) for a in node.names]
                return line.with_changes(body=[node.with_changes(names=names)])
            fail("expected an import")

        edit = stmt_edit(site, statement, move)
        if edit is not None:
            edits.append(edit)
    return edits


def _loaded_names(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _is_cuda_import(qualname: str) -> bool:
    found = lookup_api(qualname)
    return found is not None and found[0].startswith("torch.cuda")


def unused_import_edits(before: ast.Module, after: SourceIndex) -> list[Edit]:
    """Remove torch.cuda imports whose names the rewrites have stopped using."""
    used_before = _loaded_names(before)
    used_after = _loaded_names(after.tree)
    edits = []
    for node in ast.walk(after.tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.ImportFrom) and (node.level or not node.module):
            continue
        drop = set()
        for alias in node.names:
            if isinstance(node, ast.Import):
                if not alias.asname:
                    continue  # `import torch.cuda` binds `torch`
                qualname, bound = alias.name, alias.asname
            else:
                qualname, bound = f"{node.module}.{alias.name}", alias.asname or alias.name
            if _is_cuda_import(qualname) and bound in used_before and bound not in used_after:
                drop.add(bound)
        if not drop:
            continue
        edit = _removal(after, node, drop)
        if edit is not None:
            edits.append(edit)
    return edits


def _removal(source: SourceIndex, statement: ast.Import | ast.ImportFrom, drop: set[str]) -> Edit | None:
    parent = source.parents.get(id(statement))
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

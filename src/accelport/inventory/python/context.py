"""Per-file state of the Python scan: import aliases, name resolution, and how findings are recorded."""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from typing import Any

from accelport import knowledge
from accelport.findings import BackendStatus, Finding, Location
from accelport.inventory.base import SourceFile, backend_statuses, make_finding

Rule = Callable[["PyContext", Any], None]


def package_statuses(entry: Mapping[str, Any]) -> dict[str, BackendStatus]:
    return _package_statuses(entry["module"])


@knowledge.derived_cache
def _package_statuses(module: str) -> dict[str, BackendStatus]:
    # One shared (never mutated) dict per package: findings pickle it once per batch.
    entry = knowledge.packages()[module]
    statuses = {}
    alternatives = entry.get("alternatives", {})
    unsupported = set(entry.get("unsupported", ()))
    for key in knowledge.vendors():
        if key == "cuda":
            statuses[key] = BackendStatus.OK
        elif key in alternatives:
            statuses[key] = BackendStatus.ALTERNATIVE
        elif key in unsupported:
            statuses[key] = BackendStatus.UNSUPPORTED
        elif entry.get("portable"):
            statuses[key] = BackendStatus.PORTABLE
        else:
            statuses[key] = BackendStatus.UNKNOWN
    return statuses


def api_statuses(rule_id: str, entry: Mapping[str, Any] | None) -> dict[str, BackendStatus]:
    """Per-vendor status of a torch API finding: ok where torch.cuda is reused, else by the rule's fixability."""
    return _api_statuses(rule_id, (entry or {}).get("symbol"))


@knowledge.derived_cache
def _api_statuses(rule_id: str, symbol: str | None) -> dict[str, BackendStatus]:
    # One shared (never mutated) dict per rule and API: findings pickle it once per batch.
    entry = knowledge.torch_api()[symbol] if symbol else None
    rule = knowledge.rules()[rule_id]
    others = BackendStatus.PORTABLE if rule.autofix or (entry or {}).get("replacement") else BackendStatus.UNKNOWN
    return backend_statuses(others=others, overrides=(entry or {}).get("backends"))


class PyContext:
    """What rules see while one Python file (or notebook cell) is walked."""

    def __init__(self, source: SourceFile, lines: list[str], cell: int | None = None) -> None:
        self.source = source
        self.lines = lines
        self.cell = cell
        self.aliases: dict[str, str] = {}
        self.findings: list[Finding] = []
        self.consumed: set[int] = set()  # id() of string nodes already reported in a device position
        self.strings: list[ast.Constant] = []  # device-like strings, judged after the walk
        self._seen: set[tuple[str, int, int]] = set()
        # Parent links live here, not on the nodes, so a tree has no reference
        # cycles and is freed as soon as its file is done.
        self.parents: dict[int, ast.AST] = {}

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self.parents.get(id(node))

    # ----------------------------------------------------------------- resolution

    def qualname(self, node: ast.AST) -> str | None:
        """`tc.synchronize` -> `torch.cuda.synchronize` when `tc` was bound by an import; else None."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        base = self.aliases.get(node.id)
        if base is None:
            return None
        parts.append(base)
        return ".".join(reversed(parts))

    def bind(self, name: str, qualname: str) -> None:
        self.aliases[name] = qualname

    # ----------------------------------------------------------------- reporting

    def location(self, node: ast.AST) -> Location:
        line = node.lineno
        end_line = getattr(node, "end_lineno", None) or line
        return Location(
            path=self.source.display,
            line=line,
            column=self._column(line, node.col_offset),
            end_line=end_line,
            end_column=self._column(end_line, getattr(node, "end_col_offset", None) or node.col_offset),
            cell=self.cell,
        )

    def _column(self, line: int, byte_offset: int) -> int:
        """1-based character column from the AST's UTF-8 byte offset."""
        if 1 <= line <= len(self.lines):
            text = self.lines[line - 1]
            if not text.isascii():
                return len(text.encode("utf-8")[:byte_offset].decode("utf-8", "replace")) + 1
        return byte_offset + 1

    def snippet(self, line: int) -> str:
        if not 1 <= line <= len(self.lines):
            return ""
        text = self.lines[line - 1].strip()
        return text if len(text) <= 200 else text[:199] + "…"

    def report(
        self,
        rule_id: str,
        node: ast.AST,
        symbol: str,
        *,
        message: str | None = None,
        replacement: str | None = None,
        backends: Mapping[str, BackendStatus] | None = None,
        effort: str | None = None,
        entry: Mapping[str, Any] | None = None,
    ) -> None:
        key = (rule_id, node.lineno, node.col_offset)
        if key in self._seen:
            return
        self._seen.add(key)
        self.consumed.add(id(node))
        if backends is None:
            backends = api_statuses(rule_id, entry)
        finding = make_finding(
            rule_id,
            symbol=symbol,
            location=self.location(node),
            snippet=self.snippet(node.lineno),
            message=message,
            replacement=replacement,
            backends=backends,
            effort=effort,
            # A catalogue entry may narrow its rule's autofix (no portable form for this symbol).
            autofix=(entry or {}).get("autofix"),
        )
        if self.source.admit(finding):
            self.findings.append(finding)

    def consume(self, node: ast.AST) -> None:
        self.consumed.add(id(node))

"""One Python file as migrate sees it: its text, offsets, stdlib AST with parent links, finding → node lookup.

The stdlib AST is cheap and has exact spans; it decides *where* a rewrite goes. libcst
only ever parses the small fragments being rewritten (see edits.py).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import cached_property

from accelport.findings import Finding

_STATEMENT_END = re.compile(r"[ \t]*(?:#[^\r\n]*)?(?:\r\n|\n|\r)?\Z")


@dataclass
class Site:
    """A finding and the AST node it was reported at, with that node's ancestors (nearest first)."""

    finding: Finding
    node: ast.AST
    parents: list[ast.AST]
    source: SourceIndex

    @property
    def parent(self) -> ast.AST | None:
        return self.parents[0] if self.parents else None

    @property
    def rule_id(self) -> str:
        return self.finding.rule_id

    @property
    def symbol(self) -> str:
        return self.finding.symbol

    @cached_property
    def statement(self) -> ast.stmt:
        """The innermost statement holding the node."""
        for node in [self.node, *self.parents]:
            if isinstance(node, ast.stmt):
                return node
        raise LookupError("a finding outside any statement")

    @cached_property
    def function(self) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The innermost function whose *body* holds the node (its defaults and decorators run outside it)."""
        child: ast.AST = self.node
        for node in self.parents:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(child is s for s in node.body):
                return node
            child = node
        return None

    @cached_property
    def in_fstring(self) -> ast.JoinedStr | None:
        for node in self.parents:
            if isinstance(node, ast.JoinedStr):
                return node
        return None

    @property
    def quote(self) -> str:
        """The quote character new string literals must use here (not the enclosing f-string's)."""
        fstring = self.in_fstring
        if fstring is None:
            return '"'
        opener = self.source.text_of(fstring).lstrip("rRbBfFuU")[:1]
        return "'" if opener == '"' else '"'

    def text(self, node: ast.AST | None = None) -> str:
        return self.source.text_of(node if node is not None else self.node)


@dataclass
class SourceIndex:
    """Text, line offsets and the parsed module of one file."""

    text: str
    tree: ast.Module
    line_starts: list[int] = field(default_factory=list)
    parents: dict[int, ast.AST] = field(default_factory=dict)
    _spans: dict[tuple[int, int, int, int], list[ast.AST]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str, filename: str = "<source>") -> SourceIndex:
        tree = ast.parse(text, filename=filename)
        starts = [0]
        for match in re.finditer(r"\r\n|\n|\r", text):
            starts.append(match.end())
        index = cls(text=text, tree=tree, line_starts=starts)
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                index.parents[id(child)] = node
            if hasattr(node, "end_col_offset") and node.end_col_offset is not None:
                key = (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)
                index._spans.setdefault(key, []).append(node)
        return index

    # ----------------------------------------------------------------- positions

    def line(self, number: int) -> str:
        """Physical line `number` (1-based) without its line break."""
        start = self.line_starts[number - 1]
        end = self.line_starts[number] if number < len(self.line_starts) else len(self.text)
        return self.text[start:end].rstrip("\r\n")

    def offset(self, line: int, byte_col: int) -> int:
        """Text offset of an AST position (1-based line, UTF-8 byte column)."""
        start = self.line_starts[line - 1]
        text = self.line(line)
        if text.isascii():
            return start + byte_col
        return start + len(text.encode("utf-8")[:byte_col].decode("utf-8", "replace"))

    def start(self, node: ast.AST) -> int:
        return self.offset(node.lineno, node.col_offset)

    def end(self, node: ast.AST) -> int:
        return self.offset(node.end_lineno, node.end_col_offset)

    def text_of(self, node: ast.AST) -> str:
        return self.text[self.start(node) : self.end(node)]

    def line_span(self, first: int, last: int) -> tuple[int, int]:
        """Offsets covering whole physical lines first..last, line break included."""
        end = self.line_starts[last] if last < len(self.line_starts) else len(self.text)
        return self.line_starts[first - 1], end

    def indentation(self, line: int) -> str:
        text = self.line(line)
        return text[: len(text) - len(text.lstrip(" \t"))]

    # ----------------------------------------------------------------- nodes

    def parent_chain(self, node: ast.AST) -> list[ast.AST]:
        chain = []
        current = self.parents.get(id(node))
        while current is not None:
            chain.append(current)
            current = self.parents.get(id(current))
        return chain

    def node_for(self, finding: Finding) -> ast.AST | None:
        """The node a finding was reported at, found by its exact span."""
        loc = finding.location
        if not (1 <= loc.line <= len(self.line_starts) and 1 <= loc.end_line <= len(self.line_starts)):
            return None
        key = (loc.line, self._byte_col(loc.line, loc.column), loc.end_line, self._byte_col(loc.end_line, loc.end_column))
        nodes = self._spans.get(key)
        if not nodes:
            return None
        # An expression statement shares its value's span; the expression is what rules report.
        for node in nodes:
            if not isinstance(node, ast.stmt):
                return node
        return nodes[0]

    def site(self, finding: Finding) -> Site | None:
        node = self.node_for(finding)
        if node is None:
            return None
        return Site(finding, node, self.parent_chain(node), self)

    def _byte_col(self, line: int, column: int) -> int:
        text = self.line(line)
        if text.isascii():
            return column - 1
        return len(text[: column - 1].encode("utf-8"))

    def alone_on_its_lines(self, statement: ast.stmt) -> bool:
        """Nothing else on the statement's lines: no `;` neighbour, no compound header before it."""
        before = self.text[self.line_starts[statement.lineno - 1] : self.start(statement)]
        if before.strip(" \t"):
            return False
        rest_start = self.end(statement)
        rest_end = self.line_span(statement.end_lineno, statement.end_lineno)[1]
        return _STATEMENT_END.match(self.text[rest_start:rest_end]) is not None

"""One Python file as migrate sees it: its text, offsets, stdlib AST with parent links, finding → node lookup.

The stdlib AST is cheap and has exact spans; it decides *where* a rewrite goes. libcst
only ever parses the small fragments being rewritten (see edits.py).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import cached_property
from itertools import accumulate

from accelport.findings import Finding

_LINE_BREAK = re.compile(r"\r\n|\n|\r")
_STATEMENT_END = re.compile(r"[ \t]*(?:#[^\r\n]*)?(?:\r\n|\n|\r)?\Z")


def _first(statement: ast.stmt) -> int:
    return min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", ()))])


def _span(node: ast.AST) -> tuple[int, int, int, int] | None:
    end = getattr(node, "end_col_offset", None)
    if end is None:
        return None
    decorators = getattr(node, "decorator_list", None)
    if decorators:  # a decorated def or class starts at its first decorator
        return (decorators[0].lineno, decorators[0].col_offset, node.end_lineno, end)
    return (node.lineno, node.col_offset, node.end_lineno, end)


def _holds(node: ast.AST, span: tuple[int, int, int, int] | None, target: tuple[int, int, int, int]) -> bool:
    if span is not None:
        return span[:2] <= target[:2] and target[2:] <= span[2:]
    # arguments, withitem, comprehension, match_case have no position: look at what they hold.
    return any(_holds(child, _span(child), target) for child in ast.iter_child_nodes(node))


def _statement_links(tree: ast.AST):
    """(parent, statement) for every statement, without visiting expressions."""
    stack = [tree]
    while stack:
        parent = stack.pop()
        children = []
        for name in ("body", "orelse", "finalbody"):
            value = getattr(parent, name, None)
            if isinstance(value, list):
                children.extend(value)
        for holder in (*getattr(parent, "handlers", ()), *getattr(parent, "cases", ())):
            for child in holder.body:
                yield holder, child
                stack.append(child)
        for child in children:
            if isinstance(child, ast.stmt):
                yield parent, child
                stack.append(child)


def iter_statements(tree: ast.AST):
    """Every statement, depth first, without visiting expressions (much cheaper than ast.walk)."""
    stack = list(reversed(getattr(tree, "body", [])))
    while stack:
        statement = stack.pop()
        yield statement
        nested = []
        for name in ("body", "orelse", "finalbody"):
            value = getattr(statement, name, None)
            if isinstance(value, list):
                nested.extend(value)
        for handler in getattr(statement, "handlers", ()):
            nested.extend(handler.body)
        for case in getattr(statement, "cases", ()):
            nested.extend(case.body)
        stack.extend(reversed(nested))


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
        """The innermost function whose *body* holds the node (its defaults and decorators run outside it).

        None inside a class body: the function's locals are not what a class body's names resolve to.
        """
        child: ast.AST = self.node
        for node in self.parents:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(child is s for s in node.body):
                return node
            if isinstance(node, ast.ClassDef) and any(child is s for s in node.body):
                return None
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
        """The quote new string literals use here: the file's usual one, never the enclosing f-string's."""
        fstring = self.in_fstring
        if fstring is None:
            return self.source.quote
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
    quote: str = '"'  # the file's usual string quote (FileContext sets it)
    parents: dict[int, ast.AST] = field(default_factory=dict)
    _strings_by_statement: dict[int, set[int]] = field(default_factory=dict, repr=False)

    @classmethod
    def parse(cls, text: str, filename: str = "<source>") -> SourceIndex:
        return cls.from_tree(text, ast.parse(text, filename=filename))

    @classmethod
    def from_tree(cls, text: str, tree: ast.Module) -> SourceIndex:
        """Index a module already parsed from `text`.

        Nothing is walked up front (walking every node of a large file costs more than
        parsing it): a node is found by descending from the module through the children
        whose spans hold it, and the parents met on the way are remembered.
        """
        if "\r" in text:
            starts = [0]
            for match in _LINE_BREAK.finditer(text):
                starts.append(match.end())
        else:  # the common case: \n only, where lengths of the split lines give the starts
            starts = [0, *accumulate(map((1).__add__, map(len, text.split("\n")[:-1])))]
        return cls(text=text, tree=tree, line_starts=starts)

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

    def line_ends_in_string(self, line: int) -> bool:
        """Does physical line `line` end inside a string literal (a triple-quoted one running on)?"""
        for statement in self._statements_covering(line):
            if line in self._string_lines(statement):
                return True
        return False

    def _string_lines(self, statement: ast.stmt) -> set[int]:
        """The lines of a top-level statement that end inside a string (walked once, however many markers it gets)."""
        found = self._strings_by_statement.get(id(statement))
        if found is None:
            found = set()
            if statement.end_lineno != statement.lineno:
                for node in ast.walk(statement):
                    if (
                        isinstance(node, ast.JoinedStr | ast.Constant)
                        and isinstance(getattr(node, "value", ""), str | bytes | list)
                        and node.lineno < node.end_lineno
                    ):
                        found.update(range(node.lineno, node.end_lineno))
            self._strings_by_statement[id(statement)] = found
        return found

    def _statements_covering(self, line: int) -> list[ast.stmt]:
        """The outermost statements whose lines include `line`."""
        return [s for s in self.tree.body if _first(s) <= line <= (s.end_lineno or s.lineno)]

    def statement_parent(self, statement: ast.stmt) -> ast.AST:
        """The node whose body holds `statement` (statements only are walked)."""
        if id(statement) not in self.parents:
            for parent, child in _statement_links(self.tree):
                self.parents[id(child)] = parent
        return self.parents[id(statement)]

    def parent_chain(self, node: ast.AST) -> list[ast.AST]:
        chain = []
        current = self.parents.get(id(node))
        while current is not None:
            chain.append(current)
            current = self.parents.get(id(current))
        return chain

    def node_for(self, finding: Finding) -> ast.AST | None:
        """The node a finding was reported at, found by its exact span (parents recorded on the way)."""
        loc = finding.location
        if not (1 <= loc.line <= len(self.line_starts) and 1 <= loc.end_line <= len(self.line_starts)):
            return None
        target = (loc.line, self._byte_col(loc.line, loc.column), loc.end_line, self._byte_col(loc.end_line, loc.end_column))
        return self._find(self.tree, target)

    def _find(self, node: ast.AST, target: tuple[int, int, int, int]) -> ast.AST | None:
        for child in ast.iter_child_nodes(node):
            span = _span(child)
            if span == target and not isinstance(child, ast.stmt):
                # An expression statement shares its value's span; rules report the expression.
                self.parents[id(child)] = node
                return child
            if _holds(child, span, target):
                # Before Python 3.12 the pieces of an f-string all carry the whole f-string's
                # span, so more than one child may seem to hold the target: try each.
                found = self._find(child, target)
                if found is not None:
                    self.parents[id(child)] = node
                    return found
        return None

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

"""Apply codemods to a file: each edit parses only its own fragment with libcst, then text is spliced back.

A file with findings is not parsed whole by libcst. Each edit covers one expression
(its exact AST span) or one simple statement (its whole lines); libcst parses that
fragment, the codemod transforms the CST, and the generated code replaces the span.
Everything outside the spans is never touched, so comments, strings and formatting
elsewhere survive byte for byte. Edits nest (a `.cuda()` inside a `torch.device(...)`
inside a call): inner edits are applied first and the outer codemod sees their result.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import libcst as cst
from libcst._nodes.internal import CodegenState

from accelport.migrate.source import Site

log = logging.getLogger(__name__)

ExprTransform = Callable[[cst.BaseExpression], cst.BaseExpression]
# A statement transform returns the statements that replace the line; an empty list removes it.
StmtTransform = Callable[[cst.SimpleStatementLine], "cst.BaseStatement | Sequence[cst.BaseStatement]"]

_EMPTY = cst.Module(body=[])


class EditFailed(Exception):
    """A codemod cannot handle the form it was given; the finding is left for a marker."""


@dataclass(eq=False)
class Edit:
    """Replace text[start:end] (offsets in the original file) with what `produce` makes of it."""

    start: int
    end: int
    kind: str  # "expr" | "stmt" | "text" (transform(fragment, layout) -> str) | "replace" | "insert"
    transform: Any = None
    text: str = ""  # for inserts
    site: Site | None = None
    indent: str = ""  # stmt: indentation of the statement's first line
    wraps: bool = False  # on the same span as another edit, this one goes outside (it wraps the value whole)
    # stmt: the first line this edit writes (a guard: `if torch.accelerator.is_available():`). When the
    # edit just before it wrote the same line, this one drops it and joins that block: no doubled guard.
    header: str = ""
    seq: int = 0
    before: str = ""
    after: str = ""
    error: str | None = None
    children: list[Edit] = field(default_factory=list)

    @property
    def zero_width(self) -> bool:
        return self.start == self.end


@lru_cache(maxsize=8192)
def parse_expression(text: str) -> cst.BaseExpression:
    """libcst's parse, cached: CST nodes are immutable, and generated snippets repeat a lot."""
    return cst.parse_expression(text)


@lru_cache(maxsize=4096)
def expression(node_text: str) -> cst.BaseExpression:
    """Parse an expression fragment (parenthesised for parsing, so multi-line spans work)."""
    node = cst.parse_expression(f"({node_text})")
    return node.with_changes(lpar=node.lpar[1:], rpar=node.rpar[:-1])


@lru_cache(maxsize=4096)
def parse_module(text: str) -> cst.Module:
    """libcst's module parse, cached like `parse_expression` (statements repeat across a tree)."""
    return cst.parse_module(text)


class _QuickState(CodegenState):
    """libcst's codegen state without the position bookkeeping nobody reads here.

    `CodegenState.record_syntactic_position` is a generator-based context manager entered
    for nearly every node; it does nothing outside libcst's position provider, yet it was
    half the time of generating code. A shared no-op context does the same nothing.
    """

    def record_syntactic_position(self, node, *, start_node=None, end_node=None):
        return _NO_POSITION


_NO_POSITION = contextlib.nullcontext()


def _generate(node: cst.CSTNode, indent: str, newline: str) -> str:
    state = _QuickState(default_indent=indent, default_newline=newline)
    node._codegen(state)
    return "".join(state.tokens)


def _quick_codegen_works() -> bool:
    """Does the quick state give libcst's own output (libcst's private codegen API may change)?"""
    sample = cst.parse_module("import torch\nif x:\n    y = torch.cuda.Event(enable_timing=True)  # c\nz = [a, (b)]\n")
    try:
        return _generate(sample, sample.default_indent, sample.default_newline) == sample.code
    except Exception:  # any failure means: use the public API
        return False


_QUICK = _quick_codegen_works()


def code(node: cst.CSTNode) -> str:
    if _QUICK:
        return _generate(node, _EMPTY.default_indent, _EMPTY.default_newline)
    return _EMPTY.code_for_node(node)


def module_code(module: cst.Module) -> str:
    """`module.code`, through the quick state when it works."""
    if _QUICK:
        return _generate(module, module.default_indent, module.default_newline)
    return module.code


@dataclass
class Layout:
    """The file's conventions that generated code must follow."""

    indent_unit: str = "    "
    newline: str = "\n"


def _produce(edit: Edit, fragment: str, layout: Layout) -> str:
    if edit.kind == "insert":
        return edit.text
    if edit.kind == "replace":
        # The old fragment is dropped whole; only the generated code needs checking.
        parse_expression(edit.text)
        return edit.text
    if edit.kind == "expr":
        result = edit.transform(expression(fragment))
        return code(result)
    if edit.kind == "text":
        # Rewritten as text (a guard around a statement, a renamed call): the rescan checks it parses.
        return edit.transform(fragment, layout)
    return _produce_statement(edit, fragment, layout)


def _produce_statement(edit: Edit, fragment: str, layout: Layout) -> str:
    if edit.indent:
        # Keep the statement at its own indentation: parse it as the body of a dummy block.
        header = "if True:" + layout.newline
        module = parse_module(header + fragment)
        wrapper = module.body[0]
        if not isinstance(wrapper, cst.If) or not isinstance(wrapper.body, cst.IndentedBlock):
            raise EditFailed("statement fragment did not parse as one statement")
        block = wrapper.body
        statements = block.body
    else:
        module = parse_module(fragment)
        statements = module.body
        block = wrapper = None
    if len(statements) != 1 or not isinstance(statements[0], cst.SimpleStatementLine):
        raise EditFailed("statement fragment is not one simple statement")
    replaced = edit.transform(statements[0])
    new_body = [replaced] if isinstance(replaced, cst.CSTNode) else list(replaced)
    if not new_body:
        return ""
    module = module.with_changes(default_indent=layout.indent_unit, default_newline=layout.newline)
    if wrapper is not None:
        indent = block.indent if block.indent is not None else edit.indent
        module = module.with_changes(body=[wrapper.with_changes(body=block.with_changes(body=new_body, indent=indent))])
        text = module_code(module)
        if not text.startswith(header):
            raise EditFailed("statement wrapper lost its header")
        return text[len(header) :]
    return module_code(module.with_changes(body=new_body))


def _render(edit: Edit, original: str, layout: Layout) -> str:
    fragment = original[edit.start : edit.end]
    for child in sorted(edit.children, key=lambda e: (e.start, e.seq), reverse=True):
        text = _render(child, original, layout)
        fragment = fragment[: child.start - edit.start] + text + fragment[child.end - edit.start :]
    edit.before = original[edit.start : edit.end]
    try:
        result = _produce(edit, fragment, layout)
    except (EditFailed, cst.ParserSyntaxError, ValueError, TypeError, AttributeError, IndexError) as exc:
        edit.error = f"{type(exc).__name__}: {exc}".splitlines()[0]
        log.debug("edit at %d failed: %s", edit.start, edit.error)
        return fragment
    edit.after = result
    return result


def _nest(edits: Sequence[Edit]) -> tuple[list[Edit], list[Edit]]:
    """Arrange span edits into trees by containment; partial overlaps are refused."""
    roots: list[Edit] = []
    refused: list[Edit] = []
    stack: list[Edit] = []
    # Same span: an edit that wraps its value goes outside; otherwise the later edit (higher seq)
    # wraps the earlier one. The outer one sorts first.
    for edit in sorted(edits, key=lambda e: (e.start, -e.end, not e.wraps, -e.seq)):
        while stack and stack[-1].end <= edit.start:
            stack.pop()
        if stack:
            top = stack[-1]
            if edit.end > top.end:
                edit.error = "overlaps another rewrite"
                refused.append(edit)
                continue
            top.children.append(edit)
        else:
            roots.append(edit)
        stack.append(edit)
    return roots, refused


@dataclass(frozen=True, slots=True)
class Piece:
    """A top-level replacement made in one round: text[start:end] of the input became `text`."""

    start: int
    end: int
    text: str


def apply_edits(original: str, edits: Sequence[Edit], layout: Layout) -> tuple[str, list[Piece]]:
    """The file with every edit applied, and the top-level replacements made.

    Failed edits leave their text as it was and record why in `edit.error`.
    """
    for seq, edit in enumerate(edits):
        edit.seq = seq
        edit.children = []
    spans = [e for e in edits if not e.zero_width]
    inserts = [e for e in edits if e.zero_width]
    roots, _refused = _nest(spans)
    # (start, order, seq, end, text): at one offset, inserts come before a rewritten span.
    pieces: list[tuple[int, int, int, int, str]] = []
    for root in roots:
        pieces.append((root.start, 1, root.seq, root.end, _render(root, original, layout)))
    for insert in inserts:
        insert.after = insert.text
        pieces.append((insert.start, 0, insert.seq, insert.start, insert.text))
    out = []
    made = []
    position = 0
    headers = {root.start: root for root in roots if root.header and root.error is None}
    previous_header = None
    for start, _order, _seq, end, text in sorted(pieces, key=lambda p: p[:3]):
        edit = headers.get(start) if start != end else None
        header_line = edit.indent + edit.header if edit is not None else None
        if header_line is not None and not text.startswith(header_line):
            header_line = None
        if header_line is not None and header_line == previous_header and start == position:
            text = text[text.index(layout.newline, len(header_line)) + len(layout.newline) :]
        previous_header = header_line
        out.append(original[position:start])
        out.append(text)
        made.append(Piece(start, end, text))
        position = end
    out.append(original[position:])
    return "".join(out), made


class LineMap:
    """Maps a line of the text after a round of edits back to the line it came from."""

    def __init__(self, before: str, pieces: Sequence[Piece]) -> None:
        self._segments = []  # (new first line, new newlines, old first line, old newlines)
        shift = 0
        for piece in sorted(pieces, key=lambda p: p.start):
            old_first = before.count("\n", 0, piece.start) + 1
            old_lines = before.count("\n", piece.start, piece.end)
            new_lines = piece.text.count("\n")
            self._segments.append((old_first + shift, new_lines, old_first, old_lines))
            shift += new_lines - old_lines

    def changed_lines(self) -> set[int]:
        """Lines of the new text inside a replacement."""
        return {line for first, count, _old, _n in self._segments for line in range(first, first + count + 1)}

    def new_line(self, old_line: int) -> int:
        """Where a line of the old text is in the new one (inside a replacement: its first line)."""
        shift = 0
        for new_first, new_lines, old_first, old_lines in self._segments:
            if old_line < old_first:
                break
            if old_line <= old_first + old_lines:
                return new_first + min(old_line - old_first, new_lines)
            shift += new_lines - old_lines
        return old_line + shift

    def old_line(self, new_line: int) -> int:
        shift = 0
        for new_first, new_lines, old_first, old_lines in self._segments:
            if new_line < new_first:
                break
            if new_line <= new_first + new_lines:
                return old_first + min(new_line - new_first, old_lines)
            shift += new_lines - old_lines
        return new_line - shift

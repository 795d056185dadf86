"""Parsing for the C/C++/CUDA scanner: the tree-sitter query, byte offsets to lines, #if branches, name helpers."""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from accelport.findings import Finding

_IDENT_TYPES = frozenset({"identifier", "type_identifier", "field_identifier", "namespace_identifier"})
_WORD = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")


_QUERY_SOURCE = """
(function_definition) @function
(call_expression arguments: (argument_list) @args) @call
(kernel_call_syntax) @launch
(gnu_asm_expression) @asm
(preproc_include path: (_) @include)
(binary_expression right: (number_literal) @number) @binary
(primitive_type) @primitive
(preproc_def name: (identifier) @define_name value: (preproc_arg) @define_value)
(init_declarator declarator: (identifier) @const_name value: (number_literal) @const_value)
(preproc_arg) @macro_body
(preproc_function_def name: (identifier) @function_macro_name)
(launch_bounds) @launch_bounds
(for_statement) @for_loop
(ERROR) @error
"""


@cache
def _language():
    import tree_sitter_cuda
    from tree_sitter import Language, Parser, Query

    language = Language(tree_sitter_cuda.language())
    return Parser(language), Query(language, _QUERY_SOURCE)


class _Positions:
    """Byte offset -> (line, column) with 1-based, character-counted columns."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.starts = [0]
        self.starts.extend(m.end() for m in re.finditer(rb"\n", data))

    def at(self, offset: int) -> tuple[int, int]:
        index = bisect_right(self.starts, offset) - 1
        start = self.starts[index]
        prefix = self.data[start:offset]
        column = len(prefix.decode("utf-8", errors="replace")) if not prefix.isascii() else len(prefix)
        return index + 1, column + 1


_CONDITION_DIRECTIVES = frozenset({"if", "ifdef", "ifndef", "elif", "elifdef", "elifndef"})
_OPEN_DIRECTIVES = frozenset({"if", "ifdef", "ifndef"})
_BRANCH_DIRECTIVES = frozenset({"elif", "elifdef", "elifndef", "else"})
_MASKED_NODES = frozenset({"comment", "string_literal", "raw_string_literal", "char_literal", "system_lib_string"})
# Variants scanned for a file whose #if branches do not parse together: branch 0, 1, ... of every group.
MAX_BRANCH_VARIANTS = 4


def _parse(data: bytes):
    from tree_sitter import QueryCursor

    parser, query = _language()
    root = parser.parse(data).root_node
    return root, QueryCursor(query).captures(root)


_MACRO_PREFIX = b"void __accelport_macro_body__(void) {\n"
_MACRO_SUFFIX = b"\n;}\n"
_CONTINUATION = re.compile(rb"\\(?=\r?\n)")


def _macro_names(captures) -> list[tuple[str, Any]]:
    """(macro name, body node) for object- and function-like #defines."""
    pairs = []
    for body in captures.get("macro_body", []):
        define = body.parent
        name = define.child_by_field_name("name") if define is not None else None
        if name is not None:
            pairs.append((name.text.decode("utf-8", errors="replace"), body))
    return pairs


def _solid(data: bytes) -> int:
    """Bytes that are not blanks or line breaks."""
    return len(data) - sum(data.count(c) for c in (b" ", b"\n", b"\t", b"\r"))


def _finding_key(finding: Finding) -> tuple:
    loc = finding.location
    return (finding.rule_id, loc.line, loc.column, finding.symbol)


def _code_mask(root) -> list[tuple[int, int]]:
    """Sorted byte spans of comments and string/char literals: tree-sitter lexes them even inside ERROR nodes."""
    spans = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type in _MASKED_NODES:
            spans.append((node.start_byte, node.end_byte))
        elif node.child_count:
            stack.extend(node.children)
    spans.sort()
    return spans


def _masked(spans: list[tuple[int, int]], offset: int) -> bool:
    index = bisect_right(spans, (offset, float("inf"))) - 1
    return index >= 0 and spans[index][0] <= offset < spans[index][1]


@dataclass
class _Group:
    """One #if ... #endif: the byte span of each branch's body, and whether it has an #else."""

    branches: list[tuple[int, int]] = field(default_factory=list)
    has_else: bool = False
    open_at: int = 0  # where the current branch's body starts


def _conditionals(data: bytes, mask: list[tuple[int, int]]) -> tuple[list[_Group], list[tuple[int, int, str]]]:
    """The file's conditional groups and its conditional directive lines (start, end, name).

    A directive is a line whose first non-blank byte is `#` outside any comment or
    string; backslash-continued lines belong to it.
    """
    groups: list[_Group] = []
    stack: list[_Group] = []
    directives: list[tuple[int, int, str]] = []
    offset = 0
    size = len(data)
    while offset < size:
        end = data.find(b"\n", offset)
        end = size if end < 0 else end
        while end < size and data[offset:end].rstrip(b"\r").endswith(b"\\"):
            nxt = data.find(b"\n", end + 1)
            end = size if nxt < 0 else nxt
        line = data[offset:end]
        stripped = line.lstrip(b" \t")
        hash_at = offset + len(line) - len(stripped)
        if stripped.startswith(b"#") and not _masked(mask, hash_at):
            match = _WORD.match(stripped.lstrip(b"# \t")) if len(stripped) > 1 else None
            name = match.group().decode("ascii") if match else ""
            line_end = min(end + 1, size)
            if name in _OPEN_DIRECTIVES:
                group = _Group(open_at=line_end)
                stack.append(group)
                groups.append(group)
                directives.append((offset, end, name))
            elif name in _BRANCH_DIRECTIVES and stack:
                group = stack[-1]
                group.branches.append((group.open_at, offset))
                group.open_at = line_end
                group.has_else = group.has_else or name == "else"
                directives.append((offset, end, name))
            elif name == "endif" and stack:
                group = stack.pop()
                group.branches.append((group.open_at, offset))
                directives.append((offset, end, name))
        offset = end + 1
    for group in stack:  # unterminated at the end of the file
        group.branches.append((group.open_at, size))
    return groups, directives


_BLANKS = bytes(0x0A if byte == 0x0A else 0x20 for byte in range(256))


def _blank(buffer: bytearray, start: int, end: int) -> None:
    """Spaces over [start, end), newlines kept: offsets, lines and columns stay those of the file."""
    end = min(end, len(buffer))
    if start < end:
        buffer[start:end] = bytes(buffer[start:end]).translate(_BLANKS)


def _branch_variants(data: bytes, groups: list[_Group], directives: list[tuple[int, int, str]]):
    """Copies of `data` taking branch k of every group (its last one, or none without #else, when it has fewer)."""
    choices = max(len(g.branches) + (0 if g.has_else else 1) for g in groups)
    for k in range(min(choices, MAX_BRANCH_VARIANTS)):
        buffer = bytearray(data)
        for start, end, _name in directives:
            _blank(buffer, start, end)
        for group in groups:
            last = len(group.branches) - (1 if group.has_else else 0)  # == len(branches): the implicit empty #else
            chosen = min(k, last)
            for index, (start, end) in enumerate(group.branches):
                if index != chosen:
                    _blank(buffer, start, end)
        yield bytes(buffer)


def _occurrences(data: bytes, words: set[str]) -> list[tuple[int, str]]:
    """(offset, word) for every whole-word occurrence, in file order (bytes.find: no per-file regex)."""
    found = []
    for word in words:
        needle = word.encode("ascii")
        at = data.find(needle)
        while at >= 0:
            end = at + len(needle)
            if (at == 0 or not _is_word_byte(data[at - 1])) and (end == len(data) or not _is_word_byte(data[end])):
                found.append((at, word))
            at = data.find(needle, end)
    found.sort()
    return found


def _is_word_byte(byte: int) -> bool:
    return byte == 95 or 48 <= byte <= 57 or 65 <= byte <= 90 or 97 <= byte <= 122


def _squash(text: bytes) -> str:
    return " ".join(text.decode("utf-8", errors="replace").split())


def _inside_quotes(text: bytes, offset: int) -> bool:
    return text[:offset].count(b'"') % 2 == 1


def _qualified_name(node) -> str:
    text = "".join(node.text.decode("utf-8", errors="replace").split())
    return text.split("<", 1)[0].lstrip(":")  # `::c10::cuda::X` names c10::cuda::X


def _declarator_name(declarator) -> str:
    node = declarator
    while node is not None and node.type not in ("identifier", "field_identifier", "qualified_identifier", "operator_name", "destructor_name"):
        inner = node.child_by_field_name("declarator")
        if inner is None:
            break
        node = inner
    if node is None:
        return "?"
    return _qualified_name(node) if node.type == "qualified_identifier" else node.text.decode("utf-8", errors="replace")


_TEMPLATE_GAPS = re.compile(r"(<) | (?=>)")  # `k< double, 8 >` -> `k<double, 8>`


def kernel_name(symbol: str) -> str:
    """The bare kernel name of a launch or definition symbol: `ns::k<T, 4>` -> `k`."""
    return symbol.split("<", 1)[0].strip().rsplit("::", 1)[-1]


def _without_comments(text: bytes) -> bytes:
    """A macro body with its `//` and `/* */` comments blanked (same length): tree-sitter leaves them in."""
    if b"/" not in text:
        return text
    out = bytearray(text)
    for match in re.finditer(rb"//[^\n]*|/\*.*?(?:\*/|$)", text, re.DOTALL):
        if not _inside_quotes(text, match.start()):
            out[match.start() : match.end()] = b" " * (match.end() - match.start())
    return bytes(out)


def _declarator_node(declarator):
    """The name node of a function definition's declarator (qualified names included)."""
    node = declarator
    while node is not None and node.type not in ("identifier", "field_identifier", "qualified_identifier", "operator_name", "destructor_name"):
        inner = node.child_by_field_name("declarator")
        if inner is None:
            return None
        node = inner
    if node is not None and node.type == "qualified_identifier":
        name = node.child_by_field_name("name")
        return name if name is not None and name.type == "identifier" else None
    return node if node is not None and node.type in ("identifier", "field_identifier") else None

"""Parse only the top-level statements that matter: those holding CUDA tokens, and the imports.

A file's other top-level statements are blanked (line count kept, so every line
and column stays where it was) before `ast.parse`. Statement starts are found
without a tokenizer, on the raw bytes: a line at column 0 that begins a name or
decorator, outside a triple-quoted string and not after a backslash continuation.
When that guess is wrong the blanked text does not parse and the caller parses the
whole file instead, so a wrong guess costs time, never findings; where the string
layout is ambiguous no guess is made at all.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator

from accelport.source import fastfind

LINE_BREAK = re.compile(r"\r\n|\r|\n")
_CONTINUATION = frozenset((b"else", b"elif", b"except", b"finally"))
_DEFINITION = frozenset((b"def", b"async", b"class"))
# The first word of a line at column 0 (a decorator keeps its dotted name: `@torch.no_grad`),
# after its line break: a pattern that starts with a literal lets the regex engine jump
# from one line break to the next, where `^` with re.MULTILINE tries every position.
_COLUMN_ZERO = re.compile(rb"\n([A-Za-z_@][\w.]*)")
_FIRST_WORD = re.compile(rb"[A-Za-z_@][\w.]*")


def split_lines(text: str) -> list[str]:
    """Lines as the Python parser counts them (\\n, \\r\\n and \\r only; str.splitlines also splits on \\f)."""
    if "\r" not in text:
        return text.split("\n")  # the common case, several times faster than the regex
    return LINE_BREAK.split(text)


def _triple_quotes(data: bytes) -> list[int]:
    """Offsets of every triple quote of either kind, in order (`bytes.find` beats a regex alternation)."""
    found: list[int] = []
    for quote in (b'"""', b"'''"):
        at = data.find(quote)
        while at >= 0:
            found.append(at)
            at = data.find(quote, at + 1)
    found.sort()
    return found


def string_edges(data: bytes) -> list[int] | None:
    """Byte offsets where triple-quoted strings open and close, alternating; None when unsure.

    The compiled helper (source/fastfind.py) when there is one, else `string_edges_python`.
    """
    helper = fastfind.native()
    if helper is not None:
        edges = helper.string_edges(data)
        if edges is not fastfind.OVERFLOW:
            return edges
    return string_edges_python(data)


def string_edges_python(data: bytes) -> list[int] | None:
    """The reference for `string_edges`.

    Unsure means a triple quote that might sit inside a one-line string (an odd number
    of quote characters before it on its line): then no line may be treated as inside
    a string. A triple quote after a plain `#` comment start is ignored.
    """
    edges: list[int] = []
    state: bytes | None = None
    resume = 0  # a closing quote ends at this offset: later matches start here
    for at in _triple_quotes(data):
        if at < resume:
            continue  # overlaps the quote just taken (`""""` holds two)
        quote = data[at : at + 3]
        if state is None:
            line_start = data.rfind(b"\n", 0, at) + 1
            before = data[line_start:at]
            hash_at = before.find(b"#")
            if hash_at >= 0 and b'"' not in before[:hash_at] and b"'" not in before[:hash_at]:
                continue  # in a comment
            if before.count(b'"') % 2 or before.count(b"'") % 2:
                return None  # maybe inside a one-line string: do not guess
            state = quote
            edges.append(at)
            resume = at + 3
        elif quote == state:
            state = None
            edges.append(at + 3)
            resume = at + 3
    if state is not None:
        edges.append(len(data))  # unterminated: open to the end
    return edges


class LazyEdges:
    """`string_edges(data)`, computed on first use: most files never need it."""

    __slots__ = ("_done", "_edges", "data")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self._edges: list[int] | None = None
        self._done = False

    def get(self) -> list[int] | None:
        if not self._done:
            self._edges = string_edges(self.data)
            self._done = True
        return self._edges


def inside_string(edges: list[int] | None, offset: int) -> bool:
    """Is this byte offset inside a triple-quoted string? (never, when `edges` is None)"""
    return bool(edges) and bisect.bisect_right(edges, offset) % 2 == 1


def statement_starts(data: bytes, edges: list[int] | LazyEdges | None = None) -> list[int] | None:
    """0-based indices of the lines that start a top-level statement; None when unsure."""
    if edges is None:
        edges = string_edges(data)
    elif isinstance(edges, LazyEdges):
        edges = edges.get()
    if edges is None or (b"\r" in data and data.count(b"\r") != data.count(b"\r\n")):
        return None  # ambiguous strings, or lone \r line ends that the parser counts differently
    helper = fastfind.native()
    if helper is not None:
        starts = helper.statement_starts(data, edges)
        if starts is not fastfind.OVERFLOW:
            return starts
    return statement_starts_python(data, edges)


def statement_starts_python(data: bytes, edges: list[int]) -> list[int]:
    """The loop of `statement_starts` in Python: the reference for the compiled one."""
    starts: list[int] = []
    decorating = False
    line_number = 0
    position = 0
    bisect_right = bisect.bisect_right
    count = data.count
    for start, word in _column_zero_words(data):
        line_number += count(b"\n", position, start)
        position = start
        if edges and bisect_right(edges, start) % 2:
            continue  # inside a triple-quoted string
        if start and data[max(0, start - 3) : start - 1].rstrip(b"\r").endswith(b"\\"):
            continue  # the previous line ends with a backslash continuation
        if word in _CONTINUATION:
            continue
        decorator = word[:1] == b"@"
        if decorating and (decorator or word in _DEFINITION):
            decorating = decorator  # still inside one decorated definition
            continue
        starts.append(line_number)
        decorating = decorator
    return starts


def _column_zero_words(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(offset, word) for every line that starts at column 0 with a name or a decorator."""
    first = _FIRST_WORD.match(data)
    if first is not None:
        yield 0, first.group()
    for match in _COLUMN_ZERO.finditer(data):
        yield match.start(1), match.group(1)


def _is_import_chunk(lines: list[str], start: int, end: int) -> bool:
    head = lines[start]
    if head.startswith(("import ", "from ")):
        return True
    if head.startswith(("if ", "try", "with ")):
        return any(line.lstrip().startswith(("import ", "from ")) for line in lines[start:end])
    return False


def select(lines: list[str], wanted: set[int], starts: list[int]) -> tuple[list[tuple[int, int]], list[bool]]:
    """Chunks as (start, end) 0-based half-open ranges, and which ones to keep (wanted lines are 1-based)."""
    bounds = [0, *starts] if not starts or starts[0] != 0 else list(starts)
    bounds.append(len(lines))
    chunks = [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1) if bounds[i] < bounds[i + 1]]
    ordered = sorted(wanted)
    keep = []
    for start, end in chunks:
        index = bisect.bisect_right(ordered, start)  # first wanted line (1-based) past this chunk's start
        hit = index < len(ordered) and ordered[index] <= end
        keep.append(hit or _is_import_chunk(lines, start, end))
    return chunks, keep


def blanked(lines: list[str], chunks: list[tuple[int, int]], keep: list[bool]) -> str:
    """The text with every chunk not kept replaced by empty lines."""
    out: list[str] = []
    for (start, end), kept in zip(chunks, keep, strict=True):
        out.extend(lines[start:end] if kept else [""] * (end - start))
    return "\n".join(out)

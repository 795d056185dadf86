"""Parse only the top-level statements that matter: those holding CUDA tokens, and the imports.

A file's other top-level statements are blanked (line count kept, so every line
and column stays where it was) before `ast.parse`. Statement starts are found
without a tokenizer: a line at column 0 that begins a name or decorator, outside a
triple-quoted string and not after a backslash continuation. When that guess is
wrong the blanked text does not parse, and the caller parses the whole file
instead, so a wrong guess costs time, never findings.
"""

from __future__ import annotations

import bisect
import re

LINE_BREAK = re.compile(r"\r\n|\r|\n")
_CONTINUATION = ("else", "elif", "except", "finally")
_TRIPLE = re.compile(r'"""|\'\'\'')
_DEFINITION = ("def ", "async ", "class ", "@")


def split_lines(text: str) -> list[str]:
    """Lines as the Python parser counts them (\\n, \\r\\n and \\r only; str.splitlines also splits on \\f)."""
    return LINE_BREAK.split(text)


_COLUMN_ZERO = re.compile(r"^[A-Za-z_@][^\n]*", re.MULTILINE)


def statement_starts(lines: list[str]) -> list[int]:
    """0-based indices of the lines that start a top-level statement."""
    text = "\n".join(lines)
    # Where triple-quoted strings open and close (quotes inside comments skipped).
    string_edges = _string_ranges(lines) if ('"""' in text or "\'\'\'" in text) else []
    starts: list[int] = []
    decorating = False
    line_number = 0
    position = 0
    for match in _COLUMN_ZERO.finditer(text):
        start = match.start()
        line_number += text.count("\n", position, start)
        position = start
        if string_edges and bisect.bisect_right(string_edges, start) % 2 == 1:
            continue  # inside a triple-quoted string
        if start >= 2 and text[start - 2] == "\\":
            continue  # the previous line ends with a backslash continuation
        line = match.group()
        word = line.split(None, 1)[0].rstrip(":")
        if word in _CONTINUATION:
            continue
        if decorating and line.startswith(_DEFINITION):
            decorating = line.startswith("@")  # still inside one decorated definition
            continue
        starts.append(line_number)
        decorating = line.startswith("@")
    return starts


def _string_ranges(lines: list[str]) -> list[int]:
    """Offsets (in the \\n-joined text) where triple-quoted strings open and close, alternating."""
    edges: list[int] = []
    state: str | None = None
    offset = 0
    for line in lines:
        if '"""' in line or "\'\'\'" in line:
            for match in _TRIPLE.finditer(line):
                quote = match.group()
                if state is None:
                    before = line[: match.start()]
                    hash_at = before.find("#")
                    if hash_at >= 0 and '"' not in before[:hash_at] and "'" not in before[:hash_at]:
                        break
                    state = quote
                    edges.append(offset + match.start())
                elif quote == state:
                    state = None
                    edges.append(offset + match.end())
        offset += len(line) + 1
    if state is not None:
        edges.append(offset)  # unterminated: open to the end
    return edges


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

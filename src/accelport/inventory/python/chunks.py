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


def _triple_state(line: str, state: str | None) -> str | None:
    """Whether a triple-quoted string is open after this line, given whether one was open before it."""
    for match in _TRIPLE.finditer(line):
        quote = match.group()
        if state is None:
            before = line[: match.start()]
            hash_at = before.find("#")
            if hash_at >= 0 and '"' not in before[:hash_at] and "'" not in before[:hash_at]:
                break  # the rest of the line is a comment
            state = quote
        elif quote == state:
            state = None
    return state


def statement_starts(lines: list[str]) -> list[int]:
    """0-based indices of the lines that start a top-level statement."""
    starts: list[int] = []
    open_string: str | None = None
    continued = False
    decorating = False
    for index, line in enumerate(lines):
        first = line[:1]
        if open_string is None and not continued and (first.isalpha() or first in "_@"):
            word = line.split(None, 1)[0].rstrip(":") if line.strip() else ""
            if word not in _CONTINUATION:
                if decorating and line.startswith(_DEFINITION):
                    decorating = line.startswith("@")  # still inside one decorated definition
                else:
                    starts.append(index)
                    decorating = line.startswith("@")
        if '"""' in line or "'''" in line:
            open_string = _triple_state(line, open_string)
        continued = line.endswith("\\")
    return starts


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
